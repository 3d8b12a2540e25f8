import Foundation
import GRDB
import OutpostProtocol

/// Records the server refused: the user resends them edited, keeps the server's value, or discards them.
/// Nothing refused is thrown away without a sealed copy in the `discarded` table.
extension Outbox {
    /// One archived record: what the device held and what it had queued when the user gave it up.
    struct DiscardedCopy: Codable {
        var record: LocalStore.SealedPayload
        /// The refused mutations' fields, oldest first.
        var entries: [[String: JSONValue]]
    }

    /// Archives `record` with its rejected entries into `discarded`, and removes those entries.
    static func archiveRefused(_ record: LocalRecord, db: Database, sealer: Sealer, at time: Int64) throws {
        let rows = try OutboxRow.entries(
            of: RecordKey(record.collection, record.scope, record.recordId), state: .rejected, db)
        let entries = try rows.map { try $0.fields(opening: sealer) }
        let copy = DiscardedCopy(
            record: LocalStore.SealedPayload(
                fields: record.fields, syncError: record.syncError, syncErrorCode: record.syncErrorCode, conflict: record.conflict),
            entries: entries)
        let key = RecordKey(record.collection, record.scope, record.recordId)
        try DiscardedRow(
            record: key, discardedAt: time,
            payload: try sealer.seal(JSONEncoder().encode(copy), context: DiscardedRow.payloadContext(key, at: time))
        ).insert(db)
        try OutboxRow.remove(rows.compactMap(\.seq), db)
    }

    /// Gives up a refused record: a sealed copy goes to the archive, and its refused entries leave the queue.
    /// A refused change to a record the server has gives way to the server's record as the device last had it
    /// (``LocalRecord/serverCopy``), synced. Any other refused record leaves the device; one the server holds
    /// after all comes back with the next pull of its collection, which starts over for that purpose.
    ///
    /// - Throws: ``ClientError`` `notFound` without such a record, `invalidInput` when it is not refused.
    func discardRefused(collection: String, scope: String, recordId: String, at date: Date) async throws {
        let sealer = store.sealer
        try await store.perform {
            try await store.writeImmediate { db in
                guard let record = try RecordRow.find(RecordKey(collection, scope, recordId), db)?.open(with: sealer)
                else { throw ClientError(.notFound, "no record \(recordId) on this device") }
                guard record.syncStatus == .refused else {
                    throw ClientError(.invalidInput, "record \(recordId) was not refused by the server; only refused records can be discarded")
                }
                try Self.archiveRefused(record, db: db, sealer: sealer, at: Timestamp(date).millisecondsSince1970)
                // Entries still queued behind the refused ones go too: they change a record the user gave up.
                try OutboxRow.removeAll(of: RecordKey(collection, scope, recordId), db)
                if let copy = record.serverCopy {
                    var restored = record
                    restored.fields = copy.fields
                    restored.tombstone = copy.tombstone
                    restored.createdAt = copy.createdAt
                    restored.updatedAt = copy.updatedAt
                    restored.isOfflineEntry = copy.isOfflineEntry
                    restored.syncStatus = .synced
                    restored.syncError = nil
                    restored.syncErrorCode = nil
                    restored.conflict = nil
                    restored.serverCopy = nil
                    try RecordRow(restored, sealer: sealer).insert(db)
                    return
                }
                try RecordRow.delete(RecordKey(collection, scope, recordId), db)
                // The server's own version of the record, if it has one, comes again with the next pull: a pull
                // that passed it while the refused one stood on top did not store it.
                try LocalStore.forgetPullCursors(collection: collection, scope: scope, db: db)
            }
        }
    }

    /// How many records the user discarded, kept sealed on the device for audit.
    package func discardedCount() async throws -> Int {
        try await store.perform {
            try await store.read { db in try DiscardedRow.fetchCount(db) }
        }
    }

    /// Settles a conflict in the server's favour: the conflicting fields take the server's values and the
    /// record is synced again (or pending, when other writes of it wait).
    ///
    /// - Throws: ``ClientError`` `notFound` without such a record, `invalidInput` when it holds no conflict.
    func keepServerValue(collection: String, scope: String, recordId: String) async throws -> LocalRecord {
        let sealer = store.sealer
        return try await store.perform {
            try await store.writeImmediate { db in
                guard var record = try RecordRow.find(RecordKey(collection, scope, recordId), db)?.open(with: sealer)
                else { throw ClientError(.notFound, "no record \(recordId) on this device") }
                guard let conflict = record.conflict else {
                    throw ClientError(.invalidInput, "record \(recordId) has no conflict to settle")
                }
                for field in conflict.fields {
                    record.fields[field] = conflict.serverFields[field]
                }
                record.version = max(record.version ?? 0, conflict.serverVersion)
                record.conflict = nil
                record.syncError = nil
                record.syncErrorCode = nil
                record.syncStatus = try OutboxRow.hasEntries(of: RecordKey(collection, scope, recordId), db) ? .pending : .synced
                try RecordRow(record, sealer: sealer).insert(db)
                return record
            }
        }
    }
}
