/// What a device reports about itself: `POST /v1/heartbeats`, on every sync and every minute in `run` mode.
///
/// The staff name is not sent: the server takes it from the token. The server keeps the report under a
/// tenant-scoped fingerprint of the device id, never the id itself.
public struct Heartbeat: Sendable, Hashable, Codable {
    public var deviceId: String
    /// The event the device has open, if any: the monitor groups devices by it.
    public var event: String?
    public var pendingCount: Int
    /// Records whose last attempt failed and that will be tried again; refused ones are not among them.
    public var failedCount: Int
    /// Records the server refused, or that conflict: they wait for a person, not the network. Absent from
    /// devices that predate it.
    public var rejectedCount: Int?
    /// When the device last fetched its roster (download or refresh), if ever.
    public var lastRosterFetch: Timestamp?
    public var appVersion: String
    /// The bytes of files (photos) waiting to upload with the records that wait. Absent from devices that predate
    /// it.
    public var pendingUploadBytes: Int64?

    public init(
        deviceId: String, event: String?, pendingCount: Int, failedCount: Int, rejectedCount: Int? = nil,
        lastRosterFetch: Timestamp?, appVersion: String, pendingUploadBytes: Int64? = nil
    ) {
        self.deviceId = deviceId
        self.event = event
        self.pendingCount = pendingCount
        self.failedCount = failedCount
        self.rejectedCount = rejectedCount
        self.lastRosterFetch = lastRosterFetch
        self.appVersion = appVersion
        self.pendingUploadBytes = pendingUploadBytes
    }
}

/// The answer to a heartbeat.
public struct HeartbeatResponse: Sendable, Hashable, Codable {
    /// The device's fingerprint in this tenant, as the monitor shows it.
    public var fingerprint: String

    public init(fingerprint: String) {
        self.fingerprint = fingerprint
    }
}

/// A device's health on the sync monitor, from the time since its last report.
public enum DeviceState: String, Sendable, Hashable, Codable, CaseIterable {
    /// Reported within the last 10 minutes.
    case ok
    /// No report for 10 minutes or more: a yellow "Stale" pill.
    case stale
    /// No report for 30 minutes or more: a red "Offline" pill.
    case offline

    /// After this long without a report a device is stale.
    public static let staleAfter: Duration = .seconds(10 * 60)
    /// After this long without a report a device is offline.
    public static let offlineAfter: Duration = .seconds(30 * 60)

    /// The state of a device last seen at `lastSeen`, at `now`.
    public init(lastSeen: Timestamp, now: Timestamp) {
        let silence = now.millisecondsSince1970 - lastSeen.millisecondsSince1970
        if silence >= Self.offlineAfter.milliseconds {
            self = .offline
        } else if silence >= Self.staleAfter.milliseconds {
            self = .stale
        } else {
            self = .ok
        }
    }
}

extension Duration {
    /// Whole milliseconds.
    public var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}

/// An event as the monitor's picker shows it.
public struct MonitorEvent: Sendable, Hashable, Codable {
    /// The event's record id, which `?event=` takes.
    public var id: String
    /// The event's `name`, or its id when it has none.
    public var name: String

    public init(id: String, name: String) {
        self.id = id
        self.name = name
    }
}

/// `GET /v1/monitor?event=E`: the sync monitor's data, which the `/admin/monitor` page shows.
public struct MonitorResponse: Sendable, Hashable, Codable {
    /// The event shown, or nil for every device of the tenant.
    public var event: String?
    /// The tenant's events, most recently created first, for a picker.
    public var events: [MonitorEvent]
    public var generatedAt: Timestamp
    /// One entry per device, most recently seen first.
    public var devices: [MonitorDevice]
    /// The notice when no device has reported in the last 30 minutes, else nil.
    public var emptyState: String?
    /// How to reach the event's operations team, from the event's `ops_contact`, if set.
    public var opsContact: String?
    /// Records that have failed to sync for over a day, by device.
    public var persistentFailures: [PersistentFailure]
    /// Records the server refused (or that conflict), as the devices reported them with the server's reason:
    /// they wait for a person to resolve them on the device, not for the network.
    public var refusedRecords: [PersistentFailure] = []
    /// The start of the first check-in bucket; each device's `checkIns` counts per 5 minutes from here.
    public var bucketStart: Timestamp
    /// How far the shown event's check-in has come; nil without an event.
    public var progress: EventProgress?
    /// On a venue relay: how its line to the server fares; nil on a server.
    public var relay: RelayLine? = nil
    /// On a server: the venue relays of the tenant that reported in the last day, each as one row. The devices
    /// behind them are among ``devices``, as their relay last heard from them.
    public var relays: [MonitorRelay] = []

