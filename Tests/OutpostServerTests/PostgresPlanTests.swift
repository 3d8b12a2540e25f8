import Foundation
import OutpostProtocol
import PostgresNIO
import Testing

@testable import OutpostServer

/// A push's lookups must stay primary-key probes for a tenant the statistics have not seen yet: the case a
/// join on the tenant's value got wrong, scanning all of the tenant's rows for every key.
@Suite("PostgreSQL push lookups")
struct PostgresPlanTests {
    @Test("records and idempotency keys are probed by primary key for a tenant missing from the statistics")
    func probesForNewTenant() async throws {
        try await Self.withUnanalyzedStorage { storage in
            // Given statistics that know one tenant, and many rows of a second that they do not know,
            try await Self.run(
                [
                    Self.fill(tenant: "established", rows: 3000),
                    "ANALYZE records, mutations",
                    Self.fill(tenant: "newcomer", rows: 6000),
                ], in: storage)
            let keys = (0..<50).map { RecordKey(collection: "notes", recordId: "n\($0 * 97)") }
            // when a push of the newcomer looks its rows up,
            let records = try await Self.plan(
                of: PostgresStorage.recordLookup(tenant: "newcomer", keys: keys), in: storage)
            let mutations = try await Self.plan(
                of: PostgresStorage.processedLookup(tenant: "newcomer", keys: keys.map { "k-\($0.recordId)" }),
                in: storage)
            // then each key is one probe of the primary key, bound on every one of its columns.
            #expect(records.contains("using records_pkey on records"), "\(records)")
            #expect(!records.contains("Seq Scan on records") && !records.contains("records_by_"), "\(records)")
            #expect(Self.indexConditions(records).allSatisfy { $0.contains("record_id = ") }, "\(records)")
            #expect(mutations.contains("using mutations_pkey on mutations"), "\(mutations)")
            #expect(!mutations.contains("Seq Scan on mutations") && !mutations.contains("mutations_by_"), "\(mutations)")
            #expect(Self.indexConditions(mutations).allSatisfy { $0.contains("idempotency_key = ") }, "\(mutations)")
            // And the lookups find what is there.
            let found = try await storage.client.query(
                PostgresStorage.recordLookup(tenant: "newcomer", keys: keys), logger: Fixtures.quietLogger)
            var count = 0
            for try await _ in found { count += 1 }
            #expect(count == keys.count)
        }
    }

    @Test("reads by scope use the indexes by scope, which hold only the records of scoped collections")
    func scopedIndexes() async throws {
        try await Self.withUnanalyzedStorage { storage in
            // Given 20,000 guests in ten events, and 20,000 notes of a collection without a scope,
            try await Self.run(
                [
                    """
                    INSERT INTO records (tenant, collection, record_id, scope, version, tombstone, fields, meta,
                                         created_at, updated_at, change_xid, change_seq)
                    SELECT 'acme', c, left(c, 1) || n, CASE c WHEN 'guests' THEN 'ev' || (n % 10) ELSE '' END,
                           1, false, '{}', '{}', 0, 0, 5, nextval('change_seq')
                    FROM generate_series(0, 20000) AS n, unnest(ARRAY['guests', 'notes']) AS c
                    """,
                    // A vacuum counts an index's entries exactly when it removes some (with INDEX_CLEANUP ON,
                    // even a few); an analysis after it would leave an estimate instead.
                    "DELETE FROM records WHERE record_id IN ('g0', 'n0')",
                    "ANALYZE records",
                    "VACUUM (INDEX_CLEANUP ON) records",
                ], in: storage)
            // the indexes by scope hold the guests alone, where the index by change holds every record;
            let entries = try await Self.indexEntries(in: storage)
            #expect(entries["records_scoped_by_change"] == 20000, "\(entries)")
            #expect(entries["records_scoped_by_id"] == 20000, "\(entries)")
            #expect(entries["records_by_change"] == 40000, "\(entries)")
            #expect(entries["records_by_scope_change"] == nil && entries["records_by_scope_id"] == nil, "\(entries)")
            // a pull and a snapshot of one event read them,
            let cursor = PullCursor(xid: 0, seq: 0)
            let scopedPull = try await Self.plan(
                of: PostgresStorage.pullQuery(tenant: "acme", collection: "guests", scope: "ev3", after: cursor, horizon: 100, limit: 501),
                in: storage)
            #expect(scopedPull.contains("using records_scoped_by_change"), "\(scopedPull)")
            let scopedPage = try await Self.plan(
                of: PostgresStorage.snapshotPageQuery(tenant: "acme", collection: "guests", scope: "ev3", after: nil, limit: 500),
                in: storage)
            #expect(scopedPage.contains("using records_scoped_by_id"), "\(scopedPage)")
            let scopedCount = try await Self.plan(
                of: PostgresStorage.snapshotCountQuery(tenant: "acme", collection: "guests", scope: "ev3"), in: storage)
            #expect(scopedCount.contains("records_scoped_by_"), "\(scopedCount)")
            // and reads of a whole collection take the index by change and the primary key.
            let wholePull = try await Self.plan(
                of: PostgresStorage.pullQuery(tenant: "acme", collection: "notes", scope: nil, after: cursor, horizon: 100, limit: 501),
                in: storage)
            #expect(wholePull.contains("using records_by_change"), "\(wholePull)")
            let wholePage = try await Self.plan(
                of: PostgresStorage.snapshotPageQuery(tenant: "acme", collection: "notes", scope: nil, after: nil, limit: 500),
                in: storage)
            #expect(wholePage.contains("using records_pkey"), "\(wholePage)")
            // The pages of one event hold its guests only.
            let page = try await storage.snapshotPage(
                tenant: "acme", collection: "guests", scope: "ev3", after: nil, limit: 5000, maxBytes: 1 << 20)
            #expect(page.count == 2000 && page.allSatisfy { $0.scope == "ev3" })
        }
    }

