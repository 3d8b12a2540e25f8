import Foundation
import GRDB
import OutpostProtocol

/// A row of the `records` table: a record's identity and plain columns, and the rest of it sealed.
///
/// Only ids, times, flags and the sync state are plain, because queries filter and sort on them. The fields,
/// the sync error, a conflict and the server's copy are sealed together in `payload`
/// (``LocalStore/SealedPayload``), under a context naming the row, so that a payload opens only in its own row.
///
/// The table's statements are this type's: the store's transactions call them.
struct RecordRow: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "records"
    /// A row saved again replaces the one of the same identity.
    static let persistenceConflictPolicy = PersistenceConflictPolicy(insert: .replace, update: .replace)

    var key: RecordKey
    var payload: Data
    var tombstone: Bool
    /// Nil in rows written before sync states were stored: those were synced.
    var syncStatus: String?
    var lastSyncAttempt: Int64?
    var isOfflineEntry: Bool
    var createdAt: Int64
    var updatedAt: Int64
    var version: Int64?
    /// Whether the sealed payload holds more than the fields (an error, a conflict, a server copy); nil in rows
    /// written before the column, which count as holding more.
    var sealedDetail: Bool?

    enum Columns {
        static let collection = Column("collection")
        static let scope = Column("scope")
        static let recordId = Column("record_id")
        static let syncStatus = Column("sync_status")
        static let updatedAt = Column("updated_at")
    }

    init(row: Row) throws {
        key = RecordKey(row["collection"], row["scope"], row["record_id"])
        payload = row["payload"]
        tombstone = row["tombstone"]
        syncStatus = row["sync_status"]
        lastSyncAttempt = row["last_sync_attempt"]
        isOfflineEntry = row["is_offline_entry"]
        createdAt = row["created_at"]
        updatedAt = row["updated_at"]
        version = row["version"]
        sealedDetail = row["sealed_detail"]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["collection"] = key.collection
        container["scope"] = key.scope
        container["record_id"] = key.recordId
        container["payload"] = payload
        container["tombstone"] = tombstone
        container["sync_status"] = syncStatus
        container["last_sync_attempt"] = lastSyncAttempt
        container["is_offline_entry"] = isOfflineEntry
        container["created_at"] = createdAt
        container["updated_at"] = updatedAt
        container["version"] = version
        container["sealed_detail"] = sealedDetail
    }

    /// The row of `record`, with its payload already sealed (``LocalStore/SealedPayload`` under
    /// ``LocalRecord/payloadContext``).
    init(_ record: LocalRecord, sealedPayload: Data) {
        key = RecordKey(record.collection, record.scope, record.recordId)
        payload = sealedPayload
        tombstone = record.tombstone
        syncStatus = record.syncStatus.rawValue
        lastSyncAttempt = record.lastSyncAttempt.map { Timestamp($0).millisecondsSince1970 }
        isOfflineEntry = record.isOfflineEntry
        createdAt = record.createdAt.millisecondsSince1970
        updatedAt = record.updatedAt.millisecondsSince1970
        version = record.version
        sealedDetail = record.syncError != nil || record.syncErrorCode != nil || record.conflict != nil || record.serverCopy != nil
    }

    /// The row of `record`, its payload sealed with `sealer`.
    init(_ record: LocalRecord, sealer: Sealer) throws {
        let payload = LocalStore.SealedPayload(
            fields: record.fields, syncError: record.syncError, syncErrorCode: record.syncErrorCode, conflict: record.conflict,
            serverCopy: record.serverCopy)
        self.init(record, sealedPayload: try sealer.seal(payload.jsonBytes(), context: record.payloadContext))
    }

    /// The record the row holds, its payload opened.
    ///
    /// - Throws: ``ClientError`` `cannotDecrypt` for a payload that does not open or decode here, `storeCorrupt`
    ///   for a sync state this version does not know.
    func open(with sealer: Sealer) throws -> LocalRecord {
        let opened = try sealer.open(payload, context: LocalRecord.payloadContext(key.collection, key.scope, key.recordId))
        let sealed: LocalStore.SealedPayload
        do {
            sealed = try LocalStore.SealedPayload(jsonBytes: opened)
        } catch {
            throw ClientError(.cannotDecrypt, "a sealed payload does not decode", underlying: error)
        }
        // A status this version does not know is never read as another.
        let status: RecordSyncStatus
        if let syncStatus {
            guard let known = RecordSyncStatus(rawValue: syncStatus) else {
                throw ClientError(.storeCorrupt, "a record's sync status is not one this version knows")
            }
            status = known
        } else {
            status = .synced
        }
        return LocalRecord(
            collection: key.collection, scope: key.scope, recordId: key.recordId, fields: sealed.fields, tombstone: tombstone,
            syncStatus: status, lastSyncAttempt: lastSyncAttempt.map { Timestamp(millisecondsSince1970: $0).date },
            syncError: sealed.syncError, syncErrorCode: sealed.syncErrorCode, isOfflineEntry: isOfflineEntry,
            createdAt: Timestamp(millisecondsSince1970: createdAt), updatedAt: Timestamp(millisecondsSince1970: updatedAt),
            version: version, conflict: sealed.conflict, serverCopy: sealed.serverCopy)
    }

    // MARK: Statements

    /// The row of `key`, or nil.
    static func find(_ key: RecordKey, _ db: Database) throws -> RecordRow? {
        try fetchOne(
            db.cachedStatement(sql: "SELECT * FROM records WHERE collection = ? AND scope = ? AND record_id = ?"),
            arguments: [key.collection, key.scope, key.recordId])
    }

    /// Whether a record with the id `recordId` is here, in `collection` and `scope` when given; nothing is opened.
    static func exists(recordId: String, collection: String?, scope: String?, _ db: Database) throws -> Bool {
        try Bool.fetchOne(
            db,
            sql: """
                SELECT EXISTS (SELECT 1 FROM records WHERE record_id = ?1 AND (?2 IS NULL OR collection = ?2)
                                                       AND (?3 IS NULL OR scope = ?3))
                """,
            arguments: [recordId, collection, scope]) ?? false
    }

    /// Removes the row of `key`.
    static func delete(_ key: RecordKey, _ db: Database) throws {
        try db.execute(
            sql: "DELETE FROM records WHERE collection = ? AND scope = ? AND record_id = ?",
            arguments: [key.collection, key.scope, key.recordId])
    }

    /// Makes the refused records of `recordId` (of `collection` and `scope` when given) pending again when entries
    /// of theirs wait in the outbox.
    static func markPendingWhereQueued(recordId: String, collection: String?, scope: String?, _ db: Database) throws {
        try db.execute(
            sql: """
                UPDATE records SET sync_status = 'pending'
                WHERE sync_status = 'rejected' AND record_id = ?1 AND (?2 IS NULL OR collection = ?2)
                  AND (?3 IS NULL OR scope = ?3)
                  AND EXISTS (SELECT 1 FROM outbox o WHERE o.state = 'pending' AND o.collection = records.collection
                                AND o.scope = records.scope AND o.record_id = records.record_id)
                """,
            arguments: [recordId, collection, scope])
    }

    /// Whether the table holds a row of `key`: a probe of the key alone, without reading the row.
    static func exists(_ key: RecordKey, _ db: Database) throws -> Bool {
        try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT 1 FROM records WHERE collection = ? AND scope = ? AND record_id = ?"),
            arguments: [key.collection, key.scope, key.recordId]) != nil
    }

    /// The plain columns a sync result reads of each of `keys` that has a row: its `updated_at`, and whether its
    /// sealed payload holds more than the fields. A result that changes only plain columns then opens nothing.
    static func plainColumns(
        of keys: some Collection<RecordKey>, _ db: Database
    ) throws -> (updatedAt: [RecordKey: Int64], sealedDetail: Set<RecordKey>) {
        let statement = try db.cachedStatement(
            sql: "SELECT updated_at, sealed_detail FROM records WHERE collection = ? AND scope = ? AND record_id = ?")
        var updatedAt: [RecordKey: Int64] = [:]
        var sealedDetail = Set<RecordKey>()
        for key in keys {
            guard let row = try Row.fetchOne(statement, arguments: [key.collection, key.scope, key.recordId]) else { continue }
            updatedAt[key] = row[0] ?? 0
            // Unknown (NULL: a row from before the column) counts as holding more.
            if (row[1] as Bool?) != false { sealedDetail.insert(key) }
        }
        return (updatedAt, sealedDetail)
    }

    /// Records a sync result that changes no sealed part: the server's version (kept when `version` is nil or
    /// older), the attempt's time, and the state (kept when `status` is nil).
    static func markAttempt(
        _ key: RecordKey, version: Int64?, at time: Int64, status: RecordSyncStatus?, _ db: Database
    ) throws {
        try db.cachedStatement(
            sql: """
                UPDATE records SET version = CASE WHEN ?1 IS NULL THEN version ELSE max(coalesce(version, 0), ?1) END,
                                   last_sync_attempt = ?2, sync_status = coalesce(?3, sync_status)
                WHERE collection = ?4 AND scope = ?5 AND record_id = ?6
                """
        ).execute(arguments: [version, time, status?.rawValue, key.collection, key.scope, key.recordId])
    }

    /// The condition of the partial index `records_unsynced`, repeated word for word in every query that
    /// should count from that index alone (SQLite uses a partial index only for a query that names its
    /// condition).
    static let unsyncedCondition = "sync_status IN ('pending', 'failed', 'rejected')"

    /// How many records of `collection` (of every collection when nil) wait, failed, or were refused.
    static func counts(collection: String?, _ db: Database) throws -> RecordCounts {
        // Cached: a syncing device's status counts ten times a second.
        let statement = try db.cachedStatement(
            sql: """
                SELECT sync_status, COUNT(*) FROM records
                WHERE \(unsyncedCondition) AND (?1 IS NULL OR collection = ?1)
                GROUP BY sync_status
                """)
        var counts = RecordCounts()
        for row in try Row.fetchAll(statement, arguments: [collection]) {
            switch row[0] as String {
            case RecordSyncStatus.pending.rawValue: counts.pending = row[1]
            case RecordSyncStatus.failed.rawValue: counts.failed = row[1]
            default: counts.refused = row[1]
            }
        }
        return counts
    }
}
