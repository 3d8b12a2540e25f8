import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import OutpostConcurrency
import OutpostProtocol
import PostgresNIO
import ServiceLifecycle

/// The production engine: PostgreSQL, shared by any number of server processes.
///
/// No state that matters for correctness lives in the process: idempotency claims, records, the change
/// order and the signing secret are all in the database.
///
/// Pulls are gap-free without serialising writers: each change row carries its transaction's id
/// (`pg_current_xact_id()`), and a pull returns only rows of transactions older than the oldest one still
/// running (`pg_snapshot_xmin`), ordered by (transaction id, sequence). A transaction that commits late
/// therefore always lands after every cursor a reader could hold.
package struct PostgresStorage: SyncStorage {
    let client: PostgresClient
    let location: PostgresLocation
    let logger: Logger
    /// Runs inside each push transaction just before it commits; tests use it to hold a writer open.
    let beforeCommit: (@Sendable () async throws -> Void)?

    /// How often a push is retried after a deadlock or a concurrent claim of the same key.
    static let maxAttempts = 5

    /// How long start-up waits for the database before giving up with a clear error.
    let startupTimeout: Duration
    /// Where the bytes of uploaded files are kept, when not in the database.
    let files: FileDirectory?
    /// Whether this process has analyzed the tables PostgreSQL had not analyzed yet (see ``noteWritten(_:)``).
    let firstAnalysis = NIOLockedValueBox(FirstAnalysis())

    /// How long one operation may wait for the database, a connection from the pool included, before it
    /// fails as unavailable (503). While PostgreSQL is down the pool keeps reconnecting in the background;
    /// without this bound a request would wait for it with no answer at all.
    var operationTimeout: Duration { location.operationTimeout }

    /// - Parameter files: where the bytes of uploaded files are kept; nil keeps them in the database, in table
    ///   `file_chunks`. Every server of one database names the same directory.
    package init(
        location: PostgresLocation, logger: Logger, files: FileDirectory? = nil, startupTimeout: Duration = .seconds(15)
    ) {
        self.init(location: location, logger: logger, beforeCommit: nil, files: files, startupTimeout: startupTimeout)
    }

    init(
        location: PostgresLocation, logger: Logger, beforeCommit: (@Sendable () async throws -> Void)?,
        files: FileDirectory? = nil, startupTimeout: Duration = .seconds(15)
    ) {
        self.files = files
        self.location = location
        self.logger = logger
        self.beforeCommit = beforeCommit
        self.startupTimeout = startupTimeout
        // The pool logs every failed connection attempt; only warnings and worse belong in the server's log.
        var background = logger
        background.logLevel = max(logger.logLevel, .warning)
        self.client = PostgresClient(configuration: location.clientConfiguration, backgroundLogger: background)
    }

    package var summary: String { location.summary + (files.map { ", files in \($0.root.path)" } ?? "") }

    package func run() async throws {
        await client.run()
    }

    /// Brings the schema up to date. Only reaching the database is bounded by ``startupTimeout``: the
    /// migrations may then wait for another process's, or build an index over a large table, for as long as
    /// that takes.
    package func migrate() async throws {
        try await withStartupTimeout { [client, logger] in
            _ = try await self.translated { try await client.query("SELECT 1", logger: logger) }
        }
        try await migrateNow()
    }

    /// Fails with a clear error when the database does not answer within ``startupTimeout``, rather than
    /// leaving the pool to retry for minutes.
    private func withStartupTimeout(_ body: @escaping @Sendable () async throws -> Void) async throws {
        let timeout = startupTimeout
        let summary = location.summary
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await ContinuousClock().sleep(for: timeout)
                throw StorageError(.unavailable, "cannot reach \(summary) within \(timeout.components.seconds) s")
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    private func migrateNow() async throws {
        try await translated {
            try await client.withTransaction(logger: logger) { connection in
                // One migrator at a time, across every process sharing the database.
                try await connection.query("SELECT pg_advisory_xact_lock(7081981001)", logger: logger)
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS outpost_migrations (
                      version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())
                    """, logger: logger)
                var applied = Set<String>()
                for try await version in try await connection.query(
                    "SELECT version FROM outpost_migrations", logger: logger
                ).decode(String.self) {
                    applied.insert(version)
                }
                for migration in Self.migrations where !applied.contains(migration.version) {
                    for statement in migration.statements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                    try await connection.query(
                        "INSERT INTO outpost_migrations (version) VALUES (\(migration.version))", logger: logger)
                }
            }
        }
    }

    package func checkHealth() async throws {
        _ = try await guarded {
            try await client.query("SELECT 1", logger: logger)
        }
    }

    package func signingSecret(creatingWith make: @Sendable () -> [UInt8]) async throws -> [UInt8] {
        let candidate = make()
        return try await committed { [logger] connection in
            // The first process to start stores its secret; every other one reads that one.
            try await connection.query(
                """
                INSERT INTO outpost_settings (name, value) VALUES ('jwt_secret', \(ByteBuffer(bytes: candidate)))
                ON CONFLICT (name) DO NOTHING
                """, logger: logger)
            let rows = try await connection.query(
                "SELECT value FROM outpost_settings WHERE name = 'jwt_secret'", logger: logger)
            var secret: [UInt8]?
            for try await value in rows.decode(ByteBuffer.self) { secret = Array(buffer: value) }
            guard let secret else { throw StorageError(.corrupt, "the JWT secret is missing from outpost_settings") }
            return secret
        }
    }

    // MARK: Push

    package func push(
        _ items: [PushItem], context: PushContext, collections: CollectionRegistry
    ) async throws
        -> [MutationResult]
    {
        guard context.relayJournal == nil else {
            throw StorageError(.configuration, "a venue relay keeps its journal on SQLite; run it without --postgres")
        }
        // First without locks (see ``pushOptimistically(_:context:collections:)``); after another writer got
        // in the way, or when the push has conflicts to keep, on the locked path.
        var attempt = 0
        var locked = false
        while true {
            attempt += 1
            do {
                let optimistic = !locked
                let results = try await guarded {
                    if optimistic, let results = try await pushOptimistically(items, context: context, collections: collections) {
                        return results
                    }
                    return try await pushOnce(items, context: context, collections: collections)
                }
                noteWritten(items.count)
                return results
            } catch let error as StorageError where error.code == .concurrentClaim && attempt < Self.maxAttempts {
                locked = true
                continue
            }
        }
    }

    private func pushOnce(
        _ items: [PushItem], context: PushContext, collections: CollectionRegistry
    ) async throws
        -> [MutationResult]
    {
        let tenant = context.tenant
        let keys = Array(Set(items.compactMap(\.key)))
        // Idempotency rows never change once committed, so they are read before any transaction or lock: a
        // push of keys the server has all seen (a device replaying chunks whose answers it never heard) is
        // answered by this one query. A key another push claims after this read is caught when the insert
        // below claims fewer keys than planned, and the push starts again.
        let processed =
            keys.isEmpty
            ? [:]
            : try await client.withConnection { connection in
                try await Self.processed(tenant: tenant, keys: keys, connection: connection, logger: logger)
            }
        // Duplicates are answered from their idempotency rows (one of a superseded write with its record, read
        // below): their records need not be read or locked.
        let toRead = PushPlanner.recordKeys(of: items, context: context, excludingAnswered: processed).sorted()
        if toRead.isEmpty {
            let plan = PushPlanner.plan(
                items, context: context, processed: processed, records: [:], collections: collections)
            if plan.records.isEmpty && plan.mutations.isEmpty && plan.conflicts.isEmpty { return plan.results }
        }
        return try await client.withTransaction(logger: logger) { connection in
            // Per-record locks, taken in one order by every writer, make read-merge-write safe for records
            // that do not exist yet; rows of other records are never blocked.
            let locks = toRead.map { Self.lockKey(tenant: tenant, $0) }.sorted()
            if !locks.isEmpty {
                try await connection.query(
                    """
                    SELECT count(*) FROM (
                      SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT k FROM unnest(\(locks)::bigint[]) AS t(k)
                      ORDER BY k) AS ordered) AS locked
                    """, logger: logger)
            }
            var records: [RecordKey: StoredRecord] = [:]
            if !toRead.isEmpty {
                let rows = try await connection.query(Self.recordLookup(tenant: tenant, keys: toRead), logger: logger)
                for try await row in rows {
                    let record = try Self.record(row)
                    records[record.key] = record
                }
            }
            let plan = PushPlanner.plan(
                items, context: context, processed: processed, records: records, collections: collections)
            try await write(plan, tenant: tenant, connection: connection)
            try await beforeCommit?()
            return plan.results
        }
    }

    // MARK: First analysis

    struct FirstAnalysis {
        var written = 0
        var started = false
        var task: Task<Void, Never>?
    }

    /// Rows a process pushes before it analyzes the tables PostgreSQL has never analyzed.
    static let firstAnalysisAfter = 1000

    /// PostgreSQL plans a table it has never analyzed from default guesses. Those tie a push's primary-key
    /// probe with every index that starts with (tenant, collection), and the planner may pick one of those:
    /// each key then walks the whole collection, until autovacuum's first analysis, which comes up to a minute
    /// later. So once this process has pushed ``firstAnalysisAfter`` rows, it analyzes the tables that no one
    /// has yet; if that fails, it tries again after as many rows more.
    private func noteWritten(_ count: Int) {
        let start = firstAnalysis.withLockedValue { state -> Bool in
            guard !state.started else { return false }
            state.written += count
            state.started = state.written >= Self.firstAnalysisAfter
            return state.started
        }
        guard start else { return }
        let task = Task.detached { await analyzeNeverAnalyzed() }
        firstAnalysis.withLockedValue { $0.task = task }
    }

    /// Waits for the first analysis, if one started; for tests.
    func firstAnalysisFinished() async {
        await firstAnalysis.withLockedValue { $0.task }?.value
    }

    private func analyzeNeverAnalyzed() async {
        do {
            try await guarded {
                // By OID, so that tables of the same names in another schema are never the ones looked at.
                let rows = try await client.query(
                    """
                    SELECT relname FROM pg_stat_user_tables
                    WHERE relid IN ('records'::regclass, 'mutations'::regclass)
                      AND last_analyze IS NULL AND last_autoanalyze IS NULL
                    """, logger: logger)
                var tables: [String] = []
                for try await table in rows.decode(String.self) { tables.append(table) }
                // Only these two names can come back; the statement cannot take a table as a parameter.
                for table in tables where table == "records" || table == "mutations" {
                    try await client.query(PostgresQuery(unsafeSQL: "ANALYZE \(table)"), logger: logger)
                }
            }
        } catch {
            logger.warning("could not analyze the tables", metadata: ["error": "\(error)"])
            firstAnalysis.withLockedValue { $0 = FirstAnalysis() }
        }
    }

    /// What earlier pushes left under `keys`.
    private static func processed(
        tenant: String, keys: [String], connection: PostgresConnection, logger: Logger
    )
        async throws -> [String: ProcessedMutation]
    {
        var processed: [String: ProcessedMutation] = [:]
        let rows = try await connection.query(processedLookup(tenant: tenant, keys: keys), logger: logger)
        for try await (key, hash, status, version, conflict) in rows.decode((String, String, String, Int64, String?).self) {
            processed[key] = ProcessedMutation(
                contentHash: hash, status: try StorageCoding.known(status, "mutation status") as MutationResult.Status, version: version,
                conflict: try conflict.map { try StorageCoding.decode(ConflictDetail.self, from: $0) })
        }
        return processed
    }

    private func write(_ plan: PushPlan, tenant: String, connection: PostgresConnection) async throws {
        if !plan.records.isEmpty {
            _ = try await connection.execute(try RecordsInsert(tenant: tenant, records: plan.records), logger: logger)
        }
        if !plan.mutations.isEmpty {
            var count = 0
            for try await _ in try await connection.execute(try MutationsInsert(tenant: tenant, rows: plan.mutations), logger: logger) {
                count += 1
            }
            // Another transaction committed one of these keys after we looked: start again, and see it.
            guard count == plan.mutations.count else {
                throw StorageError(.concurrentClaim, "an idempotency key was claimed concurrently")
            }
        }
        if !plan.conflicts.isEmpty {
            let c = plan.conflicts
            try await connection.query(
                """
                INSERT INTO conflicts (tenant, conflict_id, collection, record_id, scope, idempotency_key, device_id,
                                       user_id, attempted, server_fields, base_version, server_version, client_ts,
                                       received_at)
                SELECT \(tenant), ci, c, i, s, k, d, u, a, sf, NULLIF(b, '')::bigint, sv, ts, ra
                FROM unnest(\(c.map(\.conflictId))::text[], \(c.map(\.collection))::text[], \(c.map(\.recordId))::text[],
                            \(c.map(\.scope))::text[],
                            \(c.map(\.idempotencyKey))::text[], \(c.map(\.deviceId))::text[], \(c.map(\.userId))::text[],
                            \(try c.map { try StorageCoding.encode($0.attemptedFields) })::text[],
                            \(try c.map { try StorageCoding.encode($0.serverFields) })::text[],
                            \(c.map { $0.baseVersion.map(String.init) ?? "" })::text[],
                            \(c.map(\.serverVersion))::bigint[], \(c.map(\.clientTimestamp.millisecondsSince1970))::bigint[],
                            \(c.map(\.receivedAt.millisecondsSince1970))::bigint[])
                     AS u(ci, c, i, s, k, d, u, a, sf, b, sv, ts, ra)
                """, logger: logger)
        }
    }

    // MARK: Reads

    package func pull(
        tenant: String, collection: String, scope: String?, owner: String?, after cursor: PullCursor,
        through: PullCursor?, limit: Int, maxBytes: Int
    ) async throws -> PulledChanges {
        try await guarded {
            try await client.withConnection { connection in
                // Taken before the read: every transaction older than it has finished, so the read sees them all.
                let horizon = try await Self.horizon(connection, logger: logger)
                let query = Self.pullQuery(
                    tenant: tenant, collection: collection, scope: scope, owner: owner, after: cursor, through: through,
                    horizon: horizon, limit: limit + 1)
                var records: [RecordRow] = []
                var last = cursor
                var hasMore = false
                var bytes = 0
                // By position, in the order of `changeColumns`: a pull can carry thousands of rows.
                let rows = try await connection.query(query, logger: logger)
                for try await (rowCollection, recordId, rowScope, version, tombstone, fields, createdAt, updatedAt, xid, seq)
                    in rows.decode((String, String, String, Int64, Bool, String, Int64, Int64, Int64, Int64).self)
                {
                    if records.count == limit || (!records.isEmpty && bytes >= maxBytes) {
                        hasMore = true
                        break
                    }
                    bytes += fields.utf8.count
                    records.append(
                        RecordRow(
                            collection: rowCollection, recordId: recordId, scope: rowScope, version: version,
                            tombstone: tombstone, fieldsJSON: fields, createdAt: createdAt, updatedAt: updatedAt))
                    last = PullCursor(xid: xid, seq: seq)
                }
                return PulledChanges(changes: records, cursor: last, hasMore: hasMore)
            }
        }
    }

    package func snapshotStart(tenant: String, collection: String, scope: String?) async throws -> SnapshotStart {
        try await guarded {
            try await client.withConnection { connection in
                let horizon = try await Self.horizon(connection, logger: logger)
                let query = Self.snapshotCountQuery(tenant: tenant, collection: collection, scope: scope)
                var total = 0
                for try await count in try await connection.query(query, logger: logger).decode(Int64.self) {
                    total = Int(count)
                }
                // Every change of a transaction at or after the horizon may be missing from the pages.
                return SnapshotStart(cursor: PullCursor(xid: max(horizon - 1, 0), seq: Int64.max), total: total)
            }
        }
    }

    package func snapshotPage(
        tenant: String, collection: String, scope: String?, after position: RecordPosition?, limit: Int,
        maxBytes: Int
    ) async throws -> [RecordRow] {
        try await guarded {
            let query = Self.snapshotPageQuery(
                tenant: tenant, collection: collection, scope: scope, after: position, limit: limit)
            var rows: [RecordRow] = []
            var bytes = 0
            for try await (collection, recordId, scope, version, fields, createdAt, updatedAt) in try await client.query(
                query, logger: logger
            ).decode((String, String, String, Int64, String, Int64, Int64).self) {
                rows.append(
                    RecordRow(
                        collection: collection, recordId: recordId, scope: scope, version: version, fieldsJSON: fields,
                        createdAt: createdAt, updatedAt: updatedAt))
                bytes += fields.utf8.count
                if bytes >= maxBytes { break }
            }
            return rows
        }
    }

    package func audit(
        tenant: String, collection: String, recordId: String, scope: String?
    ) async throws
        -> [AuditEntry]
    {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT idempotency_key, collection, record_id, scope, op, fields, device_id, user_id, user_name,
                       client_ts, received_at, status, version
                FROM mutations WHERE tenant = \(tenant) AND collection = \(collection) AND record_id = \(recordId)
                  AND (\(scope)::text IS NULL OR scope = \(scope)::text)
                ORDER BY client_ts, device_id, idempotency_key
                """, logger: logger)
            var entries: [AuditEntry] = []
            for try await row in rows {
                let c = row.makeRandomAccess()
                entries.append(
                    AuditEntry(
                        idempotencyKey: try c["idempotency_key"].decode(String.self),
                        collection: try c["collection"].decode(String.self),
                        recordId: try c["record_id"].decode(String.self),
                        scope: try c["scope"].decode(String.self),
                        op: try StorageCoding.known(try c["op"].decode(String.self), "mutation operation") as MutationOperation,
                        fields: try StorageCoding.decode(
                            [String: JSONValue].self, from: try c["fields"].decode(String.self)),
                        deviceId: try c["device_id"].decode(String.self),
                        userId: try c["user_id"].decode(String.self),
                        userName: try c["user_name"].decode(String.self),
                        clientTimestamp: Timestamp(millisecondsSince1970: try c["client_ts"].decode(Int64.self)),
                        receivedAt: Timestamp(millisecondsSince1970: try c["received_at"].decode(Int64.self)),
                        status: try StorageCoding.known(try c["status"].decode(String.self), "mutation status") as MutationResult.Status,
                        version: try c["version"].decode(Int64.self)))
            }
            return entries
        }
    }

    package func conflicts(tenant: String, collection: String?, limit: Int) async throws -> [ConflictRecord] {
        try await guarded {
            let query: PostgresQuery = """
                SELECT conflict_id, collection, record_id, scope, idempotency_key, device_id, user_id, attempted,
                       server_fields, base_version, server_version, client_ts, received_at
                FROM conflicts WHERE tenant = \(tenant)
                  AND (\(collection)::text IS NULL OR collection = \(collection)::text)
                ORDER BY received_at DESC, conflict_id LIMIT \(limit)
                """
            var conflicts: [ConflictRecord] = []
            for try await row in try await client.query(query, logger: logger) {
                let c = row.makeRandomAccess()
                conflicts.append(
                    ConflictRecord(
                        conflictId: try c["conflict_id"].decode(String.self),
                        collection: try c["collection"].decode(String.self),
                        recordId: try c["record_id"].decode(String.self),
                        scope: try c["scope"].decode(String.self),
                        idempotencyKey: try c["idempotency_key"].decode(String.self),
                        deviceId: try c["device_id"].decode(String.self),
                        userId: try c["user_id"].decode(String.self),
                        attemptedFields: try StorageCoding.decode(
                            [String: JSONValue].self, from: try c["attempted"].decode(String.self)),
                        serverFields: try StorageCoding.decode(
                            [String: JSONValue].self, from: try c["server_fields"].decode(String.self)),
                        baseVersion: try c["base_version"].decode(Int64?.self),
                        serverVersion: try c["server_version"].decode(Int64.self),
                        clientTimestamp: Timestamp(millisecondsSince1970: try c["client_ts"].decode(Int64.self)),
                        receivedAt: Timestamp(millisecondsSince1970: try c["received_at"].decode(Int64.self))))
            }
            return conflicts
        }
    }

    // MARK: Helpers

    /// The idempotency rows of `keys`: one primary-key probe per key.
    ///
    /// Planned as a join on the tenant's value, these lookups would follow the statistics: a tenant they have
    /// not seen yet is estimated at one row, so every index starting with the tenant looks as cheap as the
    /// primary key, and the planner may scan all of the tenant's rows for each key until the next ANALYZE.
    /// Here the tenant is a sub-select, whose value the planner does not look up, and each key is a lateral
    /// lookup of its own: a probe whatever the statistics say.
    static func processedLookup(tenant: String, keys: [String]) -> PostgresQuery {
        """
        SELECT m.* FROM unnest(\(keys)::text[]) AS u(k), LATERAL (
          SELECT idempotency_key, content_hash, status, version, conflict FROM mutations
          WHERE tenant = (SELECT \(tenant)::text) AND idempotency_key = u.k LIMIT 1) AS m
        """
    }

    /// The records of `keys`, planned as ``processedLookup(tenant:keys:)`` is.
    static func recordLookup(tenant: String, keys: [RecordKey]) -> PostgresQuery {
        """
        SELECT r.* FROM unnest(\(keys.map(\.collection))::text[], \(keys.map(\.recordId))::text[],
                               \(keys.map(\.scope))::text[]) AS u(c, i, s),
        LATERAL (SELECT \(unescaped: recordColumns) FROM records
                 WHERE tenant = (SELECT \(tenant)::text) AND collection = u.c AND record_id = u.i AND scope = u.s
                 LIMIT 1) AS r
        """
    }

    // The reads by scope. Each runs as an unnamed statement, which PostgreSQL plans with its values: a scope
    // given proves `scope <> ''`, the condition of the indexes by scope (migration v4); none given leaves
    // `scope` out, and the read takes records_by_change or the primary key.

    /// Changes after `cursor` and before `horizon`, in commit order.
    static func pullQuery(
        tenant: String, collection: String, scope: String?, owner: String? = nil, after cursor: PullCursor,
        through: PullCursor? = nil, horizon: Int64, limit: Int
    ) -> PostgresQuery {
        if let through {
            return """
                SELECT \(unescaped: changeColumns), change_xid, change_seq FROM records
                WHERE tenant = \(tenant) AND collection = \(collection)
                  AND (\(scope)::text IS NULL OR scope = \(scope)::text)
                  AND (\(owner)::text IS NULL OR owner = \(owner)::text)
                  AND (change_xid, change_seq) > (\(cursor.xid), \(cursor.seq))
                  AND (change_xid, change_seq) <= (\(through.xid), \(through.seq)) AND change_xid < \(horizon)
                ORDER BY change_xid, change_seq LIMIT \(limit)
                """
        }
        return """
            SELECT \(unescaped: changeColumns), change_xid, change_seq FROM records
            WHERE tenant = \(tenant) AND collection = \(collection)
              AND (\(scope)::text IS NULL OR scope = \(scope)::text)
              AND (\(owner)::text IS NULL OR owner = \(owner)::text)
              AND (change_xid, change_seq) > (\(cursor.xid), \(cursor.seq)) AND change_xid < \(horizon)
            ORDER BY change_xid, change_seq LIMIT \(limit)
            """
    }

    /// How many live records a snapshot will send.
    static func snapshotCountQuery(tenant: String, collection: String, scope: String?) -> PostgresQuery {
        """
        SELECT count(*) FROM records WHERE tenant = \(tenant) AND collection = \(collection)
          AND NOT tombstone AND (\(scope)::text IS NULL OR scope = \(scope)::text)
        """
    }

    /// A snapshot's next page: live records after `position`, by id (and scope, when the snapshot is of every
    /// scope: one record id may come once per scope).
    static func snapshotPageQuery(
        tenant: String, collection: String, scope: String?, after position: RecordPosition?, limit: Int
    ) -> PostgresQuery {
        guard let scope else {
            return """
                SELECT collection, record_id, scope, version, fields, created_at, updated_at FROM records
                WHERE tenant = \(tenant) AND collection = \(collection) AND NOT tombstone
                  AND (record_id, scope) > (\(position?.recordId ?? ""), \(position?.scope ?? ""))
                ORDER BY record_id, scope LIMIT \(limit)
                """
        }
        return """
            SELECT collection, record_id, scope, version, fields, created_at, updated_at FROM records
            WHERE tenant = \(tenant) AND collection = \(collection) AND NOT tombstone AND scope = \(scope)
              AND record_id > \(position?.recordId ?? "")
            ORDER BY record_id LIMIT \(limit)
            """
    }

    static let recordColumns =
        "collection, record_id, scope, owner, version, tombstone, fields, meta, created_at, updated_at"
    /// What a pull reads, in the order its reader takes them by position: everything but the merge stamps,
    /// which only a push needs.
    static let changeColumns = "collection, record_id, scope, version, tombstone, fields, created_at, updated_at"

    static func record(_ row: PostgresRow) throws -> StoredRecord {
        let c = row.makeRandomAccess()
        return StoredRecord(
            collection: try c["collection"].decode(String.self),
            recordId: try c["record_id"].decode(String.self),
            scope: try c["scope"].decode(String.self),
            owner: try c.contains("owner") ? c["owner"].decode(String.self) : "",
            version: try c["version"].decode(Int64.self),
            tombstone: try c["tombstone"].decode(Bool.self),
            fields: try StorageCoding.decode([String: JSONValue].self, from: try c["fields"].decode(String.self)),
            meta: try c.contains("meta")
                ? StorageCoding.decode(StoredRecord.Meta.self, from: try c["meta"].decode(String.self)) : .init(),
            createdAt: try c["created_at"].decode(Int64.self),
            updatedAt: try c["updated_at"].decode(Int64.self))
    }

    /// The oldest transaction id still running: every change below it is committed (or rolled back).
    static func horizon(_ connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        let rows = try await connection.query(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint", logger: logger)
        for try await value in rows.decode(Int64.self) { return value }
        throw StorageError(.corrupt, "no transaction horizon")
    }

    /// A stable 64-bit lock id for one record of one tenant.
    static func lockKey(tenant: String, _ key: RecordKey) -> Int64 {
        var hasher = SHA256()
        for part in [tenant, key.collection, key.recordId, key.scope] {
            hasher.update(data: Array(part.utf8))
            hasher.update(data: [0])
        }
        return hasher.finalize().withUnsafeBytes { $0.loadUnaligned(as: Int64.self) }
    }

    /// Runs `body` within ``operationTimeout``, translating PostgreSQL failures into ``StorageError``
    /// without SQL text or values.
    func guarded<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let timeout = operationTimeout
        return try await translated { try await Self.bounded(timeout, body) }
    }

    /// Runs `body`, translating PostgreSQL failures into ``StorageError`` without SQL text or values, with no
    /// bound of its own: for the migrations, which wait for another process's and may build an index over a
    /// large table for as long as that takes.
    func translated<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as StorageError {
            throw error
        } catch let error as PostgresTransactionError {
            if let inner = error.closureError as? StorageError { throw inner }
            throw Self.translate(error.closureError ?? error.commitError ?? error.beginError ?? error)
        } catch {
            throw Self.translate(error)
        }
    }

    /// ``guarded(_:)`` for what writes: `body` runs between `BEGIN` and `COMMIT`, and this returns only once the
    /// commit is confirmed. A lone statement must not be trusted with a write the server acknowledges:
    /// PostgreSQL reports it complete before its implicit transaction commits, and PostgresNIO ends the query
    /// there, so a commit that then failed (a deferred check, the database stopping) would go unseen.
    func committed<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await guarded { [client, logger] in
            try await client.withTransaction(logger: logger) { connection in try await body(connection) }
        }
    }

    /// Runs, as ``committed(_:)``, a statement that returns a row for each row it changed; true when it changed one.
    func changedRow(_ query: PostgresQuery) async throws -> Bool {
        try await committed { connection in
            let rows = try await connection.query(query, logger: logger)
            var changed = false
            for try await _ in rows { changed = true }
            return changed
        }
    }

    /// Runs `body`, and gives up after `timeout` without waiting for it to finish: an operation stuck on a
    /// connection that died under it may not heed cancellation, and must not hold its request forever.
    static func bounded<T: Sendable>(
        _ timeout: Duration, watch: DeadlineWatch = .shared, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await watch.bounded(timeout, body) {
            StorageError(.unavailable, "PostgreSQL did not answer within \(timeout.components.seconds) s")
        }
    }

    static func translate(_ error: any Error) -> StorageError {
        if let error = error as? StorageError { return error }
        guard let psql = error as? PSQLError else {
            return StorageError(.unavailable, "PostgreSQL is unreachable", underlying: error)
        }
        guard psql.code == .server, let state = psql.serverInfo?[.sqlState] else {
            return StorageError(.unavailable, "PostgreSQL is unreachable (\(psql.code))", underlying: error)
        }
        switch state {
        case "40P01", "40001", "23505":
            // Deadlock, serialization failure, or a key claimed concurrently: the push is retried.
            return StorageError(.concurrentClaim, "concurrent write (SQLSTATE \(state))", underlying: error)
        case _ where state.hasPrefix("08") || state.hasPrefix("53") || state.hasPrefix("57"):
            return StorageError(.unavailable, "PostgreSQL is unavailable (SQLSTATE \(state))", underlying: error)
        default:
            return StorageError(StorageError.Code(rawValue: "query_failed"), "a query failed (SQLSTATE \(state))", underlying: error)
        }
    }
}