    @Test("a database from before the indexes by scope were partial is migrated to them, its records kept")
    func scopedIndexesMigrated() async throws {
        try await Self.withUnanalyzedStorage { storage in
            // Given a database as the third migration left it, holding a note,
            _ = try await storage.push([
                Fixtures.upsert("n1", ["text": .string("a note")])
            ])
            try await Self.undoScopedIndexes(in: storage)
            // when a server starts on it,
            try await storage.migrate()
            // the indexes by scope are the partial ones, and the record is still there.
            let definitions = try await Self.indexDefinitions(in: storage)
            #expect(definitions["records_by_scope_change"] == nil && definitions["records_by_scope_id"] == nil, "\(definitions)")
            #expect(definitions["records_scoped_by_change"]?.hasSuffix("WHERE (scope <> ''::text)") == true, "\(definitions)")
            #expect(definitions["records_scoped_by_id"]?.hasSuffix("WHERE (scope <> ''::text)") == true, "\(definitions)")
            #expect(try await storage.pullAll().records.map(\.recordId) == ["n1"])
        }
    }

    @Test("an upgrade while another server's push has read records and is about to write them: both go through")
    func scopedIndexesMigratedUnderTraffic() async throws {
        try await Self.withUnanalyzedStorage { storage in
            _ = try await storage.push([Fixtures.upsert("n1", ["text": .string("a note")])])
            try await Self.undoScopedIndexes(in: storage)
            try await storage.client.withConnection { connection in
                // Given another server's transaction that has read records, as a push on the locked path does,
                try await connection.query("BEGIN", logger: Fixtures.quietLogger)
                try await connection.query("SELECT count(*) FROM records", logger: Fixtures.quietLogger)
                // when a server upgrades meanwhile, and its migration waits for that transaction,
                async let migrated: Void = storage.migrate()
                try await PostgresGapFreeTests.waitForLockWaiter(storage)
                // the transaction still writes and commits (a migration holding the index build's lock while it
                // waited for the drop's would deadlock with it here),
                try await connection.query(
                    """
                    INSERT INTO records (tenant, collection, record_id, scope, version, tombstone, fields, meta,
                                         created_at, updated_at, change_xid, change_seq)
                    VALUES ('acme', 'notes', 'n2', '', 1, false, '{}', '{}', 0, 0, 1, nextval('change_seq'))
                    """, logger: Fixtures.quietLogger)
                try await connection.query("COMMIT", logger: Fixtures.quietLogger)
                try await migrated
            }
            // and the upgrade is done after it, with both records kept.
            let definitions = try await Self.indexDefinitions(in: storage)
            #expect(definitions["records_scoped_by_change"] != nil && definitions["records_by_scope_change"] == nil, "\(definitions)")
            #expect(try await storage.pullAll().records.map(\.recordId).sorted() == ["n1", "n2"])
        }
    }

    /// Puts the indexes by scope back as the third migration left them, and forgets the fourth.
    static func undoScopedIndexes(in storage: PostgresStorage) async throws {
        try await run(
            [
                "DROP INDEX records_scoped_by_change",
                "DROP INDEX records_scoped_by_id",
                "CREATE INDEX records_by_scope_change ON records (tenant, collection, scope, change_xid, change_seq)",
                "CREATE INDEX records_by_scope_id ON records (tenant, collection, scope, record_id)",
                "DELETE FROM outpost_migrations WHERE version = 'v4-scoped-indexes'",
            ], in: storage)
    }

