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
                    let key: StatementArguments = [collection, scope, old]
                    let status = try String.fetchOne(
                        db, sql: "SELECT sync_status FROM records WHERE collection = ? AND scope = ? AND record_id = ?",
                        arguments: key)
                    let taken =
                        try Bool.fetchOne(
                            db, sql: "SELECT EXISTS (SELECT 1 FROM records WHERE collection = ? AND scope = ? AND record_id = ?)",
                            arguments: [collection, scope, new]) ?? false
                    let copies =
                        try Bool.fetchOne(
                            db, sql: "SELECT EXISTS (SELECT 1 FROM discarded WHERE collection = ? AND scope = ? AND record_id = ?)",
                            arguments: key) ?? false
                    return old != new && (copies || (status != nil && (!taken || status == RecordSyncStatus.synced.rawValue)))
                }
            }
        }
        guard !movable.isEmpty else { return 0 }
        return try await perform {
            try await self.writeImmediate { db in
                var renamed = 0
                for (old, new) in movable.sorted(by: { $0.key < $1.key }) {
                    let key: StatementArguments = [collection, scope, old]
                    if var record = try RecordRow.find(RecordKey(collection, scope, old), db)?.open(with: sealer) {
                        if try RecordRow.exists(RecordKey(collection, scope, new), db) {
                            guard record.syncStatus == .synced else { continue }
                        } else {
                            record.recordId = new
                            try RecordRow(record, sealer: sealer).insert(db)
                            try db.execute(
                                sql: "UPDATE outbox SET record_id = ? WHERE collection = ? AND scope = ? AND record_id = ?",
                                arguments: [new] + key)
                        }
                        try db.execute(sql: "DELETE FROM records WHERE collection = ? AND scope = ? AND record_id = ?", arguments: key)
                    }
                    // Copies of discarded records are renamed whether or not the record is still here.
                    let copies = try Row.fetchAll(
                        db, sql: "SELECT seq, discarded_at, payload FROM discarded WHERE collection = ? AND scope = ? AND record_id = ?",
                        arguments: key)
                    for copy in copies {
                        let time: Int64 = copy["discarded_at"]
                        let plain = try sealer.open(
                            copy["payload"], context: "discarded:\(LocalRecord.payloadContext(collection, scope, old)):\(time)")
                        try db.execute(
                            sql: "UPDATE discarded SET record_id = ?, payload = ? WHERE seq = ?",
                            arguments: [
                                new,
                                try sealer.seal(plain, context: "discarded:\(LocalRecord.payloadContext(collection, scope, new)):\(time)"),
                                copy["seq"] as Int64,
                            ])
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
