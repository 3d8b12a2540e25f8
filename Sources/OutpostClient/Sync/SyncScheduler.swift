import Foundation

/// The triggers of a running app: connectivity changes and a retry timer. Runs until cancelled.
///
/// - Going online (from the monitor) syncs anything pending.
/// - Every `retryInterval`, it brings the 24-hour notice up to date, and, while online with something queued,
///   syncs again; this is how records that failed after their retries get another chance without a user.
/// - Each periodic job runs every `interval` (only while online when it says so): heartbeats, roster
///   refreshes, the persistent-failure check.
public struct SyncScheduler: Sendable {
    /// Work a running device repeats.
    public struct PeriodicWork: Sendable {
        public var interval: Duration
        /// Skip the run while offline (work that needs the server).
        public var onlineOnly: Bool
        public var work: @Sendable () async -> Void

        public init(every interval: Duration, onlineOnly: Bool = true, _ work: @escaping @Sendable () async -> Void) {
            self.interval = interval
            self.onlineOnly = onlineOnly
            self.work = work
        }
    }

    public let engine: SyncEngine
    public let monitor: any ConnectivityMonitor
    public let clock: any Clock<Duration>
    public let retryInterval: Duration
    public let periodic: [PeriodicWork]

    public init(
        engine: SyncEngine, monitor: any ConnectivityMonitor, clock: any Clock<Duration> = ContinuousClock(),
        retryInterval: Duration = .seconds(60), periodic: [PeriodicWork] = []
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
                    // Counted again: another process on the same store may have queued records meanwhile. The
                    // notice too, online or not: a record made offline ages past the threshold on this timer.
                    try? await engine.refreshStatus()
                    _ = try? await engine.refreshPersistentFailureNotice()
                    let status = await engine.status
                    if status.isOnline, status.pendingCount + status.failedCount > 0 {
                        _ = try? await engine.sync()
                    }
                }
            }
            for job in periodic {
                group.addTask {
                    while !Task.isCancelled {
                        do { try await clock.sleep(for: job.interval) } catch { return }
                        let online = await engine.status.isOnline
                        if online || !job.onlineOnly { await job.work() }
                    }
                }
            }
            await group.waitForAll()
        }
    }
}