    /// The entries each index on `records` held at the last vacuum, by index name.
    static func indexEntries(in storage: PostgresStorage) async throws -> [String: Int] {
        var entries: [String: Int] = [:]
        let rows = try await storage.client.query(
            "SELECT relname, reltuples::bigint FROM pg_class WHERE oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'records'::regclass)",
            logger: Fixtures.quietLogger)
        for try await (name, count) in rows.decode((String, Int64).self) { entries[name] = Int(count) }
        return entries
    }

    /// The definition of each index on `records`, by name.
    static func indexDefinitions(in storage: PostgresStorage) async throws -> [String: String] {
        var definitions: [String: String] = [:]
        let rows = try await storage.client.query(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'records'", logger: Fixtures.quietLogger)
        for try await (name, definition) in rows.decode((String, String).self) { definitions[name] = definition }
        return definitions
    }

    /// A migrated storage on a database of its own, with autovacuum off on the push's tables: only the
    /// analyses a test runs, or the server does, give them statistics.
    static func withUnanalyzedStorage(_ body: @escaping @Sendable (PostgresStorage) async throws -> Void) async throws {
        try await withStorage(.postgres) { storage in
            let storage = try #require(storage as? PostgresStorage)
            try await run(
                ["ALTER TABLE records SET (autovacuum_enabled = false)", "ALTER TABLE mutations SET (autovacuum_enabled = false)"],
                in: storage)
            try await body(storage)
        }
    }

    static func run(_ statements: [String], in storage: PostgresStorage) async throws {
        for statement in statements {
            try await storage.client.query(PostgresQuery(unsafeSQL: statement), logger: Fixtures.quietLogger)
        }
    }

    /// `rows` records of `tenant` with their idempotency rows; record `nK` has key `k-nK`.
    static func fill(tenant: String, rows: Int) -> String {
        """
        WITH g AS (SELECT n FROM generate_series(0, \(rows - 1)) AS n),
        r AS (INSERT INTO records (tenant, collection, record_id, scope, version, tombstone, fields, meta,
                                   created_at, updated_at, change_xid, change_seq)
              SELECT '\(tenant)', 'notes', 'n' || n, '', 1, false, '{}', '{}', 0, 0, 1, nextval('change_seq') FROM g)
        INSERT INTO mutations (tenant, idempotency_key, content_hash, device_id, user_id, user_name, collection,
                               record_id, op, fields, client_ts, received_at, status, version)
        SELECT '\(tenant)', 'k-n' || n, 'h', 'dev', 'u', 'U', 'notes', 'n' || n, 'upsert', '{}', n, n, 'applied', 1 FROM g
        """
    }

    /// The plan's index conditions, one per index scan; never empty when the plan has one.
    static func indexConditions(_ plan: String) -> [String] {
        plan.split(separator: "\n").filter { $0.contains("Index Cond:") }.map(String.init)
    }

    /// The text of the plan PostgreSQL chooses for `query`, with its values bound.
    static func plan(of query: PostgresQuery, in storage: PostgresStorage) async throws -> String {
        let explain = PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds)
        var lines: [String] = []
        for try await line in try await storage.client.query(explain, logger: Fixtures.quietLogger).decode(String.self) {
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }
}

/// A new database: PostgreSQL has no statistics until autovacuum's first analysis, and plans a push's record
/// lookup from guesses that can walk a whole collection per key.
@Suite("PostgreSQL first analysis")
struct PostgresFirstAnalysisTests {
    @Test("after its first 1,000 pushed rows a server analyzes the tables no one has, and lookups probe the primary key")
    func analyzesNewTables() async throws {
        // Autovacuum stays out of it: any analysis seen below is the server's.
        try await PostgresPlanTests.withUnanalyzedStorage { storage in
            func push(_ range: Range<Int>) async throws {
                _ = try await storage.push(range.map { Fixtures.upsert("n\($0)", ["text": .string("note \($0)")], at: Double($0)) })
            }
            try await push(0..<500)
            await storage.firstAnalysisFinished()
            #expect(try await Self.analyzed(storage).isEmpty, "analyzed before 1,000 rows")
            try await push(500..<1000)
            await storage.firstAnalysisFinished()
            #expect(try await Self.analyzed(storage) == ["mutations", "records"])
            let keys = (0..<50).map { RecordKey(collection: "notes", recordId: "n\($0 * 13)") }
            let plan = try await PostgresPlanTests.plan(
                of: PostgresStorage.recordLookup(tenant: "acme", keys: keys), in: storage)
            #expect(plan.contains("using records_pkey on records"), "\(plan)")
        }
    }

    /// The tables analyzed by hand (not by autovacuum), by name.
    static func analyzed(_ storage: PostgresStorage) async throws -> [String] {
        var names: [String] = []
        let rows = try await storage.client.query(
            "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL ORDER BY relname",
            logger: Fixtures.quietLogger)
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }
}
