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
    var op: MutationOperation
    /// The client time of the write, in milliseconds.
    var clientTime: Int64
    var baseVersion: Int64?
    /// The mutation's fields as JSON, sealed under ``payloadContext(_:)``.
    var payload: Data
    /// A field the mutation sets to its client time (a check-in's `scanned_at`), stamped again with it.
    var timestampField: String?
    var state = State.pending
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

    init(row: Row) throws {
        seq = row["seq"]
        idempotencyKey = row["idempotency_key"]
        record = RecordKey(row["collection"], row["scope"], row["record_id"])
        // An operation this version does not know is never sent as another.
        guard let op = MutationOperation(rawValue: row["op"]) else {
            throw ClientError(.storeCorrupt, "a queued change's operation is not one this version knows")
        }
        self.op = op
        clientTime = row["client_ts"]
        baseVersion = row["base_version"]
        payload = row["payload"]
        timestampField = row["timestamp_field"]
        guard let state = State(rawValue: row["state"]) else {
            throw ClientError(.storeCorrupt, "a queued change's state is not one this version knows")
        }
        self.state = state
        attempts = row["attempts"]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["seq"] = seq
        container["idempotency_key"] = idempotencyKey
        container["collection"] = record.collection
        container["scope"] = record.scope
        container["record_id"] = record.recordId
        container["op"] = op.rawValue
        container["client_ts"] = clientTime
        container["base_version"] = baseVersion
        container["payload"] = payload
        container["timestamp_field"] = timestampField
        container["state"] = state.rawValue
        container["attempts"] = attempts
    }

    /// What an entry's sealed fields are bound to: they open only in their own entry.
    static func payloadContext(_ idempotencyKey: String) -> String { "outbox:\(idempotencyKey)" }

    /// The queued mutation, its fields opened.
    func entry(opening sealer: Sealer) throws -> OutboxEntry {
        let fields = try sealer.open(
            json: [String: JSONValue].self, from: payload, context: Self.payloadContext(idempotencyKey))
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
                db.cachedStatement(sql: "SELECT * FROM outbox WHERE state = 'pending' AND seq > ? ORDER BY seq LIMIT ?"),
                arguments: [seq, limit])
        }
        var ids: [UInt8] = []
        try JSONWriter.array(Set(records.map(\.recordId)), to: &ids) { id, output in JSONWriter.string(id, to: &output) }
        return try fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT * FROM outbox WHERE state = 'pending' AND seq > ? AND record_id IN (SELECT value FROM json_each(?))
                    ORDER BY seq LIMIT ?
                    """),
            arguments: [seq, String(decoding: ids, as: UTF8.self), limit]
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

    /// Deletes the entries the server confirmed, in one statement.
    static func confirm(_ seqs: [Int64], _ db: Database) throws {
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
}
