import Foundation
import GRDB
import NIOConcurrencyHelpers
import OutpostProtocol

/// A query of one collection's records, each decoded as `Fields`: the records an app lists, in the order and
/// number it shows them, narrowed by scope and by sync state.
///
/// `Fields` is the collection's `Codable` type (the field apps declare theirs in OutpostRecords, such as
/// `Activity.Record`), or `[String: JSONValue]` for a collection the app keeps untyped. Deleted records are left
/// out. Read it once with ``LocalStore/records(_:)``, or keep it current with
/// ``LocalStore/observe(_:checkingOtherProcessesEvery:clock:)``.
///
/// ```swift
/// let waiting = RecordQuery<Activity.Record>(collection: Activity.collection)
///     .filter(.pending, .failed)
///     .order(.newestFirst)
///     .limit(50)
/// for try await list in store.observe(waiting) { … }
/// ```
public struct RecordQuery<Fields: Decodable & Sendable>: Sendable {
    public var collection: String
    /// The scope whose records are listed (an event's check-ins); nil lists every scope.
    public var scope: String?
    /// The sync states listed; nil lists every record.
    public var statuses: Set<RecordSyncStatus>?
    public var order: RecordOrder
    /// At most this many records, the first in ``order``.
    public var limit: Int?

    public init(
        collection: String, scope: String? = nil, statuses: Set<RecordSyncStatus>? = nil,
        order: RecordOrder = .latestChangeFirst, limit: Int? = nil
    ) {
        self.collection = collection
        self.scope = scope
        self.statuses = statuses
        self.order = order
        self.limit = limit
    }

    /// The query narrowed to records in one of `statuses`.
    public func filter(_ statuses: RecordSyncStatus...) -> Self {
        var query = self
        query.statuses = Set(statuses)
        return query
    }

    /// The query narrowed to one scope.
    public func inScope(_ scope: String) -> Self {
        var query = self
        query.scope = scope
        return query
    }

    public func order(_ order: RecordOrder) -> Self {
        var query = self
        query.order = order
        return query
    }

    public func limit(_ limit: Int) -> Self {
        var query = self
        query.limit = max(0, limit)
        return query
    }
}

/// The order of a ``RecordQuery``'s records. Records of equal times come in the order of their ids.
public enum RecordOrder: Sendable, Hashable {
    /// The record changed last on this device first (its latest write, or the server's).
    case latestChangeFirst
    /// By the time of the record's first write, newest first: a history.
    case newestFirst
    /// By the time of the record's first write, oldest first: a queue.
    case oldestFirst

    var sql: String {
        switch self {
        case .latestChangeFirst: "updated_at DESC, record_id, scope"
        case .newestFirst: "created_at DESC, record_id, scope"
        case .oldestFirst: "created_at, record_id, scope"
        }
    }
}

/// One record of a ``RecordQuery``: its fields decoded, with the record as stored (its id, scope, sync state
/// and badge, times, and its fields as JSON).
public struct TypedRecord<Fields: Sendable>: Sendable {
    public var fields: Fields
    public var record: LocalRecord

    public var recordId: String { record.recordId }
    public var scope: String { record.scope }
    public var syncStatus: RecordSyncStatus { record.syncStatus }
    public var badge: SyncBadge { record.badge }
}

extension TypedRecord: Equatable where Fields: Equatable {}
extension TypedRecord: Hashable where Fields: Hashable {}

extension LocalStore {
    /// The records `query` selects, decoded.
    ///
    /// - Throws: ``ClientError`` `invalidInput` naming the record whose fields do not decode as `Fields`.
    public func records<Fields>(_ query: RecordQuery<Fields>) async throws -> [TypedRecord<Fields>] {
        let records = try await records(in: LiveList(Selection(query)), changed: .unknown) ?? []
        return try TypedRecords<Fields>().decode(records)
    }

