import Foundation
import OutpostProtocol

/// Where a record stands with the server.
public enum RecordSyncStatus: String, Sendable, Hashable, Codable, CaseIterable {
    /// Saved on the device, waiting to reach the server.
    case pending
    /// The server has it.
    case synced
    /// The last attempt failed and will be tried again (the network, the server, the device clock); `syncError`
    /// says why.
    case failed
    /// The server refused it for good, or a protected field conflicted: it waits for the user (edit and resend,
    /// keep the server's value, or discard), not for the network. `syncError` says why; it is not counted as
    /// waiting to sync. Stored as `rejected`.
    case refused = "rejected"
}

/// A record as the device holds it: its values, plus where it stands with the server.
public struct LocalRecord: Sendable, Hashable {
    public var collection: String
    /// The scope the record belongs to (the event of a check-in), or empty for a collection without scopes.
    ///
    /// Part of the record's identity, with its collection and id: the same id in two scopes is two records.
    public var scope: String
    public var recordId: String
    public var fields: [String: JSONValue]
    /// True once deleted on this device (or by the server): a tombstone, as the server calls it too, kept until
    /// the delete syncs.
    public var tombstone: Bool
    public var syncStatus: RecordSyncStatus
    /// When the device last tried to send it.
    public var lastSyncAttempt: Date?
    /// The human-readable reason of the last failure or refusal.
    public var syncError: String?
    /// The server's error code of a refusal, such as `guest_cancelled`; nil otherwise.
    public var syncErrorCode: String? = nil
    /// True when the record was created while the device was offline.
    public var isOfflineEntry: Bool
    /// Device time of the first write.
    public var createdAt: Timestamp
    /// Device time of the latest write.
    public var updatedAt: Timestamp
    /// The server's version of the record, once known.
    public var version: Int64?
    /// When a protected field conflicted: what the server holds, for the app to show.
    public var conflict: ConflictDetail?
    /// The record as the server last had it, while this device's changes to it wait or were refused: what a
    /// discard of a refused change brings back, with no network. Nil for a record the server never had, and
    /// once the changes synced.
    public var serverCopy: ServerCopy? = nil

    /// A record as the server had it, kept beside the device's changes to it.
    public struct ServerCopy: Sendable, Hashable, Codable {
        public var fields: [String: JSONValue]
        public var tombstone: Bool
        public var createdAt: Timestamp
        public var updatedAt: Timestamp
        public var isOfflineEntry: Bool
    }

    /// The badge a list shows beside this record.
    public var badge: SyncBadge {
        SyncBadge(status: syncStatus, error: syncError, isConflict: conflict != nil, isAtRelay: isAtRelay)
    }

    /// True while a venue relay holds the record's last write and the server has not answered for it: the venue's
    /// other devices see it, the server does not have it yet. The record is pending meanwhile.
    public var isAtRelay: Bool { syncStatus == .pending && syncErrorCode == WireError.Code.heldAtRelay.rawValue }

    /// True while the record still waits for the network: pending, or failed and to be tried again.
    public var isWaitingToSync: Bool { syncStatus == .pending || syncStatus == .failed }

    @available(*, deprecated, renamed: "tombstone")
    public var deleted: Bool {
        get { tombstone }
        set { tombstone = newValue }
    }
}

/// A record's sync badge, with the text a screen reader speaks.
public struct SyncBadge: Sendable, Hashable {
    public var status: RecordSyncStatus
    /// A refused record whose protected field conflicted with the server's.
    public var isConflict: Bool
    /// A pending record a venue relay holds (``LocalRecord/isAtRelay``).
    public var isAtRelay: Bool
    /// For a record still waiting to sync, the escalation threshold it has waited longer than (24 hours): it is
    /// shown as failing, not as pending.
    public var overdue: Duration?
    public var accessibilityLabel: String

    /// - Parameter overdue: the escalation threshold, when the record has waited longer than it
    ///   (``SyncEngine/overdueRecordIds(collection:scope:)``).
    public init(
        status: RecordSyncStatus, error: String?, isConflict: Bool = false, isAtRelay: Bool = false, overdue: Duration? = nil
    ) {
        self.status = status
        self.isConflict = isConflict && status == .refused
        self.isAtRelay = isAtRelay && status == .pending
        self.overdue = status == .pending || status == .failed ? overdue : nil
        if let overdue = self.overdue {
            accessibilityLabel =
                "Not synchronized for over \(PersistentFailureNotice.describe(overdue)), will retry: \(error ?? "not yet delivered")"
            return
        }
        switch status {
        case .pending where self.isAtRelay: accessibilityLabel = "Saved at the venue relay, waiting for the server"
        case .pending: accessibilityLabel = "Record pending synchronization"
        case .failed: accessibilityLabel = "Synchronization failed, will retry: \(error ?? "unknown error")"
        case .refused where isConflict: accessibilityLabel = "Conflict with the server, needs your decision: \(error ?? "unknown error")"
        case .refused: accessibilityLabel = "Refused by the server, needs your attention: \(error ?? "unknown error")"
        case .synced: accessibilityLabel = "Record synchronized"
        }
    }

    /// The SF Symbol a screen shows for the badge: `checkmark.icloud` once synced, `icloud.and.arrow.up` while
    /// pending, `exclamationmark.icloud` after a failure, `xmark.icloud` when refused, and
    /// `exclamationmark.triangle` for a conflict.
    public var systemImage: String {
        if overdue != nil { return "exclamationmark.icloud" }
        switch status {
        case .pending: return "icloud.and.arrow.up"
        case .failed: return "exclamationmark.icloud"
        case .refused: return isConflict ? "exclamationmark.triangle" : "xmark.icloud"
        case .synced: return "checkmark.icloud"
        }
    }

    /// A short mark for a terminal list.
    public var symbol: String {
        if let overdue { return "✗ not synced for over \(PersistentFailureNotice.describe(overdue))" }
        switch status {
        case .pending where isAtRelay: return "⏳ at the venue relay"
        case .pending: return "⏳ pending"
        case .failed: return "✗ failed"
        case .refused: return isConflict ? "⚠ conflict" : "⛔ refused"
        case .synced: return "✓ synced"
        }
    }
}

/// How many records of a device stand where, short of synced.
public struct RecordCounts: Sendable, Hashable {
    /// Waiting to reach the server for the first time.
    public var pending: Int
    /// Failed, and tried again on the next sync.
    public var failed: Int
    /// Refused by the server, or conflicting: they wait for the user, not for the network.
    public var refused: Int

    public init(pending: Int = 0, failed: Int = 0, refused: Int = 0) {
        self.pending = pending
        self.failed = failed
        self.refused = refused
    }

    /// What still waits for the network: pending and failed.
    public var waiting: Int { pending + failed }
}