    /// The empty state's words, named once.
    public static let emptyStateMessage =
        "No devices have synced in the last 30 minutes. If your event is live, this may indicate a network problem at the venue."
    /// Check-in buckets are this long.
    public static let bucketLength: Duration = .seconds(5 * 60)
    /// How many buckets the chart shows (the last hour).
    public static let bucketCount = 12

    public init(
        event: String?, events: [MonitorEvent], generatedAt: Timestamp, devices: [MonitorDevice], emptyState: String?,
        opsContact: String?, persistentFailures: [PersistentFailure], bucketStart: Timestamp, progress: EventProgress? = nil
    ) {
        self.progress = progress
        self.event = event
        self.events = events
        self.generatedAt = generatedAt
        self.devices = devices
        self.emptyState = emptyState
        self.opsContact = opsContact
        self.persistentFailures = persistentFailures
        self.bucketStart = bucketStart
    }
}

/// How far an event's check-in has come: guests checked in of those on the roster, and how many in the last
/// 5 minutes (by the devices' scan times).
public struct EventProgress: Sendable, Hashable, Codable {
    /// Guests on the roster checked in, as the server has the check-ins.
    public var checkedIn: Int
    /// Guests on the roster, cancelled registrations left out.
    public var onRoster: Int
    /// Check-ins scanned in the last 5 minutes.
    public var lastFiveMinutes: Int

    public init(checkedIn: Int, onRoster: Int, lastFiveMinutes: Int) {
        self.checkedIn = checkedIn
        self.onRoster = onRoster
        self.lastFiveMinutes = lastFiveMinutes
    }
}

/// One device on the sync monitor.
public struct MonitorDevice: Sendable, Hashable, Codable {
    public var fingerprint: String
    public var staffName: String
    public var status: DeviceState
    public var lastSeen: Timestamp
    public var lastRosterFetch: Timestamp?
    public var pendingCount: Int
    public var failedCount: Int
    public var appVersion: String
    /// Check-ins this device scanned per 5 minutes over the last hour, oldest first.
    public var checkIns: [Int]
    /// How many of its records have failed to sync for over a day.
    public var persistentFailures: Int
    /// How many of its records the server refused, as its last heartbeat said: they wait for a person.
    public var rejectedCount: Int
    /// The bytes of files (photos) waiting to upload with its records, as its last heartbeat said; absent from a
    /// server that predates it.
    public var pendingUploadBytes: Int64?

    public init(
        fingerprint: String, staffName: String, status: DeviceState, lastSeen: Timestamp, lastRosterFetch: Timestamp?,
        pendingCount: Int, failedCount: Int, appVersion: String, checkIns: [Int], persistentFailures: Int,
        rejectedCount: Int = 0, pendingUploadBytes: Int64? = nil
    ) {
        self.rejectedCount = rejectedCount
        self.pendingUploadBytes = pendingUploadBytes
        self.fingerprint = fingerprint
        self.staffName = staffName
        self.status = status
        self.lastSeen = lastSeen
        self.lastRosterFetch = lastRosterFetch
        self.pendingCount = pendingCount
        self.failedCount = failedCount
        self.appVersion = appVersion
        self.checkIns = checkIns
        self.persistentFailures = persistentFailures
    }
}

