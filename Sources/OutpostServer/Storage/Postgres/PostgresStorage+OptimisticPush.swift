import Logging
import OutpostProtocol
import PostgresNIO

/// A push's first attempt: at most two statements on one connection, the write between `BEGIN` and `COMMIT`.
///
/// The write has a transaction of its own, never the implicit one around a single statement: PostgreSQL
/// reports a statement complete before that implicit transaction commits, and PostgresNIO ends the query
/// there, so a commit that then fails (a deferred check, the server stopping) would go unseen and the push be
/// answered as applied with nothing stored. `COMMIT` is answered only once the commit is made.
///
/// The locked path (``PostgresStorage/push(_:context:collections:)``'s fallback) spends seven round trips on
/// a push: the idempotency lookup, `BEGIN`, the record locks, the record lookup, two inserts and `COMMIT`.
/// Most pushes touch records no other push is changing, so this path reads without locks and makes its
/// write conditional instead: one statement that
/// - updates each record it read only if it still has the version read;
/// - keeps a shared lock on each related record it read but does not write, only if that one still has the
///   version read;
/// - inserts the records it found missing and claims the idempotency keys with plain inserts: a record or key
///   someone else has stored since fails on its unique index (SQLSTATE 23505). No `ON CONFLICT` clause: its
///   check is a second probe of the index for every row, and each row must probe its index once.
///
/// If an update or a lock falls short, the statement raises SQLSTATE 40001 (`outpost_concurrent_change()`).
/// Either way PostgreSQL undoes all of it, and the push runs again on the locked path, which never loses to
/// another writer twice. A single statement is atomic, so nothing is half-written.
extension PostgresStorage {
    /// The outcome of the optimistic attempt: its answer, or nil when the locked path must take the push.
    func pushOptimistically(
        _ items: [PushItem], context: PushContext, collections: CollectionRegistry
    ) async throws -> [MutationResult]? {
        let tenant = context.tenant
        let keys = Array(Set(items.compactMap(\.key)))
        let recordKeys = PushPlanner.recordKeys(of: items, context: context).sorted()
        return try await client.withConnection { connection in
            let lookup: Lookup
            switch try await Self.pushNew(
                items, context: context, recordKeys: recordKeys, collections: collections, connection: connection,
                logger: logger, beforeCommit: beforeCommit)
            {
            case .written(let results): return results
            case .found(let found): lookup = found
            case nil:
                lookup = try await Self.lookUp(
                    tenant: tenant, keys: keys, records: recordKeys, connection: connection, logger: logger)
            }
            let plan = PushPlanner.plan(
                items, context: context, processed: lookup.processed, records: lookup.records,
                collections: collections)
            if plan.records.isEmpty && plan.mutations.isEmpty && plan.conflicts.isEmpty { return plan.results }
            // Conflicts are rare and have a table of their own: the locked path writes them.
            guard plan.conflicts.isEmpty else { return nil }
            // The related records a rule read and the push leaves as they are; those of duplicates were
            // read only because the keys were not known to be duplicates yet.
            let written = Set(plan.records.map(\.key))
            let held = PushPlanner.recordKeys(of: items, context: context, excluding: Set(lookup.processed.keys))
                .subtracting(written).compactMap { lookup.records[$0] }.sorted { $0.key < $1.key }
            let write = try ConditionalWrite(tenant: tenant, plan: plan, read: lookup.records, held: held)
            try await connection.withTransaction(logger: logger) { connection in
                try await Self.run(write, on: connection, logger: logger)
                // Tests hold the write open before it commits, as they do the locked path's transaction.
                try await beforeCommit?()
            }
            return plan.results
        }
    }

    /// What the statement for new records did.
    enum NewRecordsOutcome {
        /// It stored the push: these are its results.
        case written([MutationResult])
        /// It found some of the push's records or keys stored, wrote nothing, and read them as ``lookUp`` does.
        case found(Lookup)
    }

