import Foundation
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// Peer mentors' activity registration over the sync engine.
///
/// An activity is saved on the device first and is in the list at once; it is pushed at once when the
/// device is online, else when connectivity returns. Edits from several devices resolve field by field,
/// last write wins, except the money fields, which the server protects (see ``Activity``).
public struct ActivityLog: Sendable {
    public let engine: SyncEngine
    /// Makes the id of a new activity.
    public let newId: @Sendable () -> String

    public init(engine: SyncEngine, newId: @escaping @Sendable () -> String = { "act-\(UUID().uuidString.prefix(13).lowercased())" }) {
        self.engine = engine
        self.newId = newId
    }

    /// Registers an activity.
    /// - Throws: ``ClientError`` `invalidInput` for a draft the server would refuse; nothing is written then.
    public func register(_ draft: ActivityDraft) async throws -> ActivitySave {
        let fields = draft.fields
        if let problem = Activity.missingOnCreate(fields) ?? Activity.problem(in: fields) {
            throw ClientError(.invalidInput, problem)
        }
        return try await save(recordId: newId(), fields: fields, isEdit: false)
    }

    /// Changes some fields of an activity on this device. A change to a money field carries the version the
    /// device last saw; if the server's has moved on, the change is kept for review, not applied.
    /// - Throws: ``ClientError`` `notFound` for an activity this device does not hold, `invalidInput`.
    public func edit(_ recordId: String, changes: [String: JSONValue]) async throws -> ActivitySave {
        guard let existing = try await engine.store.record(collection: Activity.collection, recordId: recordId),
            !existing.tombstone
        else {
            throw ClientError(.notFound, "no activity \(recordId) on this device; refresh the list to fetch others'")
        }
        guard !changes.isEmpty else { throw ClientError(.invalidInput, "nothing to change") }
        if let problem = Activity.problem(in: changes) { throw ClientError(.invalidInput, problem) }
        return try await save(recordId: recordId, fields: changes, isEdit: true)
    }

    private func save(recordId: String, fields: [String: JSONValue], isEdit: Bool) async throws -> ActivitySave {
        // Saved and returned at once; delivery runs in the background, with the engine's retries.
        let record = try await engine.save(
            LocalStore.Write(collection: Activity.collection, recordId: recordId, fields: fields))
        return ActivitySave(activity: ActivityEntry(record), connection: await engine.status.connection, isEdit: isEdit)
    }

    /// The activity as it stands now: after a save, once its delivery ended or was given up waiting on.
    public func current(_ saved: ActivitySave) async throws -> ActivitySave {
        guard let record = try await engine.store.record(collection: Activity.collection, recordId: saved.activity.recordId)
        else { return saved }
        var now = saved
        now.activity = ActivityEntry(record)
        now.connection = await engine.status.connection
        return now
    }

    /// Activities on this device, newest first, each with its sync badge.
    public func list() async throws -> [ActivityEntry] {
        await engine.markingOverdue(
            try await engine.store.records(collection: Activity.collection)
                .filter { !$0.tombstone }
                .map(ActivityEntry.init)
                .sorted { ($0.date, $0.updatedAt) > ($1.date, $1.updatedAt) },
            collection: Activity.collection)
    }

    /// Pulls activities changed on the server (by other devices, or resolved there) into the device.
    @discardableResult
    public func refresh() async throws -> Int {
        try await engine.pull(collection: Activity.collection)
    }
}

/// A new activity as the mentor enters it: the activity's record (``Activity/Record``).
public typealias ActivityDraft = Activity.Record

extension Activity.Record {
    var fields: [String: JSONValue] {
        var fields: [String: JSONValue] = [
            Activity.Field.type: .string(type),
            Activity.Field.date: .string(date.description),
            Activity.Field.durationMinutes: .integer(durationMinutes),
        ]
        if let participants { fields[Activity.Field.participants] = .integer(participants) }
        if let notes { fields[Activity.Field.notes] = .string(notes) }
        if let travelExpense {
            fields[Activity.Field.travelExpense] = .string(Activity.parseMoney(travelExpense) ?? travelExpense)
        }
        return fields
    }
}

/// An activity as the list shows it.
public struct ActivityEntry: Sendable, Hashable {
    public var recordId: String
    public var fields: [String: JSONValue]
    public var syncStatus: RecordSyncStatus
    public var syncError: String?
    public var isOfflineEntry: Bool
    public var updatedAt: Date
    /// When a money field conflicted: what the server holds.
    public var conflict: ConflictDetail?
    /// The escalation threshold, when the activity has waited to sync longer than it (see ``SyncBadge/overdue``).
    public var overdue: Duration?

    public init(_ record: LocalRecord) {
        recordId = record.recordId
        fields = record.fields
        syncStatus = record.syncStatus
        syncError = record.syncError
        isOfflineEntry = record.isOfflineEntry
        updatedAt = record.updatedAt.date
        conflict = record.conflict
    }

    public var type: String { fields[Activity.Field.type]?.stringValue ?? "" }
    public var date: String { fields[Activity.Field.date]?.stringValue ?? "" }
    public var durationMinutes: Int64? { FieldRules.integer(fields[Activity.Field.durationMinutes]) }
    public var travelExpense: String? { fields[Activity.Field.travelExpense]?.stringValue }
    public var badge: SyncBadge { SyncBadge(status: syncStatus, error: syncError, isConflict: conflict != nil, overdue: overdue) }
}

extension ActivityEntry: WaitingEntry {
    var overdueKey: String { recordId }
}

/// What registering or editing did, and the confirmation to show.
public struct ActivitySave: Sendable, Hashable {
    public var activity: ActivityEntry
    /// Where the connection stood when the save was answered.
    public var connection: Connection
    /// Whether the server could be reached then.
    public var isOnline: Bool { connection.isReachable }
    /// An edit of an activity already on the device, not a new one.
    public var isEdit: Bool = false

    /// "Activity registered" (or "Activity updated") once the server has it; "Saved offline — will sync when
    /// connected" offline, and the server's trouble when it answers with an error; the reason when the server
    /// refused it.
    public var confirmation: String {
        switch activity.syncStatus {
        case .synced: return isEdit ? "Activity updated" : "Activity registered"
        case .pending:
            switch connection {
            case .offline: return AppText.savedOffline
            case .unknown: return AppText.savedOnDevice
            case .serverTrouble(let problem): return AppText.savedServerTrouble(problem)
            case .online: return "Saved — syncing now"
            }
        case .failed: return "Saved on this device — sync failed, will retry: \(activity.syncError ?? "unknown error")"
        case .refused where activity.conflict != nil:
            return "Saved on this device — conflict with the server: \(activity.syncError ?? "a protected field changed")"
        case .refused: return "Saved on this device — refused by the server: \(activity.syncError ?? "no reason given")"
        }
    }

    /// Whether the list shows the offline badge beside it.
    public var showsOfflineBadge: Bool { activity.syncStatus != .synced }
}
