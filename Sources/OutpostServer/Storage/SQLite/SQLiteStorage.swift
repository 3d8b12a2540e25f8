import Foundation
import GRDB
import Logging
import OutpostProtocol
import ServiceLifecycle

/// The embedded engine: one SQLite file in WAL mode, every commit flushed to disk (`synchronous=FULL`).
///
/// SQLite runs one writer at a time, so the change sequence is the commit order and pulls are gap-free.
package struct SQLiteStorage: SyncStorage {
    package static let databaseFileName = "outpost.sqlite"
    static let secretFileName = "jwt-secret"

    /// The folder of uploaded files' bytes, in the data folder unless the operator names another.
    package static let fileDirectoryName = "files"

    let pool: DatabasePool
    let directory: URL
    /// Where the bytes of uploaded files are kept.
    let files: FileDirectory

    /// Opens (creating when needed) the store in `directory`, the bytes of uploaded files in `fileDirectory`
    /// (by default the folder `files` in it).
    ///
    /// - Throws: ``StorageError`` with code `configuration` when a folder cannot be created or opened.
    package init(directory: URL, fileDirectory: URL? = nil) throws {
        self.directory = directory
        self.files = FileDirectory(root: fileDirectory ?? directory.appendingPathComponent(Self.fileDirectoryName))
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            var configuration = Configuration()
            configuration.busyMode = .timeout(10)
            configuration.prepareDatabase { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
            }
            self.pool = try DatabasePool(
                path: directory.appendingPathComponent(Self.databaseFileName).path, configuration: configuration)
        } catch {
            throw StorageError(.configuration, "cannot open the SQLite store in \(directory.path)", underlying: error)
        }
        try files.prepare()
    }

    package var summary: String {
        "SQLite at \(directory.appendingPathComponent(Self.databaseFileName).path), files in \(files.root.path)"
    }

    package func run() async throws {
        try? await gracefulShutdown()
    }

    package func migrate() async throws {
        try Self.migrator.migrate(pool)
        try await moveFileChunks()
    }

    package func checkHealth() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    package func signingSecret(creatingWith make: @Sendable () -> [UInt8]) async throws -> [UInt8] {
        let url = directory.appendingPathComponent(Self.secretFileName)
        if let data = FileManager.default.contents(atPath: url.path) {
            return Array(data)
        }
        let secret = make()
        // Created with mode 0600 so that no other user can read it; never overwritten.
        let created = FileManager.default.createFile(
            atPath: url.path, contents: Data(secret), attributes: [.posixPermissions: 0o600])
        guard created, let data = FileManager.default.contents(atPath: url.path) else {
            throw StorageError(.configuration, "cannot write the JWT secret in \(directory.path)")
        }
        return Array(data)
    }

    // MARK: Push

    package func push(
        _ items: [PushItem], context: PushContext, collections: CollectionRegistry
    ) async throws
        -> [MutationResult]
    {
        try await pool.write { db in
            let keys = items.compactMap(\.key)
            var processed: [String: ProcessedMutation] = [:]
            // Cached statements: compiling (and GRDB's authorizer) cost more than running them.
            let findKey = try db.cachedStatement(
                sql: "SELECT content_hash, status, version, conflict FROM mutations WHERE tenant = ? AND idempotency_key = ?")
            for key in Set(keys) {
                if let row = try Row.fetchOne(findKey, arguments: [context.tenant, key]) {
                    processed[key] = try Self.processedMutation(row)
                }
            }
            var records: [RecordKey: StoredRecord] = [:]
            let findRecord = try db.cachedStatement(
                sql: "SELECT * FROM records WHERE tenant = ? AND collection = ? AND record_id = ? AND scope = ?")
            for recordKey in PushPlanner.recordKeys(of: items, context: context, excludingAnswered: processed) {
                if let row = try Row.fetchOne(
                    findRecord, arguments: [context.tenant, recordKey.collection, recordKey.recordId, recordKey.scope])
                {
                    records[recordKey] = try Self.record(row)
                }
            }
            var plan = PushPlanner.plan(
                items, context: context, processed: processed, records: records, collections: collections)
            if let versions = context.serverVersions { plan = plan.adopting(versions, stored: records) }
            try Self.write(plan, tenant: context.tenant, db: db)
            if let journal = context.relayJournal { try Self.journal(plan, context: context, journal: journal, db: db) }
            return plan.results
        }
    }

    /// Writes `plan`: its records, each with the next change number, its mutations and its conflicts.
    static func write(_ plan: PushPlan, tenant: String, db: Database) throws {
        if !plan.records.isEmpty {
            var seq = try Int64.fetchOne(db, sql: "SELECT seq FROM change_counter WHERE id = 1") ?? 0
            let upsert = try db.cachedStatement(
                sql: """
                    INSERT INTO records (tenant, collection, record_id, scope, owner, version, tombstone, fields,
                                         meta, created_at, updated_at, change_seq)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (tenant, collection, record_id, scope) DO UPDATE SET
                      version = excluded.version, tombstone = excluded.tombstone,
                      fields = excluded.fields, meta = excluded.meta, created_at = excluded.created_at,
                      updated_at = excluded.updated_at, change_seq = excluded.change_seq
                    """)
            for record in plan.records {
                seq += 1
                try upsert.execute(
                    arguments: [
                        tenant, record.collection, record.recordId, record.scope, record.owner, record.version,
                        record.tombstone,
                        try StorageCoding.encode(record.fields), StorageCoding.encode(record.meta),
                        record.createdAt, record.updatedAt, seq,
                    ])
            }
            try db.execute(sql: "UPDATE change_counter SET seq = ? WHERE id = 1", arguments: [seq])
        }
        let insertMutation = try db.cachedStatement(
            sql: """
                INSERT INTO mutations (tenant, idempotency_key, content_hash, device_id, user_id, user_name,
                                       collection, record_id, scope, op, fields, client_ts, base_version,
                                       received_at, status, version, conflict)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for row in plan.mutations {
            let m = row.mutation
            try insertMutation.execute(
                arguments: [
                    tenant, m.idempotencyKey, row.contentHash, row.deviceId, row.userId, row.userName,
                    m.collection, m.recordId, m.scope ?? "", m.op.rawValue, try StorageCoding.encode(m.fields),
                    m.clientTimestamp.millisecondsSince1970, m.baseVersion, row.receivedAt.millisecondsSince1970,
                    row.status.rawValue, row.version, try row.conflict.map { try StorageCoding.encode($0) },
                ])
        }
        for conflict in plan.conflicts {
            try db.execute(
                sql: """
                    INSERT INTO conflicts (tenant, conflict_id, collection, record_id, scope, idempotency_key,
                                           device_id, user_id, attempted, server_fields, base_version,
                                           server_version, client_ts, received_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    tenant, conflict.conflictId, conflict.collection, conflict.recordId, conflict.scope,
                    conflict.idempotencyKey,
                    conflict.deviceId, conflict.userId, try StorageCoding.encode(conflict.attemptedFields),
                    try StorageCoding.encode(conflict.serverFields), conflict.baseVersion, conflict.serverVersion,
                    conflict.clientTimestamp.millisecondsSince1970, conflict.receivedAt.millisecondsSince1970,
                ])
        }
    }

    // MARK: Reads

    package func pull(
        tenant: String, collection: String, scope: String?, owner: String?, after cursor: PullCursor,
        through: PullCursor?, limit: Int, maxBytes: Int
    ) async throws -> PulledChanges {
        try await pool.read { db in
            var sql = "SELECT \(Self.changeColumns) FROM records WHERE tenant = ? AND collection = ? AND change_seq > ?"
            var arguments: StatementArguments = [tenant, collection, cursor.seq]
            if let scope {
                sql += " AND scope = ?"
                arguments += [scope]
            }
            if let owner {
                sql += " AND owner = ?"
                arguments += [owner]
            }
            if let through {
                sql += " AND change_seq <= ?"
                arguments += [through.seq]
            }
            sql += " ORDER BY change_seq LIMIT ?"
            arguments += [limit + 1]
            // Read in place, by position (the order of `changeColumns`): a pull can carry thousands of rows. The
            // statement is compiled once per connection: a device's refresh is a run of pulls.
            var records: [RecordRow] = []
            var last = cursor
            var hasMore = false
            var bytes = 0
            let rows = try Row.fetchCursor(db.cachedStatement(sql: sql), arguments: arguments)
            while let row = try rows.next() {
                if records.count == limit || (!records.isEmpty && bytes >= maxBytes) {
                    hasMore = true
                    break
                }
                let fields: String = row[5]
                bytes += fields.utf8.count
                records.append(
                    RecordRow(
                        collection: row[0], recordId: row[1], scope: row[2], version: row[3], tombstone: row[4],
                        fieldsJSON: fields, createdAt: row[6], updatedAt: row[7]))
                last = PullCursor(xid: 0, seq: row[8])
            }
            return PulledChanges(changes: records, cursor: last, hasMore: hasMore)
        }
    }

    package func snapshotStart(tenant: String, collection: String, scope: String?) async throws -> SnapshotStart {
        try await pool.read { db in
            let seq = try Int64.fetchOne(db, sql: "SELECT seq FROM change_counter WHERE id = 1") ?? 0
            var sql = "SELECT COUNT(*) FROM records WHERE tenant = ? AND collection = ? AND tombstone = 0"
            var arguments: StatementArguments = [tenant, collection]
            if let scope {
                sql += " AND scope = ?"
                arguments += [scope]
            }
            let total = try Int.fetchOne(db, sql: sql, arguments: arguments) ?? 0
            return SnapshotStart(cursor: PullCursor(xid: 0, seq: seq), total: total)
        }
    }

    package func snapshotPage(
        tenant: String, collection: String, scope: String?, after position: RecordPosition?, limit: Int,
        maxBytes: Int
    ) async throws -> [RecordRow] {
        try await pool.read { db in
            var sql =
                "SELECT collection, record_id, scope, version, fields, created_at, updated_at FROM records WHERE tenant = ? AND collection = ? AND tombstone = 0"
            var arguments: StatementArguments = [tenant, collection]
            if let scope {
                sql += " AND scope = ?"
                arguments += [scope]
                if let position {
                    sql += " AND record_id > ?"
                    arguments += [position.recordId]
                }
                sql += " ORDER BY record_id LIMIT ?"
            } else {
                // Every scope: the same record id may come once per scope.
                if let position {
                    sql += " AND (record_id, scope) > (?, ?)"
                    arguments += [position.recordId, position.scope]
                }
                sql += " ORDER BY record_id, scope LIMIT ?"
            }
            arguments += [limit]
            var rows: [RecordRow] = []
            var bytes = 0
            let cursor = try Row.fetchCursor(db.cachedStatement(sql: sql), arguments: arguments)
            while rows.isEmpty || bytes < maxBytes, let row = try cursor.next() {
                let fields: String = row[4]
                bytes += fields.utf8.count
                rows.append(
                    RecordRow(
                        collection: row[0], recordId: row[1], scope: row[2], version: row[3], fieldsJSON: fields,
                        createdAt: row[5], updatedAt: row[6]))
            }
            return rows
        }
    }

    package func audit(
        tenant: String, collection: String, recordId: String, scope: String?
    ) async throws
        -> [AuditEntry]
    {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM mutations WHERE tenant = ? AND collection = ? AND record_id = ?
                      AND (? IS NULL OR scope = ?)
                    ORDER BY client_ts, device_id, idempotency_key
                    """, arguments: [tenant, collection, recordId, scope, scope]
            ).map(Self.auditEntry)
        }
    }

    package func conflicts(tenant: String, collection: String?, limit: Int) async throws -> [ConflictRecord] {
        try await pool.read { db in
            var sql = "SELECT * FROM conflicts WHERE tenant = ?"
            var arguments: StatementArguments = [tenant]
            if let collection {
                sql += " AND collection = ?"
                arguments += [collection]
            }
            sql += " ORDER BY received_at DESC, conflict_id LIMIT ?"
            arguments += [limit]
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map(Self.conflict)
        }
    }

    // MARK: Rows

    static func processedMutation(_ row: Row) throws -> ProcessedMutation {
        let conflict: String? = row["conflict"]
        return ProcessedMutation(
            contentHash: row["content_hash"],
            status: try StorageCoding.known(row["status"] as String, "mutation status") as MutationResult.Status,
            version: row["version"],
            conflict: try conflict.map { try StorageCoding.decode(ConflictDetail.self, from: $0) })
    }

    /// What a pull reads, in the order its reader takes them by position: everything but the merge stamps,
    /// which only a push needs.
    static let changeColumns = "collection, record_id, scope, version, tombstone, fields, created_at, updated_at, change_seq"

    static func record(_ row: Row) throws -> StoredRecord {
        let meta: String? = row["meta"]
        return StoredRecord(
            collection: row["collection"], recordId: row["record_id"], scope: row["scope"], owner: row["owner"],
            version: row["version"], tombstone: row["tombstone"],
            fields: try StorageCoding.decode([String: JSONValue].self, from: row["fields"]),
            meta: try meta.map { try StorageCoding.decode(StoredRecord.Meta.self, from: $0) } ?? .init(),
            createdAt: row["created_at"], updatedAt: row["updated_at"])
    }

    static func auditEntry(_ row: Row) throws -> AuditEntry {
        AuditEntry(
            idempotencyKey: row["idempotency_key"], collection: row["collection"], recordId: row["record_id"],
            scope: row["scope"], op: try StorageCoding.known(row["op"] as String, "mutation operation") as MutationOperation,
            fields: try StorageCoding.decode([String: JSONValue].self, from: row["fields"]),
            deviceId: row["device_id"], userId: row["user_id"], userName: row["user_name"],
            clientTimestamp: Timestamp(millisecondsSince1970: row["client_ts"]),
            receivedAt: Timestamp(millisecondsSince1970: row["received_at"]),
            status: try StorageCoding.known(row["status"] as String, "mutation status") as MutationResult.Status, version: row["version"])
    }

    static func conflict(_ row: Row) throws -> ConflictRecord {
        ConflictRecord(
            conflictId: row["conflict_id"], collection: row["collection"], recordId: row["record_id"],
            scope: row["scope"], idempotencyKey: row["idempotency_key"], deviceId: row["device_id"], userId: row["user_id"],
            attemptedFields: try StorageCoding.decode([String: JSONValue].self, from: row["attempted"]),
            serverFields: try StorageCoding.decode([String: JSONValue].self, from: row["server_fields"]),
            baseVersion: row["base_version"], serverVersion: row["server_version"],
            clientTimestamp: Timestamp(millisecondsSince1970: row["client_ts"]),
            receivedAt: Timestamp(millisecondsSince1970: row["received_at"]))
    }
}
