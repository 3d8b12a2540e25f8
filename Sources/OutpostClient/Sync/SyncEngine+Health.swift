import Foundation
import OutpostProtocol

/// The SDK's version, as heartbeats report it.
public enum OutpostVersion {
    public static let current = "0.5.0"
}

/// When a record counts as persistently failing, and whether the device tells the server.
public struct EscalationPolicy: Sendable, Hashable {
    /// Report persistent failures to `POST /v1/sync-failures`. Off, the device still shows its notice.
    public var reportsToServer: Bool
    /// How long a record may keep failing before it counts: a day.
    public var threshold: Duration
    /// The waits between attempts to deliver a report.
    public var retryDelays: [Duration]

    public init(
        reportsToServer: Bool = true, threshold: Duration = .seconds(24 * 3600),
        retryDelays: [Duration] = [.seconds(1), .seconds(2), .seconds(4)]
    ) {
        self.reportsToServer = reportsToServer
        self.threshold = threshold
        self.retryDelays = retryDelays
    }
}

/// The notice a device holds while records made over the escalation threshold ago have still not synced,
/// whether or not a sync was ever tried.
///
/// It cannot be dismissed: ``SyncEngine/dismissPersistentFailureNotice()`` refuses. It goes away only when
/// those records sync. It covers what can still sync; it also says how many records the server refused,
/// which wait for the user instead.
public struct PersistentFailureNotice: Sendable, Hashable {
    /// How many records have waited too long.
    public var count: Int
    /// How many records the server refused, counted apart: retrying cannot deliver them.
    public var refusedCount: Int = 0
    /// How long "too long" is: the escalation threshold.
    public var threshold: Duration
    /// True while a retry runs: the action shows a busy state and ignores a second press.
    public var isRetrying: Bool
    /// A short error after a failed retry.
    public var retryError: String?

    public init(
        count: Int, refusedCount: Int = 0, threshold: Duration = .seconds(24 * 3600), isRetrying: Bool = false,
        retryError: String? = nil
    ) {
        self.count = count
        self.refusedCount = refusedCount
        self.threshold = threshold
        self.isRetrying = isRetrying
        self.retryError = retryError
    }

    /// "3 records have not synced for over 24 hours", and the refused ones.
    public var message: String {
        let records = count == 1 ? "1 record has" : "\(count) records have"
        var text = "\(records) not synced for over \(Self.describe(threshold))"
        if refusedCount > 0 {
            text += refusedCount == 1 ? "; 1 more was refused by the server" : "; \(refusedCount) more were refused by the server"
        }
        return text
    }

    /// What the person holding the device can do, besides the Retry button.
    public static let guidance = [
        "Check that the device has a network connection (Wi-Fi or mobile data).",
        "Keep the app open until the records sync.",
        "If this notice stays, contact your organizer.",
    ]

    /// "24 hours", "30 minutes", "1 hour".
    public static func describe(_ span: Duration) -> String {
        let seconds = span.components.seconds
        func unit(_ value: Int64, _ name: String) -> String { "\(value) \(name)\(value == 1 ? "" : "s")" }
        if seconds % 3600 == 0 { return unit(seconds / 3600, "hour") }
        if seconds % 60 == 0 { return unit(seconds / 60, "minute") }
        return unit(seconds, "second")
    }

    /// The notice's only action.
    public static let actionTitle = "Retry sync"
    public var isDismissible: Bool { false }
}

/// What pressing "Retry sync" did.
public enum NoticeRetry: Sendable, Hashable {
    /// A retry was already running: this press is ignored.
    case alreadyRunning
    /// The retry ran; the notice is gone when everything synced.
    case finished(SyncSummary)
}

extension ClientError.Code {
    /// The persistent-failure notice cannot be dismissed.
    public static let notDismissible = Self(rawValue: "not_dismissible")
}

extension SyncEngine {
    // MARK: Heartbeats

    /// The event this device works at (the one whose roster it opened), as its heartbeats name it: an event's
    /// sync monitor (`GET /v1/monitor?event=…`) lists the devices whose last heartbeat named the event. Nil
    /// while none is set.
    public func currentEvent() async throws -> String? {
        try await store.setting(LocalStore.currentEventSetting)
    }

    /// Sets the event this device works at, or clears it with nil; the next heartbeat names it, and one is sent
    /// at once when the server is reachable, so that the event's monitor lists the device without waiting.
    ///
    /// - Throws: ``ClientError`` `invalidInput` when `event` is not an identifier.
    public func setCurrentEvent(_ event: String?) async throws {
        if let event, !Identifier.isValid(event) {
            throw ClientError(.invalidInput, "an event id must be 1 to 128 characters from A-Z a-z 0-9 . _ : @ -")
        }
        try await store.setSetting(LocalStore.currentEventSetting, event)
        if status.isOnline { startHeartbeat() }
    }

    /// Records where sign-in stands, as the runtime learns it (a provider asked, a token taken), and publishes it.
    func setSignIn(_ state: SignInState) {
        guard status.signIn != state else { return }
        status.signIn = state
        publish()
    }

    /// Reports this device's state to the sync monitor: ids and counts only. Best effort: returns false when
    /// the server cannot be reached, and the next sync or minute tries again.
    @discardableResult
    public func sendHeartbeat() async -> Bool {
        guard let counts = try? await store.counts() else { return false }
        let event = try? await store.setting(LocalStore.currentEventSetting)
        let fetched = try? await store.lastReferenceFetch()
        let uploading = try? await store.pendingUploadBytes()
        let beat = Heartbeat(
            deviceId: configuration.deviceId, event: event ?? nil, pendingCount: counts.pending,
            failedCount: counts.failed, rejectedCount: counts.refused, lastRosterFetch: fetched.flatMap { $0 }.map(Timestamp.init),
            appVersion: configuration.appVersion, pendingUploadBytes: uploading)
        return (try? await transport.monitorHeartbeat(beat)) != nil
    }

