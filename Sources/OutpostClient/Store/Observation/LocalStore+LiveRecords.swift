import Foundation
import GRDB
import NIOConcurrencyHelpers

/// What a commit changed in the records table, as a live list learns it.
enum ChangedRecords: Sendable, Equatable {
    /// Anything may have changed: another process's commit, or a write that does not name its records.
    case unknown
    /// These records, and no other.
    case records(Set<RecordKey>)

    static let none = ChangedRecords.records([])

    mutating func merge(_ other: ChangedRecords) {
        switch (self, other) {
        case (.records(let mine), .records(let theirs)): self = .records(mine.union(theirs))
        default: self = .unknown
        }
    }
}

extension LocalStore {
    /// A live list of records as it was last shown: its rows in order, each with the stamp of the row it was
    /// opened from. A commit that names the records it changed costs the list those rows alone: each is read,
    /// opened only when its stamp moved, and put in its place. Any other commit costs a scan of the rows' plain
    /// columns and payload tags, and the opening of the rows whose stamp moved.
    final class LiveList: Sendable {
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

        struct Entry {
            var key: RecordKey
            var stamp: Stamp
            /// The time the list is ordered by: the last change, or the first write.
            var time: Int64
            var record: LocalRecord
        }

        struct State {
            var entries: [Entry] = []
            var loaded = false
            /// The list holds `limit` rows and more may follow them.
            var truncated = false
        }

        let selection: Selection
        let state = NIOLockedValueBox(State())

        init(_ selection: Selection) {
            self.selection = selection
        }

        /// Whether `a` comes before `b` in the selection's order, as its SQL `ORDER BY` sorts them (ids by their
        /// bytes, as SQLite's BINARY collation compares them).
        func precedes(_ a: Entry, _ b: Entry) -> Bool {
            if a.time != b.time { return selection.order == .oldestFirst ? a.time < b.time : a.time > b.time }
            if a.key.recordId != b.key.recordId { return a.key.recordId.utf8.lexicographicallyPrecedes(b.key.recordId.utf8) }
            return a.key.scope.utf8.lexicographicallyPrecedes(b.key.scope.utf8)
        }
    }

    /// The columns a live list reads of a row: positions 0-2 name it, 3-8 are its stamp, 9 its first write's time
    /// and 10 whether it is deleted.
    static let liveColumns =
        "collection, scope, record_id, updated_at, last_sync_attempt, version, sync_status, "
        + "tombstone | is_offline_entry << 1 | coalesce(sealed_detail, 2) << 2, substr(payload, -16), created_at, tombstone"

    /// The records `list`'s selection lists at first, read on the caller's thread (see ``readOnCaller(_:)``):
    /// what a screen shows in its first frame.
    func firstRecords(in list: LiveList) throws -> [LocalRecord] {
        let sealer = self.sealer
        return try performOnCaller {
            try readOnCaller { db in
                var state = LiveList.State()
                _ = try Self.scan(into: &state, of: list, db: db, sealer: sealer)
                list.state.withLockedValue { $0 = state }
                return state.entries.map(\.record)
            }
        }
    }

    /// The records `list`'s selection lists now, after the commits that changed `changed`; nil when the list is
    /// the one shown before, record for record.
    func records(in list: LiveList, changed: ChangedRecords) async throws -> [LocalRecord]? {
        let selection = list.selection
        var named: Set<RecordKey> = []
        if case .records(let records) = changed {
            named = records.filter { key in
                (selection.collection.map { $0 == key.collection } ?? true) && (selection.scope.map { $0 == key.scope } ?? true)
                    && (selection.recordId.map { $0 == key.recordId } ?? true)
            }
            if named.isEmpty && list.state.withLockedValue(\.loaded) { return nil }
        }
        let keys = named
        let sealer = self.sealer
        return try await perform {
            try await self.read { db in
                var state = list.state.withLockedValue { $0 }
                let changedList: Bool
                if state.loaded, changed != .unknown,
                    let applied = try Self.apply(keys, to: &state, of: list, db: db, sealer: sealer)
                {
                    changedList = applied
                } else {
                    changedList = try Self.scan(into: &state, of: list, db: db, sealer: sealer)
                }
                list.state.withLockedValue { $0 = state }
                return changedList ? state.entries.map(\.record) : nil
            }
        }
    }