/// A push's records, one statement for all of them, prepared once per connection: every push runs it, and
/// PostgreSQL must not parse and plan it again each time.
struct RecordsInsert: PostgresPreparedStatement {
    static let sql = """
        INSERT INTO records (tenant, collection, record_id, scope, owner, version, tombstone, fields, meta,
                             created_at, updated_at, change_xid, change_seq)
        SELECT $1, c, i, s, o, v, t, f, m, ca, ua, pg_current_xact_id()::text::bigint, nextval('change_seq')
        FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::boolean[], $7::text[], $8::text[],
                    $9::bigint[], $10::bigint[], $11::text[])
             WITH ORDINALITY AS u(c, i, s, v, t, f, m, ca, ua, o, n)
        ORDER BY n
        ON CONFLICT (tenant, collection, record_id, scope) DO UPDATE SET
          version = excluded.version, tombstone = excluded.tombstone,
          fields = excluded.fields, meta = excluded.meta, created_at = excluded.created_at,
          updated_at = excluded.updated_at, change_xid = excluded.change_xid, change_seq = excluded.change_seq
        """
    typealias Row = ()

    var bindings: PostgresBindings

    init(tenant: String, records: [StoredRecord]) throws {
        bindings = PostgresBindings(capacity: 11)
        bindings.append(tenant)
        try Self.appendRows(tenantless: records, to: &bindings)
        bindings.append(records.map(\.owner))
    }

