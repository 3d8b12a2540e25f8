import Foundation
import Logging
import OutpostProtocol
import ServiceLifecycle

/// Tells the server, every ``RelayConfiguration/reportInterval`` while the line is up, what the relay holds and
/// the latest heartbeat of each device of its events, so that the server's monitor shows the venue: the relay as
/// one row, and its devices as the relay last heard from them.
///
/// A report that does not arrive is not sent again: the next one says everything it said, newer.
struct RelayReporter<Storage: RelayJournalStorage>: Service {
    let storage: Storage
    let configuration: RelayConfiguration
    let clock: any Clock<Duration>
    let now: @Sendable () -> Date
    let report: @Sendable (RelayStatusReport) async throws -> Void

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await reportOnce()
                do { try await clock.sleep(for: configuration.reportInterval) } catch { return }
            }
        }
    }

    /// Sends one report.
    func reportOnce() async throws {
        let backlog = try await storage.relayBacklog()
        let since = now().milliseconds - 24 * 3600 * 1000
        let devices = try await storage.deviceReports(tenant: configuration.tenant, event: nil)
            .filter { configuration.scopes.contains($0.event) && $0.lastSeen >= since }
            .prefix(1000)
            .map { device in
                RelayDeviceReport(
                    fingerprint: device.fingerprint, userId: device.userId, staffName: device.staffName, event: device.event,
                    pendingCount: device.pendingCount, failedCount: device.failedCount, rejectedCount: device.rejectedCount,
                    lastRosterFetch: device.lastRosterFetch.map(Timestamp.init(millisecondsSince1970:)),
                    appVersion: device.appVersion, lastSeen: Timestamp(millisecondsSince1970: device.lastSeen))
            }
        let fingerprints = Set(devices.map(\.fingerprint))
        let failures = try await storage.syncFailures(tenant: configuration.tenant)
            .filter { fingerprints.contains($0.fingerprint) }
            .suffix(1000)
            .map { failure in
                RelayFailureReport(
                    fingerprint: failure.fingerprint, userId: failure.userId, collection: failure.collection,
                    recordId: failure.recordId, firstAttempt: Timestamp(millisecondsSince1970: failure.firstAttempt),
                    lastError: failure.lastError, kind: failure.kind)
            }
        try await report(
            RelayStatusReport(
                waiting: backlog.waiting, oldestWaitingSince: backlog.oldestAcceptedAt.map(Timestamp.init(millisecondsSince1970:)),
                lastError: backlog.lastError, devices: Array(devices), failures: Array(failures)))
    }
}
