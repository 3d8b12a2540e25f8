import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import OutpostProtocol
import ServiceLifecycle

/// Tells an event's organizer, at the URL they set, when one of its devices has not synced for 30 minutes, when it
/// is back, and when it holds records that failed to sync for over a day: each once per episode, whichever of
/// several servers sees it first.
///
/// It looks every ``interval``. A notice the receiver did not take (no answer, or not 2xx) is tried again at the
/// next look; the episode is claimed only once it was delivered, so nothing is announced twice or lost.
struct NotificationWatch<Storage: SyncStorage>: Service {
    let storage: Storage
    let clock: any Clock<Duration>
    let now: @Sendable () -> Date
    let logger: Logger
    /// Delivers a body to a URL; throws unless the receiver took it.
    let deliver: @Sendable (_ url: String, _ body: [UInt8]) async throws -> Void
    var interval: Duration = .seconds(60)
    /// A device that has not reported for this long is announced as not syncing.
    static var staleAfter: Duration { .seconds(30 * 60) }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do { try await clock.sleep(for: interval) } catch { return }
                await look()
            }
        }
    }

    /// One look at every event with notifications.
    func look() async {
        let settings: [EventNotification]
        do {
            settings = try await storage.allNotifications()
        } catch {
            logger.warning("notifications: the settings could not be read")
            return
        }
        // Each event apart: a receiver that does not answer holds its own event's notices only.
        await withTaskGroup(of: Void.self) { group in
            for setting in settings {
                group.addTask {
                    do {
                        try await look(at: setting)
                    } catch is NotTaken {
                        // Tried again at the next look, with the rest of this event's notices.
                    } catch {
                        logger.warning("notifications: an event's devices could not be read", metadata: ["event": "\(setting.event)"])
                    }
                }
            }
        }
    }

    private func look(at setting: EventNotification) async throws {
        let time = now()
        let reports = try await storage.deviceReports(tenant: setting.tenant, event: setting.event)
        let failing = Set(try await storage.persistentFailures(tenant: setting.tenant).map(\.fingerprint))
        let staleBefore = Timestamp(time).millisecondsSince1970 - Self.staleAfter.milliseconds
        for report in reports {
            let device = "\(report.staffName.isEmpty ? "A" : report.staffName + "'s") device (\(report.fingerprint.prefix(8)))"
            if report.lastSeen < staleBefore {
                try await announce(
                    .stale, opening: true, setting, report, at: time,
                    text: "\(device) hasn't synced in 30 minutes.", type: "device_stale")
            } else {
                try await announce(
                    .stale, opening: false, setting, report, at: time, text: "\(device) is syncing again.",
                    type: "device_back_online")
            }
            // An episode lasts while the device reports records waiting; it ends, unannounced, when none wait.
            if failing.contains(report.fingerprint) && report.pendingCount + report.failedCount > 0 {
                try await announce(
                    .persistentFailure, opening: true, setting, report, at: time,
                    text: "\(device) has records that have not synced for over 24 hours.", type: "persistent_failure")
            } else if report.pendingCount + report.failedCount == 0 {
                _ = try await storage.closeEpisode(
                    tenant: setting.tenant, event: setting.event, fingerprint: report.fingerprint, kind: .persistentFailure)
            }
        }
    }

    /// Opens (or closes) the episode and announces it, when this server is the one that changed it; undoes the
    /// change when the receiver did not take the notice, so that the next look tries again, and throws
    /// ``NotTaken`` so that this look sends the event nothing more.
    private func announce(
        _ kind: EpisodeKind, opening: Bool, _ setting: EventNotification, _ report: DeviceReport, at time: Date,
        text: String, type: String
    ) async throws {
        let (tenant, event, fingerprint) = (setting.tenant, setting.event, report.fingerprint)
        let at = Timestamp(time).millisecondsSince1970
        let changed =
            opening
            ? try await storage.openEpisode(tenant: tenant, event: event, fingerprint: fingerprint, kind: kind, at: at)
            : try await storage.closeEpisode(tenant: tenant, event: event, fingerprint: fingerprint, kind: kind)
        guard changed else { return }
        let notice = Notice(type: type, event: event, device: fingerprint, staff: report.staffName, text: text, at: Timestamp(time))
        do {
            try await deliver(setting.url, try notice.body(setting.format))
            logger.info("notification sent", metadata: ["event": "\(event)", "type": "\(type)"])
        } catch {
            logger.warning(
                "notification not taken by the receiver; tried again later",
                metadata: [
                    "event": "\(event)", "type": "\(type)",
                    "reason": "\(error is ReceiverClient.InternalAddress ? ReceiverClient.InternalAddress.reason : "not taken")",
                ])
            if opening {
                _ = try await storage.closeEpisode(tenant: tenant, event: event, fingerprint: fingerprint, kind: kind)
            } else {
                _ = try await storage.openEpisode(tenant: tenant, event: event, fingerprint: fingerprint, kind: kind, at: at)
            }
            throw NotTaken()
        }
    }

    /// The receiver did not take a notice.
    struct NotTaken: Error {}

    /// What is sent.
    struct Notice: Encodable {
        var type: String
        var event: String
        var device: String
        var staff: String
        var text: String
        var at: Timestamp

        func body(_ format: NotificationFormat) throws -> [UInt8] {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            switch format {
            case .json: return Array(try encoder.encode(self))
            case .slack: return Array(try encoder.encode(["text": "\(event): \(text)"]))
            }
        }
    }

    /// POSTs the body as JSON with AsyncHTTPClient, within 10 seconds; a 2xx answer is delivery.
    static func post(url: String, body: [UInt8]) async throws {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "outpost-notifications")
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await ReceiverClient.execute(request, timeout: .seconds(10))
        guard (200..<300).contains(response.status.code) else { throw NotificationRefused(status: Int(response.status.code)) }
    }

    struct NotificationRefused: Error {
        var status: Int
    }
}

/// The process's one client for receivers named by an address (see ``ReceiverClient``); like `HTTPClient.shared`, it lives as long
/// as the process.
enum NotificationClient {
    static let shared = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)

    /// Follows no redirect, and gives up connecting after 5 seconds.
    static var configuration: HTTPClient.Configuration {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout.connect = .seconds(5)
        return configuration
    }
}
