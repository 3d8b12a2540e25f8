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
        try await options.withDevice(escalateAfter: escalation.escalateAfter.duration) { device in try await run(device) }
    }

    private func run(_ device: Device) async throws {
        let data = ReferenceData(store: device.store, transport: device.transport)
        let engine = device.engine
        let scheduler = SyncScheduler(
            engine: engine,
            monitor: HealthProbeMonitor(transport: device.transport, interval: probeInterval.duration),
            retryInterval: retryInterval.duration,
            periodic: [
                .init(every: refreshInterval.duration) {
                    guard let event = try? await engine.currentEvent(),
                        (try? await data.state(collection: Guest.collection, scope: event))?.isReady == true,
                        let summary = try? await data.refresh(collection: Guest.collection, scope: event)
                    else { return }
                    say("roster \(event) refreshed: \(summary.updated) updated, \(summary.removed) removed")
                },
                .init(every: heartbeatInterval.duration) { await engine.sendHeartbeat() },
                .init(every: escalationInterval.duration, onlineOnly: false) {
                    await Self.escalate(engine)
                },
            ])
        // On launch: look for records failing too long, before anything else.
        await Self.escalate(engine)
        let service = DeviceService(device: device, scheduler: scheduler)
        let group = ServiceGroup(
            configuration: .init(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: .cli("outpost-device")))
        say("device \(device.deviceId) running against \(device.serverURL.absoluteString); Ctrl-C stops")
        try await group.run()
        say("device stopped: \(await device.engine.status.offlineIndicatorText)")
    }

    /// Checks for persistent failures and prints the notice when there is one.
    static func escalate(_ engine: SyncEngine) async {
        guard let failures = try? await engine.checkPersistentFailures(), !failures.isEmpty,
            let notice = await engine.status.persistentFailureNotice
        else { return }
        say("notice: \(notice.message) [\(PersistentFailureNotice.actionTitle): outpost device notice --retry]")
    }
}

/// The device's run loop as a service: the scheduler, and a line on stdout for every status change.
struct DeviceService: Service {
    let device: Device
    let scheduler: SyncScheduler

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await scheduler.run() }
                group.addTask {
                    var last: SyncStatus?
                    var toldToSignIn = false
                    for await status in await device.engine.statusUpdates() where status != last {
                        say("\(status.connectionText.lowercased()): \(status.offlineIndicatorText)")
                        last = status
                        // Once per refused token: a sign-in from another process is taken at the next retry.
                        let refused = (try? await Device.needsSignIn(store: device.store)) == true
                        if refused, !toldToSignIn { say(DeviceLogin.signInAgain) }
                        toldToSignIn = refused
                    }
                }
                await group.next()
                group.cancelAll()
            }
        }
    }
}