    /// After every sync: the notice brought up to date, and when online a heartbeat, sent in the background so
    /// that no action waits on it, the user's keys for record ids fetched if the device holds none, and the
    /// records stored under provisional ids renamed with them.
    func afterSync() async {
        _ = try? await refreshPersistentFailureNotice()
        _ = try? await releaseFileBytes()
        guard status.isOnline else { return }
        // The heartbeat first: a process about to exit waits for it only a moment after the sync returns.
        startHeartbeat()
        if await fetchRecordIdKeys() != nil {
            // A rename that fails (the store busy past its timeout) is tried again after the next sync.
            _ = try? await settleRecordIds()
        }
    }

    // MARK: Persistent failures

    /// Looks for records waiting longer than the escalation threshold, updates the notice, and (when the
    /// policy says so) reports them to the server, retrying with backoff. The records the server refused go in
    /// the same reports as what they are (``SyncFailure/Kind/rejected``, with the reason), never as records
    /// waiting too long. Run it on launch and hourly.
    ///
    /// - Returns: the records waiting too long (empty when there are none).
    @discardableResult
    public func checkPersistentFailures() async throws -> [SyncFailure] {
        let waiting = try await refreshPersistentFailureNotice()
        let refused = try await store.records(.refused).map { record in
            SyncFailure(
                collection: record.collection, recordId: record.recordId,
                firstAttempt: record.lastSyncAttempt.map(Timestamp.init) ?? record.createdAt,
                lastError: SyncFailure.reportableError(record.syncError ?? "refused by the server"), kind: .rejected)
        }
        let failures =
            waiting.map { failure in
                var failure = failure
                failure.kind = .persistent
                return failure
            } + refused
        guard !failures.isEmpty, configuration.escalation.reportsToServer else { return waiting }
        // In reports of at most what a server takes in one.
        var start = 0
        while start < failures.count {
            let end = min(start + SyncFailureReport.maxFailures, failures.count)
            let report = SyncFailureReport(deviceId: configuration.deviceId, failures: Array(failures[start..<end]))
            start = end
            var attempt = 0
            while true {
                do {
                    _ = try await transport.monitorReportFailures(report)
                    break
                } catch let error as TransportError {
                    guard error.isRetryable, attempt < configuration.escalation.retryDelays.count else { return waiting }
                    try await clock.sleep(for: configuration.escalation.retryDelays[attempt])
                    attempt += 1
                }
            }
        }
        return waiting
    }

    /// Recomputes the notice from the store alone (no network), keeping a running retry's state: what an app
    /// runs on every start and a timer runs after. Cheap: one read.
    ///
    /// - Returns: the records waiting longer than the threshold.
    @discardableResult
    public func refreshPersistentFailureNotice() async throws -> [SyncFailure] {
        let cutoff = now().addingTimeInterval(-Double(configuration.escalation.threshold.components.seconds))
        let failures = try await store.outbox.persistentFailures(writtenBefore: cutoff)
        let rejected = try await store.counts().refused
        let previous = status.persistentFailureNotice
        status.refusedCount = rejected
        status.persistentFailureNotice =
            failures.isEmpty
            ? nil
            : PersistentFailureNotice(
                count: failures.count, refusedCount: rejected, threshold: configuration.escalation.threshold,
                isRetrying: previous?.isRetrying ?? false, retryError: previous?.retryError)
        if previous != status.persistentFailureNotice { publish() }
        return failures
    }

    /// The ids of the records of `collection` (in `scope` when given) that have waited to sync longer than the
    /// escalation threshold: a list shows each of them as not synced for that long, on its own row, rather than
    /// as pending.
    public func overdueRecordIds(collection: String, scope: String? = nil) async throws -> Set<String> {
        let cutoff = now().addingTimeInterval(-Double(configuration.escalation.threshold.components.seconds))
        return try await store.outbox.overdueRecordIds(writtenBefore: cutoff, collection: collection, scope: scope)
    }

    /// Refuses, always: the notice stays until the records sync.
    public func dismissPersistentFailureNotice() throws {
        throw ClientError(.notDismissible, "This notice stays until those records sync: use \(PersistentFailureNotice.actionTitle)")
    }

    /// The notice's "Retry sync": requeues and syncs everything, showing a busy state while it runs.
    ///
    /// A second press while one runs is ignored (`alreadyRunning`). On failure the notice stays, with a short error.
    public func retryPersistentFailures() async throws -> NoticeRetry {
        guard status.persistentFailureNotice?.isRetrying != true else { return .alreadyRunning }
        status.persistentFailureNotice?.isRetrying = true
        status.persistentFailureNotice?.retryError = nil
        publish()
        let summary: SyncSummary
        do {
            summary = try await retryAll()
        } catch {
            status.persistentFailureNotice?.isRetrying = false
            status.persistentFailureNotice?.retryError = "Retry failed: the device store could not be read"
            publish()
            throw error
        }
        status.persistentFailureNotice?.isRetrying = false
        try await refreshPersistentFailureNotice()
        if status.persistentFailureNotice != nil {
            status.persistentFailureNotice?.retryError = "Retry failed: \(summary.reasons.first ?? "records still not synced")"
            publish()
        }
        return .finished(summary)
    }
}
