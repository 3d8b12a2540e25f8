import Foundation
import OutpostProtocol

extension LocalStore {
    /// Writes synced records, made by `record` from their positions `0..<count`, in large transactions and with
    /// nothing queued in the outbox: how benchmarks and simulations seed a store.
    package func fill(
        count: Int, collection: String, _ record: @escaping @Sendable (Int) -> (recordId: String, fields: [String: JSONValue])
    ) async throws {
        let sealer = self.sealer
        let batch = 5000
        for start in stride(from: 0, to: count, by: batch) {
            try await perform {
                try await self.writeImmediate { db in
                    let time = Timestamp(Date())
                    for position in start..<min(start + batch, count) {
                        let (recordId, fields) = record(position)
                        try RecordRow(
                            LocalRecord(
                                collection: collection, scope: "", recordId: recordId, fields: fields, tombstone: false,
                                syncStatus: .synced, lastSyncAttempt: nil, syncError: nil, isOfflineEntry: false, createdAt: time,
                                updatedAt: time, version: 1, conflict: nil), sealer: sealer
                        ).insert(db)
                    }
                }
            }
        }
    }
}