/// One record a device has failed to sync for over a day, as reported to `POST /v1/sync-failures`.
public struct SyncFailure: Sendable, Hashable, Codable {
    public var collection: String
    public var recordId: String
    /// When the device first tried to send it.
    public var firstAttempt: Timestamp
    /// The last failure's reason, as the device shows it.
    public var lastError: String
    /// What the device reports: a record that has not reached the server for longer than the threshold, or one
    /// the server refused. Absent means ``Kind/persistent``.
    public var kind: Kind?

    /// Why a device reports a record. Extensible: match on the constants.
    public struct Kind: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// Not synced for longer than the escalation threshold: the paging kind.
        public static let persistent = Self(rawValue: "persistent")
        /// Refused by the server, or in conflict, with its reason: it waits for a person, not for the network.
        public static let rejected = Self(rawValue: "rejected")
        /// The kinds a server takes.
        public static let all: [Self] = [.persistent, .rejected]
    }

    public init(collection: String, recordId: String, firstAttempt: Timestamp, lastError: String, kind: Kind? = nil) {
        self.collection = collection
        self.recordId = recordId
        self.firstAttempt = firstAttempt
        self.lastError = lastError
        self.kind = kind
    }

    private enum CodingKeys: String, CodingKey { case collection, recordId, firstAttempt, lastError, kind }

    /// A `kind` that is present must be a string: null is refused like any other wrong type.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        collection = try container.decode(String.self, forKey: .collection)
        recordId = try container.decode(String.self, forKey: .recordId)
        firstAttempt = try container.decode(Timestamp.self, forKey: .firstAttempt)
        lastError = try container.decode(String.self, forKey: .lastError)
        kind = container.contains(.kind) ? try container.decode(Kind.self, forKey: .kind) : nil
    }
}

extension SyncFailure {
    /// The longest reason a server keeps, in Unicode scalars (so that combining marks cannot stretch one
    /// character without end).
    public static let maxErrorLength = 1000

    /// Whether a server keeps `text` as a failure's reason: 1 to ``maxErrorLength`` Unicode scalars, and no
    /// control character but tab, line feed and carriage return (PostgreSQL's text refuses NUL outright).
    public static func isValidError(_ text: String) -> Bool {
        let scalars = text.unicodeScalars
        guard !scalars.isEmpty, scalars.count <= maxErrorLength else { return false }
        return !scalars.contains(where: isRefused)
    }

    /// `text` as a reason a server keeps: each refused control character becomes a space, a reason too long
    /// is cut short with an ellipsis, and an empty one reads "unknown error". A device's reasons come from
    /// servers and from the system, and a report must never be refused for one.
    public static func reportableError(_ text: String) -> String {
        var scalars = String.UnicodeScalarView(text.unicodeScalars.map { isRefused($0) ? " " : $0 })
        if scalars.count > maxErrorLength {
            scalars = String.UnicodeScalarView(scalars.prefix(maxErrorLength - 1))
            scalars.append("…")
        }
        let reason = String(scalars)
        return reason.isEmpty ? "unknown error" : reason
    }

    private static func isRefused(_ scalar: Unicode.Scalar) -> Bool {
        (scalar.value < 0x20 && scalar != "\t" && scalar != "\n" && scalar != "\r") || (0x7F...0x9F).contains(scalar.value)
    }
}

/// `POST /v1/sync-failures`: a device's persistent failures. Never a record's payload.
public struct SyncFailureReport: Sendable, Hashable, Codable {
    /// The most failures one report carries; a device with more sends several.
    public static let maxFailures = 500

    public var deviceId: String
    public var failures: [SyncFailure]

    public init(deviceId: String, failures: [SyncFailure]) {
        self.deviceId = deviceId
        self.failures = failures
    }
}

/// The answer to a failure report.
public struct SyncFailureReceipt: Sendable, Hashable, Codable {
    /// Reports recorded for the first time.
    public var recorded: Int
    /// Reports the server already had: not counted again.
    public var alreadyKnown: Int
    /// False when escalation is switched off on the server: nothing was recorded.
    public var escalationEnabled: Bool

