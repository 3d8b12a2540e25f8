import Foundation
import GRDB
import OutpostProtocol

extension LocalStore {
    /// The setting that keeps the pull cursor of `collection` within `scope` ("" for every scope).
    static func pullCursorSetting(collection: String, scope: String) -> String {
        "pull_cursor:\(collection):\(scope)"
    }

    /// Forgets the pull cursors a record of `collection` in `scope` is read with (its scope's and the whole
    /// collection's), so that the next pull brings the server's version of it again.
    static func forgetPullCursors(collection: String, scope: String, db: Database) throws {
        try SettingRow.remove(
            [pullCursorSetting(collection: collection, scope: scope), pullCursorSetting(collection: collection, scope: "")], db)
    }

    /// Brings records as the server holds them into the store, with the device's own queued changes kept on
    /// top, and saves the pull cursor in the same transaction.
    ///
    /// A change is a record of its collection, scope and id: the same id in two scopes is two records.
    /// A record with nothing queued becomes the server's state, synced (at the same version too, when the fields
    /// differ: a write the server answered without taking). A record with queued mutations takes
    /// the server's fields with the queued ones replayed over them, and stays pending: what the user did on
    /// this device shows until the server has answered it. A crash leaves either the whole page and its
    /// cursor, or neither.
    ///
    /// - Returns: how many records changed.
    @discardableResult
    package func merge(_ changes: [Change], cursorSetting: String, cursor: String) async throws -> Int {
        let sealer = self.sealer
        return try await perform {
            try await self.writeImmediate { db in
                let queued = changes.isEmpty ? [] : try OutboxRow.queuedRecords(db)
                var merged = 0
                for change in changes {
                    let key = RecordKey(change.collection, change.scope, change.recordId)
                    let existing = try RecordRow.find(key, db)?.open(with: sealer)
                    // A synced record at the server's version is the server's record, unless its fields differ:
                    // then the server answered the device's write without taking it (a first write stood), and
                    // the server's record replaces it.
                    if let existing, existing.syncStatus == .synced,
                        existing.version ?? 0 > change.version
                            || (existing.version == change.version && existing.tombstone == change.tombstone
                                && existing.fields == change.fields)
                    {
                        continue
                    }
                    var fields = change.fields
                    var deleted = change.tombstone
                    if queued.contains(key) {
                        for entry in try OutboxRow.entries(of: key, db) {
                            if entry.op == .delete {
                                fields = [:]
                                deleted = true
                            } else {
                                fields.merge(try entry.fields(opening: sealer)) { $1 }
                                deleted = false
                            }
                        }
                    }
                    let isQueued = queued.contains(key)
                    // A conflict awaits the user's choice whatever the server has since: the device's values of the
                    // conflicting fields stay on top (a resend sends them), and the detail follows the server's.
                    var conflict = existing?.conflict
                    if !isQueued, var open = conflict, !deleted {
                        for field in open.fields {
                            let server = change.fields[field] ?? .null
                            if open.serverFields[field] != server {
                                open.serverFields[field] = server
                                open.serverVersion = max(open.serverVersion, change.version)
                            }
                            fields[field] = existing?.fields[field]
                        }
                        conflict = open
                    } else if !isQueued {
                        conflict = nil
                    }
                    let status: RecordSyncStatus =
                        isQueued ? existing?.syncStatus ?? .pending : conflict != nil ? .refused : .synced
                    var record = LocalRecord(
                        collection: change.collection, scope: change.scope, recordId: change.recordId, fields: fields,
                        tombstone: deleted, syncStatus: status, lastSyncAttempt: existing?.lastSyncAttempt,
                        syncError: isQueued || conflict != nil ? existing?.syncError : nil,
                        isOfflineEntry: fields[LocalRecord.offlineEntryField] == .bool(true),
                        createdAt: min(change.createdAt, existing?.createdAt ?? change.createdAt),
                        updatedAt: max(change.updatedAt, existing?.updatedAt ?? change.updatedAt),
                        version: change.version, conflict: conflict)
                    if isQueued || conflict != nil {
                        record.syncErrorCode = existing?.syncErrorCode
                        // The server's record, beside the device's changes on top of it.
                        record.serverCopy = LocalRecord.ServerCopy(
                            fields: change.fields, tombstone: change.tombstone, createdAt: change.createdAt,
                            updatedAt: change.updatedAt, isOfflineEntry: change.fields[LocalRecord.offlineEntryField] == .bool(true))
                    }
                    try RecordRow(record, sealer: sealer).insert(db)
                    merged += 1
                }
                try SettingRow.save(cursorSetting, cursor, sealer: sealer, db)
                return merged
            }
        }
    }
}