    /// A push of records the device created and never had from the server, written without reading first.
    ///
    /// The device sends no base version for a record it created itself, and most pushes are of such records
    /// (check-ins, scans, sessions logged): nothing to read, since nothing is stored yet. The push is planned
    /// as if nothing were stored, and written in one statement (``NewRecordsWrite``) that first probes for its
    /// records and keys and inserts only if none is stored. If one is after all (a chunk sent again after its
    /// answer was lost, or a record created offline and changed again in a later chunk), the statement writes
    /// nothing and answers what ``lookUp`` would read, and the push goes on from there as if it had read
    /// first. Either way one statement, where the reading path takes two.
    ///
    /// - Returns: what the statement did, or nil when the push is not one of new records alone.
    static func pushNew(
        _ items: [PushItem], context: PushContext, recordKeys: [RecordKey], collections: CollectionRegistry,
        connection: PostgresConnection, logger: Logger, beforeCommit: (@Sendable () async throws -> Void)?
    ) async throws -> NewRecordsOutcome? {
        var written = Set<RecordKey>()
        for item in items {
            // Only mutations that can create a record, from a device that never had it from the server.
            guard case .valid(let mutation, _) = item, mutation.baseVersion == nil, mutation.op == .upsert else {
                return nil
            }
            written.insert(RecordKey(mutation))
        }
        // A collection's rule that consults other records needs them read.
        guard recordKeys.count == written.count else { return nil }
        let plan = PushPlanner.plan(
            items, context: context, processed: [:], records: [:], collections: collections)
        guard plan.conflicts.isEmpty, plan.results.allSatisfy({ $0.status == .applied }),
            plan.records.count == written.count
        else { return nil }
        let write = try NewRecordsWrite(tenant: context.tenant, plan: plan)
        func run(_ connection: PostgresConnection) async throws -> Lookup? {
            var found = Lookup()
            var any = false
            for try await row in try await connection.execute(write, logger: logger) {
                found.add(row)
                any = true
            }
            return any ? found : nil
        }
        let found = try await connection.withTransaction(logger: logger) { connection in
            let found = try await run(connection)
            // Tests hold a write open before it commits; this one wrote nothing if it found anything.
            if found == nil { try await beforeCommit?() }
            return found
        }
        return found.map { .found($0) } ?? .written(plan.results)
    }

    private static func run(_ write: ConditionalWrite, on connection: PostgresConnection, logger: Logger) async throws {
        for try await _ in try await connection.execute(write, logger: logger) {}
    }

    struct Lookup {
        var processed: [String: ProcessedMutation] = [:]
        var records: [RecordKey: StoredRecord] = [:]

        mutating func add(_ row: PushLookup.Row) {
            switch row {
            case .processed(let key, let mutation): processed[key] = mutation
            case .record(let record): records[record.key] = record
            }
        }
    }

    /// The idempotency rows of `keys` and the records of `records`, in one statement.
    static func lookUp(
        tenant: String, keys: [String], records: [RecordKey], connection: PostgresConnection, logger: Logger
    ) async throws -> Lookup {
        var lookup = Lookup()
        if keys.isEmpty && records.isEmpty { return lookup }
        for try await row in try await connection.execute(
            PushLookup(tenant: tenant, keys: keys, records: records), logger: logger)
        {
            lookup.add(row)
        }
        return lookup
    }
}

/// A push's idempotency rows and records, read by primary key as ``PostgresStorage/processedLookup(tenant:keys:)``
/// and ``PostgresStorage/recordLookup(tenant:keys:)`` read them, in one round trip. Rows of both kinds share
/// the columns; the first says which kind a row is.
struct PushLookup: PostgresPreparedStatement {
    static let sql = select(keys: "$2", collections: "$3", recordIds: "$4", scopes: "$5")

    /// The query, with the tenant as `$1` and the other arrays at the placeholders given.
    static func select(keys: String, collections: String, recordIds: String, scopes: String) -> String {
        """
        SELECT 0, m.idempotency_key, m.content_hash, m.status, m.version, m.conflict,
               NULL::text, NULL::boolean, NULL::bigint, NULL::bigint, NULL::text
        FROM unnest(\(keys)::text[]) AS u(k), LATERAL (
          SELECT idempotency_key, content_hash, status, version, conflict FROM mutations
          WHERE tenant = (SELECT $1::text) AND idempotency_key = u.k LIMIT 1) AS m
        UNION ALL
        SELECT 1, r.collection, r.record_id, r.scope, r.version, r.fields, r.meta, r.tombstone, r.created_at,
               r.updated_at, r.owner
        FROM unnest(\(collections)::text[], \(recordIds)::text[], \(scopes)::text[]) AS u(c, i, s), LATERAL (
          SELECT collection, record_id, scope, version, fields, meta, tombstone, created_at, updated_at, owner
          FROM records
          WHERE tenant = (SELECT $1::text) AND collection = u.c AND record_id = u.i AND scope = u.s LIMIT 1) AS r
        """
    }

