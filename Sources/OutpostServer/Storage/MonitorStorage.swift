import OutpostProtocol

/// A device's latest heartbeat as stored: under its tenant-scoped fingerprint, never its id.
package struct DeviceReport: Sendable, Hashable {
    package var tenant: String
    package var fingerprint: String
    package var userId: String
    package var staffName: String
    /// The event the device has open, or "".
    package var event: String
    package var pendingCount: Int
    package var failedCount: Int
    /// Records the server refused, as the device last said.
    package var rejectedCount: Int = 0
    /// The bytes of files waiting to upload, as the device last said.
    package var pendingUploadBytes: Int64 = 0
    package var lastRosterFetch: Int64?
    package var appVersion: String
    package var lastSeen: Int64
}

/// A venue relay's last status report, as stored.
package struct RelayReport: Sendable, Hashable {
    package var tenant: String
    package var relayId: String
    package var name: String
    package var scopes: [String]
    package var waiting: Int
    package var oldestWaiting: Int64?
    package var lastError: String?
    /// When the server received the report.
    package var lastContact: Int64
}

/// A device and user that wrote a record.
package struct RecordWriter: Sendable, Hashable {
    package var deviceId: String
    package var userId: String
}

/// A persistent sync failure as stored: one row per device and record, so a report sent again counts once.
package struct StoredSyncFailure: Sendable, Hashable {
    package var tenant: String
    package var fingerprint: String
    package var userId: String
    package var collection: String
    package var recordId: String
    package var firstAttempt: Int64
    package var lastError: String
    package var reportedAt: Int64
    /// Waiting too long, or refused by the server.
    package var kind: SyncFailure.Kind = .persistent
}

/// The storage the sync monitor needs: heartbeats, persistent failures, and what the monitor reads.
///
/// Every method is scoped to a tenant, except ``deviceStateCounts(now:)``, which feeds the process-wide
/// metrics.
package protocol MonitorStorage: Sendable {
    /// Keeps `report` as the device's latest, unless a report seen later is kept already (a venue relay passes
    /// on what it heard, which may be older than what the device told the server itself).
    func recordHeartbeat(_ report: DeviceReport) async throws

    /// Keeps `report` as the relay's latest.
    func recordRelayReport(_ report: RelayReport) async throws

    /// The relays of `tenant` that reported since `since`, most recently heard from first.
    func relayReports(tenant: String, since: Int64) async throws -> [RelayReport]

    /// The latest report of each device of `tenant`, in `event` when given, most recently seen first.
    func deviceReports(tenant: String, event: String?) async throws -> [DeviceReport]

    /// The events of `tenant` (the `events` collection's live records) with their names, most recently
    /// created first.
    func events(tenant: String) async throws -> [MonitorEvent]

    /// Binds the device of `fingerprint` to `userId` unless it is bound already.
    ///
    /// - Returns: the user the device speaks for: `userId`, or the one it was bound to before.
    func bindDevice(tenant: String, fingerprint: String, userId: String, at time: Int64) async throws -> String

    /// Unbinds the device of `fingerprint`, so that the next user to use it owns it; false when it was not bound.
    func releaseDevice(tenant: String, fingerprint: String) async throws -> Bool

    /// The check-ins of `event` whose guests are on its roster, not cancelled; those guests; and those check-ins
    /// scanned at `since` or later.
    func eventProgress(tenant: String, event: String, since: Int64) async throws -> EventProgress

    /// Who scanned (the `scanned_by` device id) and when, for each check-in of `event` scanned at `since` or later.
    func checkInScans(tenant: String, event: String, since: Int64) async throws -> [(scannedBy: String, at: Int64)]

    /// Stores reported failures in one transaction, all or none; for each, false when this device had already
    /// reported that record as the same kind.
    func recordSyncFailures(_ failures: [StoredSyncFailure]) async throws -> [Bool]

    /// The reported failures of `tenant`, of both kinds, oldest first.
    func syncFailures(tenant: String) async throws -> [StoredSyncFailure]

    /// The devices and users that have written a record (its audit), for checking who may report on it.
    func recordWriters(tenant: String, collection: String, recordId: String) async throws -> Set<RecordWriter>

    /// One stored record, in `scope` ("" in a collection without a scope), tombstones included, or nil.
    func record(tenant: String, collection: String, recordId: String, scope: String) async throws -> StoredRecord?

    /// How many devices, across tenants, are in each state at `now`; devices silent for more than a day
    /// are left out (their event is over).
    func deviceStateCounts(now: Int64) async throws -> [DeviceState: Int]
}

extension MonitorStorage {
    /// ``record(tenant:collection:recordId:scope:)`` of a collection without a scope.
    package func record(tenant: String, collection: String, recordId: String) async throws -> StoredRecord? {
        try await record(tenant: tenant, collection: collection, recordId: recordId, scope: "")
    }

    /// The failures of `tenant` that wait too long, oldest first: what the monitor lists and the organizer is
    /// told of. A refusal waits for a person, not for the network, and is neither.
    package func persistentFailures(tenant: String) async throws -> [StoredSyncFailure] {
        try await syncFailures(tenant: tenant).filter { $0.kind == .persistent }
    }

    /// The records of `tenant` reported as refused by the server, oldest first.
    package func refusedRecords(tenant: String) async throws -> [StoredSyncFailure] {
        try await syncFailures(tenant: tenant).filter { $0.kind == .rejected }
    }

    /// Devices silent longer than this are no longer counted in the metrics.
    package static var activeWindow: Int64 { 24 * 3600 * 1000 }
}
