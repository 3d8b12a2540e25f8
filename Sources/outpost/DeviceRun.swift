import ArgumentParser
import Foundation
import OutpostProtocol
import OutpostClient
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
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice { device in try await run(device) }
    }

    private func run(_ device: Device) async throws {
        let data = ReferenceData(store: device.store, transport: device.transport)
        let scheduler = SyncScheduler(
            engine: device.engine,
            monitor: HealthProbeMonitor(transport: device.transport, interval: probeInterval.duration),
            retryInterval: retryInterval.duration,
            periodic: (refreshInterval.duration, {
                guard let event = try? await device.store.setting(EventOption.currentEventSetting),
                    (try? await data.state(collection: Guest.collection, scope: event))?.isReady == true,
                    let summary = try? await data.refresh(collection: Guest.collection, scope: event)
                else { return }
                say("roster \(event) refreshed: \(summary.updated) updated, \(summary.removed) removed")
            }))
        let service = DeviceService(device: device, scheduler: scheduler)
        let group = ServiceGroup(
            configuration: .init(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: .cli("outpost-device")))
        say("device \(device.deviceId) running against \(device.serverURL.absoluteString); Ctrl-C stops")
        try await group.run()
        say("device stopped: \(await device.engine.status.offlineIndicatorText)")
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
                    for await status in await device.engine.statusUpdates() where status != last {
                        let syncing = status.isSyncing ? ", syncing" : ""
                        say("\(status.isOnline ? "online" : "offline")\(syncing): \(status.offlineIndicatorText)")
                        last = status
                    }
                }
                await group.next()
                group.cancelAll()
            }
        }
    }
}
