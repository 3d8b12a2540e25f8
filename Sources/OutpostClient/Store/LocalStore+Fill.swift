import Foundation
import OutpostProtocol

extension LocalStore {
    /// Writes `records` synced records in large transactions: how benchmarks and demos seed a store.
    ///
    /// The records look like those a device holds after a day's work; none is queued in the outbox.
    package func fill(records: Int, deviceId: String, collection: String = "checkins") async throws {
        let sealer = self.sealer
        let batch = 5000
        for start in stride(from: 0, to: records, by: batch) {
            try await perform {
                try await self.writeFlushed { db in
                    let time = Timestamp(Date())
                    for i in start..<min(start + batch, records) {
                        let record = LocalRecord(
                            collection: collection, scope: "", recordId: "seed-\(i)",
                            fields: ["name": .string("Guest \(i)"), "email": .string("guest\(i)@example.org"), "n": .integer(Int64(i))],
                            tombstone: false, syncStatus: .synced, lastSyncAttempt: nil, syncError: nil, isOfflineEntry: false,
                            createdAt: time, updatedAt: time, version: 1, conflict: nil)
                        try Self.save(record, db: db, sealer: sealer)
                    }
                }
            }
        }
    }
}