    enum Row {
        case processed(String, ProcessedMutation)
        case record(StoredRecord)
    }

    var bindings: PostgresBindings

    init(tenant: String, keys: [String], records: [RecordKey]) {
        bindings = PostgresBindings(capacity: 5)
        bindings.append(tenant)
        bindings.append(keys)
        bindings.append(records.map(\.collection))
        bindings.append(records.map(\.recordId))
        bindings.append(records.map(\.scope))
    }

    func makeBindings() throws -> PostgresBindings { bindings }

    func decodeRow(_ row: PostgresRow) throws -> Row { try Self.decode(row) }

    static func decode(_ row: PostgresRow) throws -> Row {
        let (kind, a, b, c, version, d, meta, tombstone, createdAt, updatedAt, owner) = try row.decode(
            (Int32, String, String, String, Int64, String?, String?, Bool?, Int64?, Int64?, String?).self)
        if kind == 0 {
            return .processed(
                a,
                ProcessedMutation(
                    contentHash: b, status: try StorageCoding.known(c, "mutation status") as MutationResult.Status, version: version,
                    conflict: try d.map { try StorageCoding.decode(ConflictDetail.self, from: $0) }))
        }
        guard let fields = d, let meta, let tombstone, let createdAt, let updatedAt, let owner else {
            throw StorageError(.corrupt, "a record row is missing a column")
        }
        return .record(
            StoredRecord(
                collection: a, recordId: b, scope: c, owner: owner, version: version, tombstone: tombstone,
                fields: try StorageCoding.decode([String: JSONValue].self, from: fields),
                meta: try StorageCoding.decode(StoredRecord.Meta.self, from: meta), createdAt: createdAt,
                updatedAt: updatedAt))
    }
}

/// A push's whole write, in one statement that applies all of it or, if another writer got in between the
/// lookup and now, none of it (see ``PostgresStorage/pushOptimistically(_:context:collections:)``).
///
/// Records are numbered in the plan's order (`ORDER BY n` before `nextval`, which PostgreSQL evaluates after
/// the sort), so that pulls follow the order of the push as on the locked path.
///
/// Every record is found by a probe of the primary key, as in ``PushLookup``: joined on the tenant's value,
/// the planner may scan all of a tenant that the statistics do not know yet for each key. A record written
/// over is found by the row the probe points to (`ctid`), and only while it has the version read; a row
/// another writer changed meanwhile fails that check when PostgreSQL checks it again after the wait.
struct ConditionalWrite: PostgresPreparedStatement {
    static let sql = """
        WITH input AS MATERIALIZED (
          SELECT c, i, s, v, t, f, m, ca, ua, p, o, pg_current_xact_id()::text::bigint AS xid,
                 nextval('change_seq') AS seq
          FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::boolean[], $7::text[], $8::text[],
                      $9::bigint[], $10::bigint[], $11::bigint[], $\(15 + MutationsInsert.arrayCount + 1)::text[])
               WITH ORDINALITY AS u(c, i, s, v, t, f, m, ca, ua, p, o, n)
          ORDER BY n),
        held AS (
          SELECT 1 FROM unnest($12::text[], $13::text[], $14::bigint[], $\(15 + MutationsInsert.arrayCount)::text[])
                        AS h(c, i, v, s), LATERAL (
            SELECT 1 FROM records
            WHERE tenant = (SELECT $1::text) AND collection = h.c AND record_id = h.i AND scope = h.s
              AND version = h.v
            LIMIT 1 FOR SHARE) AS l),
        updated AS (
          UPDATE records r SET version = x.v, tombstone = x.t, fields = x.f, meta = x.m,
            created_at = x.ca, updated_at = x.ua, change_xid = x.xid, change_seq = x.seq
          FROM (
            SELECT input.*, l.ctid AS target FROM input, LATERAL (
              SELECT ctid FROM records
              WHERE tenant = (SELECT $1::text) AND collection = input.c AND record_id = input.i AND scope = input.s
              LIMIT 1) AS l
            WHERE input.p > 0) AS x
          WHERE r.ctid = x.target AND r.version = x.p
          RETURNING 1),
        inserted AS (
          INSERT INTO records (tenant, collection, record_id, scope, owner, version, tombstone, fields, meta,
                               created_at, updated_at, change_xid, change_seq)
          SELECT $1, c, i, s, o, v, t, f, m, ca, ua, xid, seq FROM input WHERE p = 0
          RETURNING 1),
        claimed AS (
          \(MutationsInsert.insert(from: 15)))
        SELECT CASE
          WHEN (SELECT count(*) FROM updated) + (SELECT count(*) FROM inserted) = cardinality($2::text[])
           AND (SELECT count(*) FROM held) = cardinality($12::text[])
          THEN 0 ELSE outpost_concurrent_change() END
        """
    typealias Row = ()

