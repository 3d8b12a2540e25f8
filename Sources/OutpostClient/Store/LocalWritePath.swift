import Foundation
import GRDB

/// A local write's transaction and its two inserts: the one path of the store outside GRDB's transaction and
/// record APIs, still through GRDB's statements, so that GRDB sees the transaction and every change.
///
/// Each connection prepares these statements once and binds them by position. GRDB's `inTransaction` prepares its
/// `BEGIN` and `COMMIT` again on every call, and a record's `insert` composes its SQL from its columns each time:
/// through them a local write took 1.2× as long (p50, `bench local-write`, BENCHMARKS.md). Every other write
/// goes through GRDB's APIs.
enum LocalWritePath {
    /// Runs `updates` in one transaction that takes the write lock at once; rolls back and rethrows when `updates`
    /// or the commit fails.
    static func transaction<T>(_ db: Database, _ updates: (Database) throws -> T) throws -> T {
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            let value = try updates(db)
            try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
            return value
        } catch {
            // A failed commit may have ended the transaction already; GRDB's rollback does nothing then. A rollback
            // that still fails is reported instead: the connection is then unusable.
            try db.rollback()
            throw error
        }
    }

    /// ``RecordRow``'s insert, replacing the row of the same record.
    static func insert(_ row: RecordRow, _ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT OR REPLACE INTO records (collection, scope, record_id, payload, tombstone, sync_status,
                                                last_sync_attempt, is_offline_entry, created_at, updated_at, version,
                                                sealed_detail)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            row.key.collection, row.key.scope, row.key.recordId, row.payload, row.tombstone, row.syncStatus,
            row.lastSyncAttempt, row.isOfflineEntry, row.createdAt, row.updatedAt, row.version, row.sealedDetail,
        ])
    }

    /// ``OutboxRow``'s insert of a new entry.
    static func insert(_ row: OutboxRow, _ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO outbox (idempotency_key, collection, scope, record_id, op, client_ts, base_version, payload,
                                    timestamp_field, state, attempts)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            row.idempotencyKey, row.record.collection, row.record.scope, row.record.recordId, row.op?.rawValue,
            row.clientTime, row.baseVersion, row.payload, row.timestampField, row.state?.rawValue, row.attempts,
        ])
    }
}