    /// The nine arrays of `records`, in the order of the columns after the tenant (the owners, which only an
    /// insert writes, are bound apart); ``ConditionalWrite`` binds them too.
    static func appendRows(tenantless r: [StoredRecord], to bindings: inout PostgresBindings) throws {
        bindings.append(r.map(\.collection))
        bindings.append(r.map(\.recordId))
        bindings.append(r.map(\.scope))
        bindings.append(r.map(\.version))
        bindings.append(r.map(\.tombstone))
        bindings.append(try r.map { try StorageCoding.encode($0.fields) })
        bindings.append(r.map { StorageCoding.encode($0.meta) })
        bindings.append(r.map(\.createdAt))
        bindings.append(r.map(\.updatedAt))
    }

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> Row { () }
}

/// A push's idempotency rows, prepared once per connection like ``RecordsInsert``; answers the keys it
/// claimed, so that a key another push claimed first is noticed.
struct MutationsInsert: PostgresPreparedStatement {
    static let sql = """
        \(insert(from: 2))
        ON CONFLICT (tenant, idempotency_key) DO NOTHING
        RETURNING idempotency_key
        """

    /// The insert of the rows ``appendRows(tenantless:to:)`` binds, its ``arrayCount`` arrays from `$first` on and
    /// the tenant at `$1`: this statement's and the push statements' (``ConditionalWrite``, ``NewRecordsWrite``).
    static func insert(from first: Int) -> String {
        let types = [
            "text", "text", "text", "text", "text", "text", "text", "text", "text", "bigint", "text", "bigint",
            "text", "bigint", "text", "text",
        ]
        let arrays = types.enumerated().map { "$\($0.offset + first)::\($0.element)[]" }.joined(separator: ", ")
        return """
            INSERT INTO mutations (tenant, idempotency_key, content_hash, device_id, user_id, user_name, collection,
                                   record_id, op, fields, client_ts, base_version, received_at, status, version,
                                   conflict, scope)
            SELECT $1, k, h, d, u, un, c, i, o, f, ts, NULLIF(b, '')::bigint, ra, st, v, NULLIF(cf, ''), s
            FROM unnest(\(arrays))
                 AS u(k, h, d, u, un, c, i, o, f, ts, b, ra, st, v, cf, s)
            """
    }
    typealias Row = String

