import Foundation
import GRDB
import OutpostProtocol

/// A row of the `outbox` table: one local change queued for the server, its fields sealed.
///
/// The outbox goes out in `seq` order, the order of the writes: a device's client times only move forward, so it
/// is also client-time order. An entry the server refused stays with the state `rejected` until the user
/// resends or discards it; a confirmed entry is deleted.
///
/// The table's statements are this type's: the store's transactions call them.
struct OutboxRow: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "outbox"

    enum State: String, Sendable {
        /// Waiting to be pushed, or pushed and not yet answered.
        case pending
        /// Refused by the server: set aside until the user acts.
        case rejected
    }

    /// Nil until inserted: SQLite gives the next one.
    var seq: Int64?
    var idempotencyKey: String
    var record: RecordKey
    /// Nil for an operation this version does not know (a newer version wrote it): such an entry is kept as it is,
    /// and never sent as another (``entry(opening:)`` refuses it).
    var op: MutationOperation?
    /// The client time of the write, in milliseconds.
    var clientTime: Int64
    var baseVersion: Int64?
    /// The mutation's fields as JSON, sealed under ``payloadContext(_:)``.
    var payload: Data
    /// A field the mutation sets to its client time (a check-in's `scanned_at`), stamped again with it.
    var timestampField: String?
    /// Nil for a state this version does not know.
    var state: State? = .pending
    var attempts = 0

    init(
        idempotencyKey: String, record: RecordKey, op: MutationOperation, clientTime: Int64, baseVersion: Int64?,
        payload: Data, timestampField: String?
    ) {
        self.idempotencyKey = idempotencyKey
        self.record = record
        self.op = op
        self.clientTime = clientTime
        self.baseVersion = baseVersion
        self.payload = payload
        self.timestampField = timestampField
    }

    /// The columns every statement of this type selects, in the order ``init(row:)`` reads them: by position, as
    /// a drain reads a chunk of fifty after every push.
    static let selection = """
        seq, idempotency_key, collection, scope, record_id, op, client_ts, base_version, payload, timestamp_field, state,
        attempts
        """

    /// A row of ``selection``'s columns.
    init(row: Row) throws {
        seq = row[0]
        idempotencyKey = row[1]
        record = RecordKey(row[2], row[3], row[4])
        op = MutationOperation(rawValue: row[5])
        clientTime = row[6]
        baseVersion = row[7]
        payload = row[8]
        timestampField = row[9]
        state = State(rawValue: row[10])
        attempts = row[11]
    }

    /// The row's columns are read by position: GRDB's requests select ``selection``.
    static var databaseSelection: [any SQLSelectable] {
        [
            Column("seq"), Column("idempotency_key"), Column("collection"), Column("scope"), Column("record_id"), Column("op"),
            Column("client_ts"), Column("base_version"), Column("payload"), Column("timestamp_field"), Column("state"),
            Column("attempts"),
        ]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["seq"] = seq
        container["idempotency_key"] = idempotencyKey
        container["collection"] = record.collection
        container["scope"] = record.scope
        container["record_id"] = record.recordId
        container["op"] = op?.rawValue
        container["client_ts"] = clientTime
        container["base_version"] = baseVersion
        container["payload"] = payload
        container["timestamp_field"] = timestampField
        container["state"] = state?.rawValue
        container["attempts"] = attempts
    }

    /// What an entry's sealed fields are bound to: they open only in their own entry.
    static func payloadContext(_ idempotencyKey: String) -> String { "outbox:\(idempotencyKey)" }

    /// The mutation's fields, opened.
    func fields(opening sealer: Sealer) throws -> [String: JSONValue] {
        try sealer.open(json: [String: JSONValue].self, from: payload, context: Self.payloadContext(idempotencyKey))
    }

    /// Seals `fields` as the mutation's fields.
    mutating func seal(_ fields: [String: JSONValue], with sealer: Sealer) throws {
        let bytes: [UInt8]
        do throws(JSONSyntaxError) {
            bytes = try fields.jsonBytes()
        } catch {
            throw ClientError.unstorableField(error)
        }
        payload = try sealer.seal(bytes, context: Self.payloadContext(idempotencyKey))
    }

    /// The queued mutation, its fields opened.
    ///
    /// - Throws: ``ClientError`` `storeCorrupt` for an operation this version does not know: it is never sent as
    ///   another.
    func entry(opening sealer: Sealer) throws -> OutboxEntry {
        guard let op else { throw ClientError(.storeCorrupt, "a queued change's operation is not one this version knows") }
        let fields = try fields(opening: sealer)
        return OutboxEntry(
            seq: seq ?? 0,
            mutation: Mutation(
                idempotencyKey: idempotencyKey, collection: record.collection, recordId: record.recordId,
                scope: record.scope.isEmpty ? nil : record.scope, op: op, fields: fields,
                clientTimestamp: Timestamp(millisecondsSince1970: clientTime), baseVersion: baseVersion),
            attempts: attempts)
    }

    // MARK: Statements

    /// The first `limit` pending entries after `seq`, in order; of `records` alone when given.
    static func pending(after seq: Int64, limit: Int, of records: Set<RecordKey>?, _ db: Database) throws -> [OutboxRow] {
        // Cached: a drain reads a chunk after every push.
        guard let records else {
            return try fetchAll(
                db.cachedStatement(sql: "SELECT \(selection) FROM outbox WHERE state = 'pending' AND seq > ? ORDER BY seq LIMIT ?"),
                arguments: [seq, limit])
        }
        let ids = try recordIds(of: records)
        return try fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT \(selection) FROM outbox WHERE state = 'pending' AND seq > ? AND record_id IN (SELECT value FROM json_each(?))
                    ORDER BY seq LIMIT ?
                    """),
            arguments: [seq, ids, limit]
        ).filter { records.contains($0.record) }
    }

    /// How many entries wait (refused ones excluded).
    static func pendingCount(_ db: Database) throws -> Int {
        try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM outbox WHERE state = 'pending'")) ?? 0
    }

    /// The records with entries waiting.
    static func pendingRecords(_ db: Database) throws -> [RecordKey] {
        try Row.fetchAll(db, sql: "SELECT DISTINCT collection, scope, record_id FROM outbox WHERE state = 'pending'")
            .map { RecordKey($0[0], $0[1], $0[2]) }
    }

    /// The client time of the entry queued last, or nil when the outbox is empty.
    static func lastClientTime(_ db: Database) throws -> Int64? {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT client_ts FROM outbox ORDER BY seq DESC LIMIT 1"))
    }

    /// The entries of `record`, in order: in `state` alone when given, and its upserts alone when `upsertsOnly`.
    static func entries(
        of record: RecordKey, state: State? = nil, upsertsOnly: Bool = false, _ db: Database
    ) throws -> [OutboxRow] {
        try fetchAll(
            db,
            sql: """
                SELECT \(selection) FROM outbox
                WHERE collection = ?1 AND scope = ?2 AND record_id = ?3 AND (?4 IS NULL OR state = ?4)
                  AND (NOT ?5 OR op = 'upsert')
                ORDER BY seq
                """,
            arguments: [record.collection, record.scope, record.recordId, state?.rawValue, upsertsOnly])
    }

    /// The record of each entry up to `maxSeq` (in any state) that is one of `records`: a record once per entry.
    static func records(of records: Set<RecordKey>, through maxSeq: Int64, _ db: Database) throws -> [RecordKey] {
        let ids = try recordIds(of: records)
        return try Row.fetchAll(
            db.cachedStatement(
                sql: "SELECT collection, scope, record_id FROM outbox WHERE seq <= ? AND record_id IN (SELECT value FROM json_each(?))"),
            arguments: [maxSeq, ids]
        ).map { RecordKey($0[0], $0[1], $0[2]) }.filter(records.contains)
    }

    /// Whether `record` has entries, in any state.
    static func hasEntries(of record: RecordKey, _ db: Database) throws -> Bool {
        try Bool.fetchOne(
            db, sql: "SELECT EXISTS (SELECT 1 FROM outbox WHERE collection = ? AND scope = ? AND record_id = ?)",
            arguments: [record.collection, record.scope, record.recordId]) ?? false
    }

    /// The records with entries, in any state.
    static func queuedRecords(_ db: Database) throws -> Set<RecordKey> {
        Set(try Row.fetchAll(db, sql: "SELECT DISTINCT collection, scope, record_id FROM outbox").map { RecordKey($0[0], $0[1], $0[2]) })
    }

    /// Moves the entries of `record` to the record `newId` of the same collection and scope. Their sealed fields
    /// stay as they are: they are bound to each entry's idempotency key, not to the record.
    static func move(_ record: RecordKey, to newId: String, _ db: Database) throws {
        try db.execute(
            sql: "UPDATE outbox SET record_id = ? WHERE collection = ? AND scope = ? AND record_id = ?",
            arguments: [newId, record.collection, record.scope, record.recordId])
    }

    /// Removes the entries of `record`, in any state.
    static func removeAll(of record: RecordKey, _ db: Database) throws {
        try db.execute(
            sql: "DELETE FROM outbox WHERE collection = ? AND scope = ? AND record_id = ?",
            arguments: [record.collection, record.scope, record.recordId])
    }

    /// Removes the entries `seqs` (the server confirmed them, or the user gave them up), in one statement.
    static func remove(_ seqs: [Int64], _ db: Database) throws {
        guard !seqs.isEmpty else { return }
        try db.cachedStatement(sql: "DELETE FROM outbox WHERE seq IN (SELECT value FROM json_each(?))")
            .execute(arguments: ["[" + seqs.map(String.init).joined(separator: ",") + "]"])
    }

    /// Counts an attempt of the entry `seq`, made at `time`, leaving it in `state`.
    static func markAttempt(_ seq: Int64, state: State, at time: Int64, _ db: Database) throws {
        try db.cachedStatement(
            sql: """
                UPDATE outbox SET state = ?, attempts = attempts + 1, last_attempt = ?, first_attempt = coalesce(first_attempt, ?)
                WHERE seq = ?
                """
        ).execute(arguments: [state.rawValue, time, time, seq])
    }

    /// Counts an attempt, made at `time`, of every pending entry, or of the entries of `records` alone.
    static func markAttempted(at time: Int64, only records: [RecordKey]?, _ db: Database) throws {
        let attempted = """
            UPDATE outbox SET attempts = attempts + 1, last_attempt = ?, first_attempt = coalesce(first_attempt, ?)
            WHERE state = 'pending'
            """
        guard let records else { return try db.execute(sql: attempted, arguments: [time, time]) }
        let ofRecord = try db.cachedStatement(sql: attempted + " AND collection = ? AND scope = ? AND record_id = ?")
        for record in records {
            try ofRecord.execute(arguments: [time, time, record.collection, record.scope, record.recordId])
        }
    }

    /// Sets every pending entry aside, as refused.
    static func refuseAllPending(_ db: Database) throws {
        try db.execute(sql: "UPDATE outbox SET state = 'rejected' WHERE state = 'pending'")
    }

    /// Puts the refused entries of `recordId` back in the queue (of `collection` and `scope` when given). How many.
    static func requeue(recordId: String, collection: String?, scope: String?, _ db: Database) throws -> Int {
        try db.execute(
            sql: """
                UPDATE outbox SET state = 'pending'
                WHERE state = 'rejected' AND record_id = ?1 AND (?2 IS NULL OR collection = ?2) AND (?3 IS NULL OR scope = ?3)
                """,
            arguments: [recordId, collection, scope])
        return db.changesCount
    }

    /// Whether a pending entry was written after `clientTime`.
    static func hasPending(writtenAfter clientTime: Int64, _ db: Database) throws -> Bool {
        try Bool.fetchOne(
            db, sql: "SELECT EXISTS (SELECT 1 FROM outbox WHERE state = 'pending' AND client_ts > ?)", arguments: [clientTime])
            ?? false
    }

    /// The pending entries from the first one written after `clientTime` on, newest first.
    static func pendingNewestFirst(fromFirstWrittenAfter clientTime: Int64, _ db: Database) throws -> [OutboxRow] {
        try fetchAll(
            db,
            sql: """
                SELECT \(selection) FROM outbox
                WHERE state = 'pending' AND seq >= (SELECT MIN(seq) FROM outbox WHERE state = 'pending' AND client_ts > ?1)
                ORDER BY seq DESC
                """,
            arguments: [clientTime])
    }

    /// The records with pending entries written at `clientTime` or earlier, each with its oldest such entry's
    /// time, oldest first.
    static func pendingRecords(writtenBefore clientTime: Int64, _ db: Database) throws -> [(record: RecordKey, first: Int64)] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT collection, scope, record_id, MIN(client_ts) AS first FROM outbox
                WHERE state = 'pending' AND client_ts <= ? GROUP BY collection, scope, record_id
                ORDER BY first, collection, scope, record_id
                """, arguments: [clientTime]
        ).map { (RecordKey($0[0], $0[1], $0[2]), $0[3]) }
    }

    /// The ids of the records of `collection` (in `scope` when given) with pending entries written at `clientTime`
    /// or earlier.
    static func pendingRecordIds(
        writtenBefore clientTime: Int64, collection: String, scope: String?, _ db: Database
    ) throws -> Set<String> {
        Set(
            try String.fetchAll(
                db,
                sql: """
                    SELECT DISTINCT record_id FROM outbox
                    WHERE state = 'pending' AND client_ts <= ? AND collection = ? AND (? IS NULL OR scope = ?)
                    """, arguments: [clientTime, collection, scope, scope]))
    }

    /// The ids of `records` as one JSON array, for `json_each`: a statement compiled once per connection, whatever
    /// their number.
    private static func recordIds(of records: Set<RecordKey>) throws -> String {
        var ids: [UInt8] = []
        try JSONWriter.array(Set(records.map(\.recordId)), to: &ids) { id, output in JSONWriter.string(id, to: &output) }
        return String(decoding: ids, as: UTF8.self)
    }
}
