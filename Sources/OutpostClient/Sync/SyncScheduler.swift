import Foundation

/// The triggers of a running app: connectivity changes and a retry timer. Runs until cancelled.
///
/// - Going online (from the monitor) syncs anything pending.
/// - Every `retryInterval`, while online with something queued, it syncs again; this is how records that
///   failed after their retries get another chance without a user.
/// - Every `periodic.interval`, while online, it runs `periodic.work` (the CLI refreshes the event roster).
public struct SyncScheduler: Sendable {
    public let engine: SyncEngine
    public let monitor: any ConnectivityMonitor
    public let clock: any Clock<Duration>
    public let retryInterval: Duration
    /// Periodic work while online, such as refreshing reference data; with its interval.
    public let periodic: (interval: Duration, work: @Sendable () async -> Void)?

    public init(
        engine: SyncEngine, monitor: any ConnectivityMonitor, clock: any Clock<Duration> = ContinuousClock(),
        retryInterval: Duration = .seconds(60),
        periodic: (interval: Duration, work: @Sendable () async -> Void)? = nil
    ) {
        self.engine = engine
        self.monitor = monitor
        self.clock = clock
        self.retryInterval = retryInterval
        self.periodic = periodic
    }

    /// Runs both triggers until the calling task is cancelled.
    public func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await online in monitor.changes() {
                    await engine.setOnline(online)
                }
            }
            group.addTask {
                while !Task.isCancelled {
                    do { try await clock.sleep(for: retryInterval) } catch { return }
                    let status = await engine.status
                    if status.isOnline, status.pendingCount + status.failedCount > 0 {
                        _ = try? await engine.sync()
                    }
                }
            }
            if let periodic {
                group.addTask {
                    while !Task.isCancelled {
                        do { try await clock.sleep(for: periodic.interval) } catch { return }
                        if await engine.status.isOnline { await periodic.work() }
                    }
                }
            }
            await group.waitForAll()
        }
    }
}