    var bindings: PostgresBindings

    init(tenant: String, rows: [MutationRow]) throws {
        bindings = PostgresBindings(capacity: 1 + Self.arrayCount)
        bindings.append(tenant)
        try Self.appendRows(tenantless: rows, to: &bindings)
    }

    /// How many arrays ``appendRows(tenantless:to:)`` binds.
    static let arrayCount = 16

    /// The ``arrayCount`` arrays of `rows`, in the order of the columns after the tenant; ``ConditionalWrite``
    /// binds them too.
    static func appendRows(tenantless rows: [MutationRow], to bindings: inout PostgresBindings) throws {
        let m = rows.map(\.mutation)
        bindings.append(m.map(\.idempotencyKey))
        bindings.append(rows.map(\.contentHash))
        bindings.append(rows.map(\.deviceId))
        bindings.append(rows.map(\.userId))
        bindings.append(rows.map(\.userName))
        bindings.append(m.map(\.collection))
        bindings.append(m.map(\.recordId))
        bindings.append(m.map(\.op.rawValue))
        bindings.append(try m.map { try StorageCoding.encode($0.fields) })
        bindings.append(m.map(\.clientTimestamp.millisecondsSince1970))
        bindings.append(m.map { $0.baseVersion.map(String.init) ?? "" })
        bindings.append(rows.map(\.receivedAt.millisecondsSince1970))
        bindings.append(rows.map(\.status.rawValue))
        bindings.append(rows.map(\.version))
        bindings.append(try rows.map { try $0.conflict.map { try StorageCoding.encode($0) } ?? "" })
        bindings.append(m.map { $0.scope ?? "" })
    }

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(String.self) }
}