    public init(recorded: Int, alreadyKnown: Int, escalationEnabled: Bool) {
        self.recorded = recorded
        self.alreadyKnown = alreadyKnown
        self.escalationEnabled = escalationEnabled
    }
}

/// A persistent failure as the monitor lists it.
public struct PersistentFailure: Sendable, Hashable, Codable {
    public var fingerprint: String
    public var staffName: String
    public var collection: String
    public var recordId: String
    public var firstAttempt: Timestamp
    public var lastError: String
    public var reportedAt: Timestamp

    public init(
        fingerprint: String, staffName: String, collection: String, recordId: String, firstAttempt: Timestamp,
        lastError: String, reportedAt: Timestamp
    ) {
        self.fingerprint = fingerprint
        self.staffName = staffName
        self.collection = collection
        self.recordId = recordId
        self.firstAttempt = firstAttempt
        self.lastError = lastError
        self.reportedAt = reportedAt
    }
}

/// The answer to `DELETE /v1/devices/{deviceId}/owner`.
public struct DeviceRelease: Sendable, Hashable, Codable {
    public var deviceId: String
    /// False when the device was bound to no one.
    public var released: Bool

    public init(deviceId: String, released: Bool) {
        self.deviceId = deviceId
        self.released = released
    }
}

/// `POST /v1/sign-in-codes`: a sign-in link for the monitor, for the organizer whose token asked. The code
/// is used once, within minutes; the session it starts ends no later than that token.
public struct SignInCode: Sendable, Hashable, Codable {
    public var code: String
    /// `/admin/session?code=…`: the link, relative to the server.
    public var path: String
    /// When the code stops working if unused.
    public var expiresAt: Timestamp

    public init(code: String, path: String, expiresAt: Timestamp) {
        self.code = code
        self.path = path
        self.expiresAt = expiresAt
    }
}

/// A venue relay's line to the server, as its monitor shows it.
public struct RelayLine: Sendable, Hashable, Codable {
    /// The server's host the relay forwards to.
    public var upstream: String
    /// Writes the relay holds that the server has not answered yet.
    public var waiting: Int
    /// When the oldest of them reached the relay.
    public var oldestWaitingSince: Timestamp?
    /// Writes the server took, and those it refused (each refusal goes back to its device).
    public var forwarded: Int
    public var refused: Int
    /// When the server last answered a forward.
    public var lastForwardedAt: Timestamp?
    /// Why the last forward failed, while the line is down; nil once one succeeds.
    public var lastError: String?

    public init(
        upstream: String, waiting: Int, oldestWaitingSince: Timestamp?, forwarded: Int, refused: Int,
        lastForwardedAt: Timestamp?, lastError: String?
    ) {
        self.upstream = upstream
        self.waiting = waiting
        self.oldestWaitingSince = oldestWaitingSince
        self.forwarded = forwarded
        self.refused = refused
        self.lastForwardedAt = lastForwardedAt
        self.lastError = lastError
    }
}

/// A venue relay as the server's monitor shows it.
public struct MonitorRelay: Sendable, Hashable, Codable {
    public var relayId: String
    public var name: String
    /// The events it serves.
    public var scopes: [String]
    /// By its last contact, as a device's by its last report.
    public var status: DeviceState
    public var lastContact: Timestamp
    /// What it held for the server at its last contact, and since when the oldest waited.
    public var waiting: Int
    public var oldestWaitingSince: Timestamp?
    /// Why its last forward before that contact failed, if it did.
    public var lastError: String?

    public init(
        relayId: String, name: String, scopes: [String], status: DeviceState, lastContact: Timestamp, waiting: Int,
        oldestWaitingSince: Timestamp?, lastError: String?
    ) {
        self.relayId = relayId
        self.name = name
        self.scopes = scopes
        self.status = status
        self.lastContact = lastContact
        self.waiting = waiting
        self.oldestWaitingSince = oldestWaitingSince
        self.lastError = lastError
    }
}
