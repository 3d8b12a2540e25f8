import Foundation
import GRDB

/// A row of the `discarded` table: a sealed copy of a refused record the user gave up, with the changes it had
/// queued, kept on the device for audit.
///
/// The table's statements are this type's: the store's transactions call them.
struct DiscardedRow: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "discarded"

    /// Nil until inserted: SQLite gives the next one.
    var seq: Int64?
    var record: RecordKey
    /// When the user gave the record up, in milliseconds.
    var discardedAt: Int64
    /// The ``LocalStore/DiscardedCopy`` as JSON, sealed under ``payloadContext(_:at:)``.
    var payload: Data

    init(record: RecordKey, discardedAt: Int64, payload: Data) {
        self.record = record
        self.discardedAt = discardedAt
        self.payload = payload
    }

    init(row: Row) throws {
        seq = row["seq"]
        record = RecordKey(row["collection"], row["scope"], row["record_id"])
        discardedAt = row["discarded_at"]
        payload = row["payload"]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["seq"] = seq
        container["collection"] = record.collection
        container["scope"] = record.scope
        container["record_id"] = record.recordId
        container["discarded_at"] = discardedAt
        container["payload"] = payload
    }

    /// What a copy is bound to: it opens only as the copy of its record, discarded at its time.
    static func payloadContext(_ record: RecordKey, at time: Int64) -> String {
        "discarded:\(LocalRecord.payloadContext(record.collection, record.scope, record.recordId)):\(time)"
    }

    /// The copies of `record`.
    static func copies(of record: RecordKey, _ db: Database) throws -> [DiscardedRow] {
        try fetchAll(
            db, sql: "SELECT * FROM discarded WHERE collection = ? AND scope = ? AND record_id = ?",
            arguments: [record.collection, record.scope, record.recordId])
    }

    /// Whether `record` has copies.
    static func hasCopies(of record: RecordKey, _ db: Database) throws -> Bool {
        try Bool.fetchOne(
            db, sql: "SELECT EXISTS (SELECT 1 FROM discarded WHERE collection = ? AND scope = ? AND record_id = ?)",
            arguments: [record.collection, record.scope, record.recordId]) ?? false
    }

    /// Moves the copy to the record `newId`, sealed again under its new identity.
    mutating func rename(to newId: String, sealer: Sealer, _ db: Database) throws {
        let plain = try sealer.open(payload, context: Self.payloadContext(record, at: discardedAt))
        record.recordId = newId
        payload = try sealer.seal(plain, context: Self.payloadContext(record, at: discardedAt))
        try update(db)
    }
}
