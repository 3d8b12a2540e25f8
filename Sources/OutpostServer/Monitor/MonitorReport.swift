import Foundation
import OutpostProtocol
import OutpostRecords

/// Builds what the sync monitor shows from stored reports. One function for the JSON endpoint and the page.
enum MonitorReport {
    /// Loads and assembles the monitor for `tenant`, in `event` when given.
    static func load(
        tenant: String, event: String?, storage: some MonitorStorage, secrets: ServerSecrets, relay: RelayConfiguration?,
        now: Date
    ) async throws -> MonitorResponse {
        let generatedAt = Timestamp(now)
        let bucketStart = Self.bucketStart(now: generatedAt)
        let events = try await storage.events(tenant: tenant)
        let reports = try await storage.deviceReports(tenant: tenant, event: event)
        var scans: [(fingerprint: String, at: Int64)] = []
        var opsContact: String?
        var progress: EventProgress?
        if let event {
            // Devices' ids appear only inside check-ins; the monitor sees their fingerprints.
            var fingerprints: [String: String] = [:]
            for scan in try await storage.checkInScans(tenant: tenant, event: event, since: bucketStart.millisecondsSince1970) {
                if fingerprints[scan.scannedBy] == nil {
                    fingerprints[scan.scannedBy] = try secrets.fingerprint(tenant: tenant, deviceId: scan.scannedBy)
                }
                scans.append((fingerprints[scan.scannedBy]!, scan.at))
            }
            let record = try await storage.record(tenant: tenant, collection: EventRecord.collection, recordId: event)
            opsContact = record?.tombstone == false ? record?.fields[EventRecord.Field.opsContact]?.stringValue : nil
            progress = try await storage.eventProgress(
                tenant: tenant, event: event,
                since: generatedAt.millisecondsSince1970 - MonitorResponse.bucketLength.milliseconds)
        }
        let reported = try await storage.syncFailures(tenant: tenant)
        var response = assemble(
            event: event, events: events, reports: reports, scans: scans, failures: reported.filter { $0.kind == .persistent },
            opsContact: opsContact, now: generatedAt)
        response.refusedRecords = Self.shown(reported.filter { $0.kind == .rejected }, of: reports)
        response.progress = progress
        let nowMilliseconds = generatedAt.millisecondsSince1970
        response.relays = try await storage.relayReports(tenant: tenant, since: nowMilliseconds - 24 * 3600 * 1000)
            .filter { event == nil || $0.scopes.contains(event!) }
            .map { report in
                MonitorRelay(
                    relayId: report.relayId, name: report.name, scopes: report.scopes,
                    status: DeviceState(lastSeen: Timestamp(millisecondsSince1970: report.lastContact), now: generatedAt),
                    lastContact: Timestamp(millisecondsSince1970: report.lastContact), waiting: report.waiting,
                    oldestWaitingSince: report.oldestWaiting.map(Timestamp.init(millisecondsSince1970:)),
                    lastError: report.lastError)
            }
        if let relay, relay.tenant == tenant, let journal = storage as? any RelayJournalStorage {
            let backlog = try await journal.relayBacklog()
            response.relay = RelayLine(
                upstream: relay.upstream.host ?? relay.upstream.absoluteString, waiting: backlog.waiting,
                oldestWaitingSince: backlog.oldestAcceptedAt.map(Timestamp.init(millisecondsSince1970:)),
                forwarded: backlog.forwarded, refused: backlog.refused,
                lastForwardedAt: backlog.lastSuccessAt.map(Timestamp.init(millisecondsSince1970:)), lastError: backlog.lastError)
        }
        return response
    }

    /// The first 5-minute bucket of the chart: the last hour, the current bucket last.
    static func bucketStart(now: Timestamp) -> Timestamp {
        let length = MonitorResponse.bucketLength.milliseconds
        let current = now.millisecondsSince1970 / length * length
        return Timestamp(millisecondsSince1970: current - length * Int64(MonitorResponse.bucketCount - 1))
    }

    /// Pure: the monitor from its parts.
    static func assemble(
        event: String?, events: [MonitorEvent], reports: [DeviceReport], scans: [(fingerprint: String, at: Int64)],
        failures: [StoredSyncFailure], opsContact: String?, now: Timestamp
    ) -> MonitorResponse {
        let start = bucketStart(now: now)
        let length = MonitorResponse.bucketLength.milliseconds
        var buckets: [String: [Int]] = [:]
        for scan in scans {
            let index = Int((scan.at - start.millisecondsSince1970) / length)
            guard (0..<MonitorResponse.bucketCount).contains(index) else { continue }
            buckets[scan.fingerprint, default: Array(repeating: 0, count: MonitorResponse.bucketCount)][index] += 1
        }
        let shown = Set(reports.map(\.fingerprint))
        let relevant = failures.filter { shown.contains($0.fingerprint) }
        let failuresByDevice = Dictionary(grouping: relevant, by: \.fingerprint).mapValues(\.count)
        let devices = reports.map { report in
            MonitorDevice(
                fingerprint: report.fingerprint, staffName: report.staffName,
                status: DeviceState(lastSeen: Timestamp(millisecondsSince1970: report.lastSeen), now: now),
                lastSeen: Timestamp(millisecondsSince1970: report.lastSeen),
                lastRosterFetch: report.lastRosterFetch.map(Timestamp.init(millisecondsSince1970:)),
                pendingCount: report.pendingCount, failedCount: report.failedCount, appVersion: report.appVersion,
                checkIns: buckets[report.fingerprint] ?? Array(repeating: 0, count: MonitorResponse.bucketCount),
                persistentFailures: failuresByDevice[report.fingerprint] ?? 0, rejectedCount: report.rejectedCount,
                pendingUploadBytes: report.pendingUploadBytes)
        }
        let anyRecent = devices.contains { $0.status != .offline }
        return MonitorResponse(
            event: event, events: events, generatedAt: now, devices: devices,
            emptyState: anyRecent ? nil : MonitorResponse.emptyStateMessage, opsContact: opsContact,
            persistentFailures: Self.shown(relevant, of: reports), bucketStart: start)
    }

    /// The reported records of the devices shown, each with its device's staff name.
    static func shown(_ failures: [StoredSyncFailure], of reports: [DeviceReport]) -> [PersistentFailure] {
        let staff = Dictionary(reports.map { ($0.fingerprint, $0.staffName) }, uniquingKeysWith: { first, _ in first })
        return failures.compactMap { failure in
            guard let name = staff[failure.fingerprint] else { return nil }
            return PersistentFailure(
                fingerprint: failure.fingerprint, staffName: name, collection: failure.collection, recordId: failure.recordId,
                firstAttempt: Timestamp(millisecondsSince1970: failure.firstAttempt), lastError: failure.lastError,
                reportedAt: Timestamp(millisecondsSince1970: failure.reportedAt))
        }
    }
}