    /// The records `query` selects, decoded, now and after every change to them.
    ///
    /// The first element is the current list, read before this method returns (on the caller's thread, as GRDB's
    /// `ValueObservation` reads with `.immediate` scheduling), so that a screen never shows an empty frame. After it, a commit of this process that changed other collections costs
    /// the list nothing; a commit in its collection costs the reading of its rows' plain columns, and the
    /// opening and decoding of the records it changed only. Commits of other processes are seen within
    /// `interval` (see ``changes(checkingOtherProcessesEvery:clock:)``).
    public func observe<Fields>(
        _ query: RecordQuery<Fields>, checkingOtherProcessesEvery interval: Duration = .seconds(1),
        clock: any Clock<Duration> = ContinuousClock()
    ) -> AsyncThrowingStream<[TypedRecord<Fields>], any Error> {
        let decoded = TypedRecords<Fields>()
        return observeList(Selection(query), checkingOtherProcessesEvery: interval, clock: clock) { try decoded.decode($0) }
    }

    /// What a list of records selects, in SQL's terms: every listing of records, read once or kept live, is one.
    struct Selection: Sendable {
        var collection: String?
        var scope: String?
        var recordId: String?
        var statuses: Set<RecordSyncStatus>?
        var includesDeleted = true
        var order = RecordOrder.latestChangeFirst
        var limit: Int?

        init(collection: String?, scope: String?, recordId: String? = nil, statuses: Set<RecordSyncStatus>?) {
            self.collection = collection
            self.scope = scope
            self.recordId = recordId
            self.statuses = statuses
        }

        /// The records of ``Filter``, deleted ones included, latest change first.
        init(_ filter: Filter, collection: String?, scope: String?, recordId: String? = nil) {
            let statuses: Set<RecordSyncStatus>? =
                switch filter {
                case .all: nil
                case .pending: [.pending]
                case .failed: [.failed]
                case .refused: [.refused]
                }
            self.init(collection: collection, scope: scope, recordId: recordId, statuses: statuses)
        }

        init<Fields>(_ query: RecordQuery<Fields>) {
            self.init(collection: query.collection, scope: query.scope, statuses: query.statuses)
            includesDeleted = false
            order = query.order
            limit = query.limit
        }

        /// The statement that selects the rows, with `columns`.
        func sql(columns: String) -> (String, StatementArguments) {
            var sql = "SELECT \(columns) FROM records WHERE 1 = 1"
            var arguments: StatementArguments = []
            if let statuses {
                // A list of unsynced records only reads the partial index of those, named word for word.
                if !statuses.contains(.synced) { sql += " AND \(RecordRow.unsyncedCondition)" }
                sql += " AND sync_status IN (\(statuses.map { _ in "?" }.joined(separator: ", ")))"
                arguments += StatementArguments(statuses.map(\.rawValue).sorted())
            }
            if !includesDeleted { sql += " AND NOT tombstone" }
            for (column, value) in [("collection", collection), ("scope", scope), ("record_id", recordId)] {
                guard let value else { continue }
                sql += " AND \(column) = ?"
                arguments += [value]
            }
            sql += " ORDER BY \(order.sql)"
            if let limit { sql += " LIMIT \(limit)" }
            return (sql, arguments)
        }
    }
}

/// The fields of a live list's records, decoded once per version of each record.
final class TypedRecords<Fields: Decodable & Sendable>: Sendable {
    private let decoded = NIOLockedValueBox<[RecordKey: (record: LocalRecord, fields: Fields)]>([:])

    func decode(_ records: [LocalRecord]) throws -> [TypedRecord<Fields>] {
        let before = decoded.withLockedValue { $0 }
        var now: [RecordKey: (record: LocalRecord, fields: Fields)] = [:]
        let decoder = JSONDecoder()
        let list = try records.map { record in
            let key = RecordKey(record.collection, record.scope, record.recordId)
            let fields: Fields
            if let kept = before[key], kept.record == record {
                fields = kept.fields
            } else {
                do {
                    fields = try decoder.decode(Fields.self, from: JSONEncoder().encode(record.fields))
                } catch {
                    throw ClientError(
                        .invalidInput, "\(record.collection)/\(record.recordId) does not decode as \(Fields.self): \(error)")
                }
            }
            now[key] = (record, fields)
            return TypedRecord(fields: fields, record: record)
        }
        decoded.withLockedValue { $0 = now }
        return list
    }
}