    var bindings: PostgresBindings

    /// - Parameters:
    ///   - read: the records as the lookup found them; a planned record missing here is new.
    ///   - held: records the push read and leaves as they are.
    init(tenant: String, plan: PushPlan, read: [RecordKey: StoredRecord], held: [StoredRecord]) throws {
        bindings = PostgresBindings(capacity: 16 + MutationsInsert.arrayCount)
        bindings.append(tenant)
        try RecordsInsert.appendRows(tenantless: plan.records, to: &bindings)
        bindings.append(plan.records.map { read[$0.key]?.version ?? 0 })
        bindings.append(held.map(\.collection))
        bindings.append(held.map(\.recordId))
        bindings.append(held.map(\.version))
        try MutationsInsert.appendRows(tenantless: plan.mutations, to: &bindings)
        bindings.append(held.map(\.scope))
        bindings.append(plan.records.map(\.owner))
    }

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> Row { () }
}

/// The write of a push of new records (see ``PostgresStorage/pushNew(_:context:recordKeys:collections:connection:logger:beforeCommit:)``),
/// in one statement: it probes the push's records and idempotency keys by primary key, stopping at the first
/// one stored, and if there is none, inserts them all. Otherwise it writes nothing, and reads them as
/// ``PushLookup`` does: its rows are what it read. The push's records are its own keys to look up, and its
/// mutations' keys the idempotency keys. (It reads whole rows only when one is stored: most pushes of new
/// records find none.) A record or key another writer stores between the read and the insert fails on its
/// unique index (SQLSTATE 23505), which undoes the statement; the push then starts again on the locked path.
struct NewRecordsWrite: PostgresPreparedStatement {
    static let sql = """
        WITH existing AS MATERIALIZED (
          SELECT 1 FROM unnest($11::text[]) AS u(k)
          WHERE EXISTS (SELECT 1 FROM mutations WHERE tenant = (SELECT $1::text) AND idempotency_key = u.k)
          UNION ALL
          SELECT 1 FROM unnest($2::text[], $3::text[], $4::text[]) AS u(c, i, s)
          WHERE EXISTS (SELECT 1 FROM records WHERE tenant = (SELECT $1::text) AND collection = u.c AND record_id = u.i
                                                AND scope = u.s)
          LIMIT 1),
        found AS MATERIALIZED (
          SELECT * FROM (\(PushLookup.select(keys: "$11", collections: "$2", recordIds: "$3", scopes: "$4"))) AS lookup
          WHERE EXISTS (SELECT 1 FROM existing)),
        input AS MATERIALIZED (
          SELECT c, i, s, v, t, f, m, ca, ua, o, pg_current_xact_id()::text::bigint AS xid, nextval('change_seq') AS seq
          FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::boolean[], $7::text[], $8::text[],
                      $9::bigint[], $10::bigint[], $\(11 + MutationsInsert.arrayCount)::text[])
               WITH ORDINALITY AS u(c, i, s, v, t, f, m, ca, ua, o, n)
          WHERE NOT EXISTS (SELECT 1 FROM existing)
          ORDER BY n),
        inserted AS (
          INSERT INTO records (tenant, collection, record_id, scope, owner, version, tombstone, fields, meta,
                               created_at, updated_at, change_xid, change_seq)
          SELECT $1, c, i, s, o, v, t, f, m, ca, ua, xid, seq FROM input),
        claimed AS (
          \(MutationsInsert.insert(from: 11))
          WHERE NOT EXISTS (SELECT 1 FROM existing))
        SELECT * FROM found
        """
    typealias Row = PushLookup.Row

    var bindings: PostgresBindings

    init(tenant: String, plan: PushPlan) throws {
        bindings = PostgresBindings(capacity: 11 + MutationsInsert.arrayCount)
        bindings.append(tenant)
        try RecordsInsert.appendRows(tenantless: plan.records, to: &bindings)
        try MutationsInsert.appendRows(tenantless: plan.mutations, to: &bindings)
        bindings.append(plan.records.map(\.owner))
    }

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> Row { try PushLookup.decode(row) }
}
