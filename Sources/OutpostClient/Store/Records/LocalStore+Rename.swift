import Foundation
import GRDB

extension LocalStore {
    /// Gives records of `collection` and `scope` new ids, one transaction for all: each record named by a key
    /// of `newIds` moves to the value with its queued entries and its discarded copies, each payload sealed again
    /// under its new id. Where the new id is taken already (the server's copy came down by a pull), a synced
    /// record is that copy and its row is removed; one still waiting or refused stays where it is, for the
    /// sync or the user to settle.
    ///
    /// Apps whose record ids are derived from a key the device fetches (attendance's) rename the records
    /// they wrote under provisional ids once the key is known.
    /// - Returns: how many records moved or were found to be the server's copy.
    package func renameRecords(collection: String, scope: String = "", to newIds: [String: String]) async throws -> Int {
        let sealer = self.sealer
        // Read first: a rename that would change nothing writes nothing, so that the live queries of a screen
        // that settles ids on each reading are not woken by it.
        let movable = try await perform {
            try await self.read { db in
                try newIds.filter { old, new in
                    let key = RecordKey(collection, scope, old)
                    // A row of an older version with no state was synced.
                    let status = try RecordRow.find(key, db).map { $0.syncStatus ?? RecordSyncStatus.synced.rawValue }
                    let taken = try RecordRow.exists(RecordKey(collection, scope, new), db)
                    let copies = try DiscardedRow.hasCopies(of: key, db)
                    return old != new && (copies || (status != nil && (!taken || status == RecordSyncStatus.synced.rawValue)))
                }
            }
        }
        guard !movable.isEmpty else { return 0 }
        return try await perform {
            try await self.writeImmediate { db in
                var renamed = 0
                for (old, new) in movable.sorted(by: { $0.key < $1.key }) {
                    let key = RecordKey(collection, scope, old)
                    if var record = try RecordRow.find(key, db)?.open(with: sealer) {
                        if try RecordRow.exists(RecordKey(collection, scope, new), db) {
                            guard record.syncStatus == .synced else { continue }
                        } else {
                            record.recordId = new
                            try RecordRow(record, sealer: sealer).insert(db)
                            try OutboxRow.move(key, to: new, db)
                            try FileUses.move(key, to: new, db)
                        }
                        try RecordRow.delete(key, db)
                    }
                    // Copies of discarded records are renamed whether or not the record is still here.
                    for var copy in try DiscardedRow.copies(of: key, db) {
                        try copy.rename(to: new, sealer: sealer, db)
                    }
                    renamed += 1
                }
                return renamed
            }
        }
    }

    /// The ids that contain `text` of `collection`'s records in `scope` and of their discarded copies, without
    /// unsealing anything.
    package func recordIds(collection: String, scope: String = "", containing text: String) async throws -> [String] {
        try await perform {
            try await self.read { db in
                try String.fetchAll(
                    db,
                    sql: """
                        SELECT record_id FROM records WHERE collection = ?1 AND scope = ?2 AND instr(record_id, ?3) > 0
                        UNION SELECT record_id FROM discarded WHERE collection = ?1 AND scope = ?2 AND instr(record_id, ?3) > 0
                        """,
                    arguments: [collection, scope, text])
            }
        }
    }
}
