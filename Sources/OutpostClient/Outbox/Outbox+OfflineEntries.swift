import Foundation
import GRDB
import OutpostProtocol

extension LocalStore {
    /// Takes the offline flag off records saved before the engine knew whether the server was reachable, once it
    /// turned out that it was: their creating write is stamped online, in the record and in its queued entry.
    ///
    /// A record whose flagged entry has already left the queue keeps its flag: the server has it as sent.
    ///
    /// - Returns: how many records were settled online.
    @discardableResult
    func settleOnline(_ keys: [RecordKey]) async throws -> Int {
        guard !keys.isEmpty else { return 0 }
        let sealer = self.sealer
        return try await perform {
            try await self.writeImmediate { db in
                var settled = 0
                for key in keys {
                    guard var record = try RecordRow.find(key, db)?.open(with: sealer),
                        record.isOfflineEntry
                    else { continue }
                    let rows = try Row.fetchAll(
                        db,
                        sql: """
                            SELECT seq, idempotency_key, payload FROM outbox
                            WHERE state = 'pending' AND collection = ? AND scope = ? AND record_id = ? AND op = 'upsert'
                            ORDER BY seq
                            """,
                        arguments: [key.collection, key.scope, key.recordId])
                    var cleared = false
                    for row in rows {
                        let idempotencyKey: String = row["idempotency_key"]
                        var fields = try sealer.open(
                            json: [String: JSONValue].self, from: row["payload"] as Data, context: "outbox:\(idempotencyKey)")
                        guard fields.removeValue(forKey: LocalRecord.offlineEntryField) != nil else { continue }
                        let bytes: [UInt8]
                        do throws(JSONSyntaxError) {
                            bytes = try fields.jsonBytes()
                        } catch {
                            throw ClientError.unstorableField(error)
                        }
                        try db.execute(
                            sql: "UPDATE outbox SET payload = ? WHERE seq = ?",
                            arguments: [try sealer.seal(bytes, context: "outbox:\(idempotencyKey)"), row["seq"] as Int64])
                        cleared = true
                    }
                    guard cleared else { continue }
                    record.isOfflineEntry = false
                    record.fields[LocalRecord.offlineEntryField] = nil
                    try RecordRow(record, sealer: sealer).insert(db)
                    settled += 1
                }
                return settled
            }
        }
    }
}
