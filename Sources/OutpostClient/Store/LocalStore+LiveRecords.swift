import Foundation
import GRDB
import NIOConcurrencyHelpers

extension LocalStore {
    /// The records a live list showed last, each with the stamp of the row it was opened from: a record whose row
    /// still has that stamp is shown again as it was, without being read or unsealed.
    final class OpenedRecords: Sendable {
        /// A row's plain columns and the tag of its sealed payload. AES-GCM gives every sealing a fresh nonce, so
        /// a payload sealed again has another tag even when what it holds is the same.
        struct Stamp: Hashable, Sendable {
            var updatedAt: Int64
            var lastAttempt: Int64?
            var version: Int64?
            var status: String?
            var flags: Int64
            /// The payload's 16-byte tag, as two numbers.
            var tagHigh: UInt64
            var tagLow: UInt64

            init(updatedAt: Int64, lastAttempt: Int64?, version: Int64?, status: String?, flags: Int64, tag: Data?) {
                self.updatedAt = updatedAt
                self.lastAttempt = lastAttempt
                self.version = version
                self.status = status
                self.flags = flags
                guard let tag, tag.count >= 16 else {
                    (tagHigh, tagLow) = (0, 0)
                    return
                }
                (tagHigh, tagLow) = tag.withUnsafeBytes { raw in
                    (
                        raw.loadUnaligned(fromByteOffset: raw.count - 16, as: UInt64.self),
                        raw.loadUnaligned(fromByteOffset: raw.count - 8, as: UInt64.self)
                    )
                }
            }
        }

        private struct Shown {
            var records: [RecordKey: (stamp: Stamp, record: LocalRecord)] = [:]
            var order: [RecordKey] = []
            var isEmpty = true
        }

        private let shown = NIOLockedValueBox(Shown())

        func take(_ key: RecordKey, stamped stamp: Stamp) -> LocalRecord? {
            shown.withLockedValue { $0.records[key].flatMap { $0.stamp == stamp ? $0.record : nil } }
        }

        /// Keeps the list shown now; whether it differs from the one kept before (always, the first time).
        func keep(_ list: [(RecordKey, Stamp, LocalRecord)], reopened: Bool) -> Bool {
            shown.withLockedValue { shown in
                let order = list.map(\.0)
                let changed = shown.isEmpty || reopened || order != shown.order
                if changed {
                    shown.records = Dictionary(list.map { ($0.0, ($0.1, $0.2)) }, uniquingKeysWith: { $1 })
                    shown.order = order
                    shown.isEmpty = false
                }
                return changed
            }
        }
    }

    /// ``records(_:collection:scope:recordId:)`` for a list that was read before: every row's plain columns and
    /// payload tag are read, and only the rows whose stamp moved since `opened` last kept them are read whole and
    /// unsealed. So a commit that changes one record of a list of thousands costs one record's opening.
    ///
    /// - Returns: the list, or nil when it is the one `opened` kept last, record for record.
    func records(
        _ filter: Filter, collection: String?, scope: String?, reopening opened: OpenedRecords
    ) async throws -> [LocalRecord]? {
        let statuses: Set<RecordSyncStatus>? =
            switch filter {
            case .all: nil
            case .pending: [.pending]
            case .failed: [.failed]
            case .rejected: [.rejected]
            }
        return try await records(Selection(collection: collection, scope: scope, statuses: statuses), reopening: opened)
    }

    /// The records `selection` lists, each opened only when its row changed since `opened` last kept it; nil
    /// when the list is the one kept before.
    func records(_ selection: Selection, reopening opened: OpenedRecords) async throws -> [LocalRecord]? {
        let sealer = self.sealer
        // Positions 0-2 name the row; 3-8 are its stamp.
        let stampColumns =
            "collection, scope, record_id, updated_at, last_sync_attempt, version, sync_status, "
            + "tombstone | is_offline_entry << 1 | coalesce(sealed_detail, 2) << 2, substr(payload, -16)"
        let (sql, arguments) = selection.sql(columns: stampColumns)
        return try await perform {
            try await self.read { db in
                let lookup = try db.cachedStatement(
                    sql: "SELECT * FROM records WHERE collection = ? AND scope = ? AND record_id = ?")
                var shown: [(RecordKey, OpenedRecords.Stamp, LocalRecord)] = []
                var reopened = false
                let rows = try Row.fetchCursor(db.cachedStatement(sql: sql), arguments: arguments)
                while let row = try rows.next() {
                    let key = RecordKey(row[0], row[1], row[2])
                    let stamp = OpenedRecords.Stamp(
                        updatedAt: row[3], lastAttempt: row[4], version: row[5], status: row[6], flags: row[7],
                        tag: row.dataNoCopy(atIndex: 8))
                    if let record = opened.take(key, stamped: stamp) {
                        shown.append((key, stamp, record))
                    } else if let full = try Row.fetchOne(lookup, arguments: [key.collection, key.scope, key.recordId]) {
                        shown.append((key, stamp, try Self.record(full, sealer: sealer)))
                        reopened = true
                    }
                }
                return opened.keep(shown, reopened: reopened) ? shown.map(\.2) : nil
            }
        }
    }
}
