import ArgumentParser
import Foundation
import OutpostClient
import OutpostProtocol
import OutpostRecords
import ServiceLifecycle

struct DeviceRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Stay up: sync on reconnect, retry on a timer, print status changes; Ctrl-C stops.")

    @Option(name: .customLong("probe-interval"), help: "How often to check the server, such as 5s.")
    var probeInterval: DurationArgument = DurationArgument(argument: "5s")!
    @Option(name: .customLong("retry-interval"), help: "How often to retry what waits, such as 60s.")
    var retryInterval: DurationArgument = DurationArgument(argument: "60s")!
    @Option(name: .customLong("refresh-interval"), help: "How often to refresh the opened event's roster (delta only), such as 15m.")
    var refreshInterval: DurationArgument = DurationArgument(argument: "15m")!
    @Option(name: .customLong("heartbeat-interval"), help: "How often to report to the sync monitor, such as 60s.")
    var heartbeatInterval: DurationArgument = DurationArgument(argument: "60s")!
    @Option(name: .customLong("escalation-interval"), help: "How often to look for records failing for too long, such as 1h.")
    var escalationInterval: DurationArgument = DurationArgument(argument: "1h")!
    @OptionGroup var escalation: EscalationOptions
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withRuntime(
            escalateAfter: escalation.escalateAfter.duration,
            configure: { configuration in
                configuration.connectivity = .healthProbe(every: probeInterval.duration)
                configuration.retryInterval = retryInterval.duration
                configuration.heartbeatInterval = heartbeatInterval.duration
                configuration.escalationInterval = escalationInterval.duration
                configuration.referenceRefreshInterval = refreshInterval.duration
            }
        ) { outpost in
            let device = try await outpost.openDevice
            let group = ServiceGroup(
                configuration: .init(
                    services: [DeviceService(outpost: outpost)], gracefulShutdownSignals: [.sigterm, .sigint],
                    logger: .cli("outpost-device")))
            say("device \(device.deviceId) running against \(device.serverURL.absoluteString); Ctrl-C stops")
            try await group.run()
            say("device stopped: \(await outpost.status.offlineIndicatorText)")
        }
    }
}

/// The device's runtime as a service: started until shutdown, with a line on stdout for every status change.
struct DeviceService: Service {
    let outpost: Outpost

    func run() async throws {
        await outpost.start()
        await cancelWhenGracefulShutdown {
            var last: SyncStatus?
            for await status in await outpost.statusUpdates() where status != last {
                say("\(status.connectionText.lowercased()): \(status.offlineIndicatorText)")
                if let notice = status.persistentFailureNotice, notice.count != last?.persistentFailureNotice?.count {
                    say("notice: \(notice.message) [\(PersistentFailureNotice.actionTitle): outpost device notice --retry]")
                }
                // Once per refusal: a sign-in from another process is taken at the next retry.
                if status.needsSignIn, last?.needsSignIn != true { say(DeviceLogin.signInAgain) }
                last = status
            }
        }
        await outpost.stop()
    }
}
