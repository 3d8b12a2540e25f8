import Foundation
import OutpostProtocol

/// Where a device stands with one reference set, such as one event's roster.
public enum ReferenceState: Sendable, Hashable {
    /// Never opened on this device.
    case notDownloaded
    /// Part way: `stored` of `total` rows are on the device. Scans are refused until it completes.
    case incomplete(stored: Int, total: Int)
    /// Every row is on the device, as of `since`; it works with no network.
    case ready(since: Date)

    public var isReady: Bool {
        if case .ready = self { return true }
        return false
    }

    /// What the app shows, such as "Ready for offline (since 09:12)".
    public func message(timeZone: TimeZone = .current) -> String {
        switch self {
        case .notDownloaded, .incomplete: return ReferenceMessages.incomplete
        case .ready(let since):
            let formatter = DateFormatter()
            formatter.dateFormat = "yyyy-MM-dd HH:mm"
            formatter.timeZone = timeZone
            return "\(ReferenceMessages.ready) (since \(formatter.string(from: since)))"
        }
    }
}

/// The words the device shows about reference data, named once.
public enum ReferenceMessages {
    public static let incomplete = "Roster incomplete — connect to network to finish"
    public static let ready = "Ready for offline"
    public static let cancelled = "Registration cancelled — refer to organizer"
    public static let notFound = "Guest not in roster — refresh and try again"
}

/// What a lookup of one id found.
public enum ReferenceLookup: Sendable, Hashable {
    case found(ReferenceRecord)
    /// Deleted (a cancelled registration) since the download.
    case cancelled
    /// Not on the device: a walk-in added after the last refresh, or a wrong id.
    case notFound
    /// The download has not finished; nothing can be decided.
    case incomplete

    /// The message for anything but a found record.
    public var message: String? {
        switch self {
        case .found: return nil
        case .cancelled: return ReferenceMessages.cancelled
        case .notFound: return ReferenceMessages.notFound
        case .incomplete: return ReferenceMessages.incomplete
        }
    }
}

/// A reference row as the device holds it.
public struct ReferenceRecord: Sendable, Hashable {
    public var recordId: String
    public var fields: [String: JSONValue]
    public var version: Int64

    public init(recordId: String, fields: [String: JSONValue], version: Int64) {
        self.recordId = recordId
        self.fields = fields
        self.version = version
    }
}

/// Progress of a download: rows done, the total, and the rate.
public struct DownloadProgress: Sendable, Hashable {
    public var stored: Int
    public var total: Int
    /// Rows per second since this attempt started.
    public var rate: Double
}

/// What a delta refresh changed.
public struct RefreshSummary: Sendable, Hashable {
    public var updated: Int
    public var removed: Int

    public init(updated: Int, removed: Int) {
        self.updated = updated
        self.removed = removed
    }
}
