import Foundation
import GRDB
import OutpostProtocol
import PostgresNIO
import Testing

@testable import OutpostServer

/// Databases written before records were keyed by their scope upgrade in place: records keep their scope,
/// gain the owner who created them, and the same id can then live in another scope.
@Suite("Scoped records migration")
struct ScopedRecordsMigrationTests {
    /// What the earlier server stored: guest g1 of event A written by olga, note n1 written by ana.
    static let meta = StorageCoding.encode(StoredRecord.Meta())

    /// Checks an upgraded storage: owners and scopes, the audit's scope, and a second scope for the same id.
    static func checkUpgraded(_ storage: any SyncStorage) async throws {
        try await storage.settle()
        let guests = try await storage.pullAll(collection: "guests", scope: "A").records
        #expect(guests.map(\.recordId) == ["g1"] && guests[0].scope == "A")
        #expect(try await storage.audit(tenant: "acme", collection: "guests", recordId: "g1").map(\.scope) == ["A"])
        // Ana's activity is hers alone.
        let own = try await storage.pull(
            tenant: "acme", collection: "activities", scope: nil, owner: "ana", after: .start, limit: 10,
            maxBytes: 1 << 20)
        #expect(own.changes.map(\.recordId) == ["a1"])
        let others = try await storage.pull(
            tenant: "acme", collection: "activities", scope: nil, owner: "ben", after: .start, limit: 10,
            maxBytes: 1 << 20)
        #expect(others.changes.isEmpty)
        // Ben may not change Ana's activity: its owner came from its first mutation.
        let refused = try await storage.push(
            [Fixtures.upsert("a1", ["notes": "mine"], at: 50, collection: "activities", device: "dev-b")],
            device: "dev-b", user: "ben")
        #expect(refused[0].error?.code == .forbidden)
        // The same guest id in event B is a second record.
        let added = try await storage.push(
            [Fixtures.upsert("g1", ["event_id": "B", "name": "Ana"], at: 60, collection: "guests", device: "admin")],
            device: "admin", user: "olga", role: .organizer)
        #expect(added[0].status == .applied && added[0].version == 1)
        #expect(try await storage.pullAll(collection: "guests", scope: "A").records.count == 1)
        #expect(try await storage.pullAll(collection: "guests", scope: "B").records.count == 1)
    }

    @Test("a SQLite database of the previous schema keeps its records, with their scopes and owners")
    func sqlite() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-migration-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let storage = try SQLiteStorage(directory: directory)
        // Given a database as the previous version left it,
        try SQLiteStorage.migrator.migrate(storage.pool, upTo: "v2-monitor")
        try await storage.pool.write { db in
            for (collection, id, scope, fields, seq) in [
                ("guests", "g1", "A", #"{"event_id":"A","name":"Ana"}"#, 1),
                ("activities", "a1", "", #"{"type":"Session","date":"2026-11-21","duration_minutes":60}"#, 2),
            ] {
                try db.execute(
                    sql: """
                        INSERT INTO records (tenant, collection, record_id, scope, version, tombstone, fields, meta,
                                             created_at, updated_at, change_seq)
                        VALUES ('acme', ?, ?, ?, 1, 0, ?, ?, 0, 0, ?)
                        """, arguments: [collection, id, scope, fields, Self.meta, seq])
            }
            for (key, collection, id, user) in [("k1", "guests", "g1", "olga"), ("k2", "activities", "a1", "ana")] {
                try db.execute(
                    sql: """
                        INSERT INTO mutations (tenant, idempotency_key, content_hash, device_id, user_id, user_name,
                                               collection, record_id, op, fields, client_ts, base_version,
                                               received_at, status, version, conflict)
                        VALUES ('acme', ?, 'h', 'dev', ?, ?, ?, ?, 'upsert', '{}', 0, NULL, 0, 'applied', 1, NULL)
                        """, arguments: [key, user, user, collection, id])
            }
            try db.execute(sql: "UPDATE change_counter SET seq = 2")
        }
        // when the server starts on it,
        try await storage.withRunning { storage in
            try await storage.migrate()
            // then every record is kept, in its scope, owned by its first writer.
            let owners = try await storage.pool.read { db in
                try Row.fetchAll(db, sql: "SELECT record_id, owner FROM records ORDER BY record_id")
                    .map { "\($0["record_id"] as String)=\($0["owner"] as String)" }
            }
            #expect(owners == ["a1=ana", "g1=olga"])
            try await Self.checkUpgraded(storage)
        }
    }

    @Test("a PostgreSQL database of the previous schema keeps its records, with their scopes and owners")
    func postgres() async throws {
        let url = try await TestPostgres.shared.makeDatabase()
        let storage = PostgresStorage(
            location: try PostgresLocation(url: url), logger: Fixtures.quietLogger, startupTimeout: Fixtures.postgresStartup)
        try await storage.withRunning { storage in
            // Given a database as the previous version left it (its four migrations),
            let previous = PostgresStorage.migrations.prefix { $0.version != "v5-scoped-records" }
            #expect(previous.count == 4)
            var statements = previous.flatMap(\.statements).filter { !$0.hasPrefix("LOCK TABLE") }
            statements.append(
                "CREATE TABLE outpost_migrations (version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            statements += previous.map { "INSERT INTO outpost_migrations (version) VALUES ('\($0.version)')" }
            statements += [
                """
                INSERT INTO records (tenant, collection, record_id, scope, version, tombstone, fields, meta, created_at,
                                     updated_at, change_xid, change_seq)
                VALUES ('acme', 'guests', 'g1', 'A', 1, false, '{"event_id":"A","name":"Ana"}', '\(Self.meta)', 0, 0, 1,
                        nextval('change_seq')),
                       ('acme', 'activities', 'a1', '', 1, false,
                        '{"type":"Session","date":"2026-11-21","duration_minutes":60}', '\(Self.meta)', 0, 0, 1,
                        nextval('change_seq'))
                """,
                """
                INSERT INTO mutations (tenant, idempotency_key, content_hash, device_id, user_id, user_name, collection,
                                       record_id, op, fields, client_ts, base_version, received_at, status, version,
                                       conflict)
                VALUES ('acme', 'k1', 'h', 'dev', 'olga', 'Olga', 'guests', 'g1', 'upsert', '{}', 0, NULL, 0, 'applied', 1, NULL),
                       ('acme', 'k2', 'h', 'dev', 'ana', 'Ana', 'activities', 'a1', 'upsert', '{}', 0, NULL, 0, 'applied', 1, NULL)
                """,
            ]
            for statement in statements {
                try await storage.client.query(PostgresQuery(unsafeSQL: statement), logger: Fixtures.quietLogger)
            }
            // when the server starts on it,
            try await storage.migrate()
            // then every record is kept, in its scope, owned by its first writer.
            var owners: [String] = []
            for try await (id, owner) in try await storage.client.query(
                "SELECT record_id, owner FROM records ORDER BY record_id", logger: Fixtures.quietLogger
            ).decode((String, String).self) {
                owners.append("\(id)=\(owner)")
            }
            #expect(owners == ["a1=ana", "g1=olga"])
            try await Self.checkUpgraded(storage)
        }
        await TestPostgres.shared.dropDatabase(url: url)
    }
}