    /// Reads the whole list again: every row's stamp, and the rows whose stamp moved whole. Whether it changed.
    private static func scan(into state: inout LiveList.State, of list: LiveList, db: Database, sealer: Sealer) throws -> Bool {
        let (sql, arguments) = list.selection.sql(columns: liveColumns)
        let kept = Dictionary(state.entries.map { ($0.key, $0) }, uniquingKeysWith: { $1 })
        var entries: [LiveList.Entry] = []
        var reopened = false
        let rows = try Row.fetchCursor(db.cachedStatement(sql: sql), arguments: arguments)
        while let row = try rows.next() {
            let key = RecordKey(row[0], row[1], row[2])
            let stamp = try Self.stamp(row)
            let time: Int64 = list.selection.order == .latestChangeFirst ? row[3] : row[9]
            if let entry = kept[key], entry.stamp == stamp {
                entries.append(LiveList.Entry(key: key, stamp: stamp, time: time, record: entry.record))
            } else if let record = try RecordRow.find(key, db)?.open(with: sealer) {
                entries.append(LiveList.Entry(key: key, stamp: stamp, time: time, record: record))
                reopened = true
            }
        }
        let changed = !state.loaded || reopened || entries.map(\.key) != state.entries.map(\.key)
        state.entries = entries
        state.loaded = true
        state.truncated = list.selection.limit.map { entries.count >= $0 } ?? false
        return changed
    }

    /// Puts the rows of `keys` in their places in the list, reading them alone. Whether the list changed; nil when
    /// it cannot be done without a scan (a row left a list that may have more rows than it shows).
    private static func apply(
        _ keys: Set<RecordKey>, to state: inout LiveList.State, of list: LiveList, db: Database, sealer: Sealer
    ) throws -> Bool? {
        let selection = list.selection
        let statement = try db.cachedStatement(
            sql: "SELECT \(liveColumns) FROM records WHERE collection = ? AND scope = ? AND record_id = ?")
        var changed = false
        for key in keys.sorted(by: { ($0.collection, $0.scope, $0.recordId) < ($1.collection, $1.scope, $1.recordId) }) {
            let row = try Row.fetchOne(statement, arguments: [key.collection, key.scope, key.recordId])
            let index = state.entries.firstIndex { $0.key == key }
            let matches =
                row.map { row in
                    (selection.includesDeleted || !(row[10] as Bool))
                        && (selection.statuses.map { statuses in
                            (row[6] as String?).flatMap(RecordSyncStatus.init(rawValue:)).map(statuses.contains) ?? false
                        } ?? true)
                } ?? false
            guard let row, matches else {
                if let index {
                    // Another row, unseen, may now belong in the list.
                    if state.truncated { return nil }
                    state.entries.remove(at: index)
                    changed = true
                }
                continue
            }
            let stamp = try Self.stamp(row)
            let time: Int64 = selection.order == .latestChangeFirst ? row[3] : row[9]
            var entry: LiveList.Entry
            if let index, state.entries[index].stamp == stamp, state.entries[index].time == time {
                continue
            } else if let index, state.entries[index].stamp == stamp {
                entry = state.entries[index]
                entry.time = time
            } else {
                guard let record = try RecordRow.find(key, db)?.open(with: sealer)
                else { continue }
                entry = LiveList.Entry(key: key, stamp: stamp, time: time, record: record)
            }
            if let index {
                // A row that moves in a list with more rows than it shows may belong after one unseen.
                if state.truncated { return nil }
                state.entries.remove(at: index)
            }
            let position = state.entries.partitioningIndex { !list.precedes($0, entry) }
            state.entries.insert(entry, at: position)
            changed = true
            if let limit = selection.limit, state.entries.count > limit {
                state.entries.removeLast(state.entries.count - limit)
                state.truncated = true
            }
        }
        return changed
    }

    private static func stamp(_ row: Row) throws -> LiveList.Stamp {
        try row.withUnsafeData(atIndex: 8) { tag in
            LiveList.Stamp(
                updatedAt: row[3], lastAttempt: row[4], version: row[5], status: row[6], flags: row[7], tag: tag)
        }
    }
}

extension Array {
    /// The first index whose element satisfies `belongsAfter`, in an array where every element that does
    /// follows every one that does not: a binary search.
    func partitioningIndex(where belongsAfter: (Element) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if belongsAfter(self[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}
