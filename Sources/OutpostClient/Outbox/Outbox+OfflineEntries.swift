import Foundation
import GRDB
import OutpostProtocol

extension Outbox {
    /// Takes the offline flag off records saved before the engine knew whether the server was reachable, once it
    /// turned out that it was: their creating write is stamped online, in the record and in its queued entry.
    ///
    /// Only entries never sent are changed. One the server may have taken (it left the queue, or was sent and
    /// is still queued: an answer lost, a relay holding it) keeps its flag, and so does its record: the server
    /// has it, or will take it, as sent, and the same key sent again with other content would be refused.
    ///
    /// - Returns: how many records were settled online.
    @discardableResult
    func settleOnline(_ keys: [RecordKey]) async throws -> Int {
        guard !keys.isEmpty else { return 0 }
        let sealer = store.sealer
        return try await store.perform {
            try await store.writeImmediate { db in
                var settled = 0
                for key in keys {
                    guard var record = try RecordRow.find(key, db)?.open(with: sealer),
                        record.isOfflineEntry
                    else { continue }
                    var cleared = false
                    for var row in try OutboxRow.entries(of: key, state: .pending, upsertsOnly: true, db) where row.attempts == 0 {
                        var fields = try row.fields(opening: sealer)
                        guard fields.removeValue(forKey: LocalRecord.offlineEntryField) != nil else { continue }
                        try row.seal(fields, with: sealer)
                        try row.update(db, columns: ["payload"])
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
