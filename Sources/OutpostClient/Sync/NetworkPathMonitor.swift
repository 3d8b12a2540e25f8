#if canImport(Network)
    import Dispatch
    import Network
    import NIOConcurrencyHelpers

    /// Follows the device's network path (`NWPathMonitor`) and the server: offline at once when the path goes; online
    /// when a path is up and the server answers `/health`, asked every `interval` while the path is up, so that a server
    /// back after an outage, or a captive portal signed in to, is noticed without a change of network.
    public struct NetworkPathMonitor: ConnectivityMonitor {
        let probe: HealthProbeMonitor

        public init(transport: any SyncTransport, clock: any Clock<Duration> = ContinuousClock(), interval: Duration = .seconds(5)) {
            probe = HealthProbeMonitor(transport: transport, clock: clock, interval: interval)
        }

        public func changes() -> AsyncStream<Bool> {
            let pathIsUp = NIOLockedValueBox(true)
            nonisolated(unsafe) let monitor = NWPathMonitor()
            let probes = probe.changes(whilePathIsUp: { pathIsUp.withLockedValue { $0 } })
            return AsyncStream { continuation in
                monitor.pathUpdateHandler = { update in
                    let up = update.status == .satisfied
                    pathIsUp.withLockedValue { $0 = up }
                    // A path gone is offline at once; a path back waits for the server's answer.
                    if !up { continuation.yield(false) }
                }
                let forward = Task {
                    for await online in probes { continuation.yield(online) }
                    continuation.finish()
                }
                monitor.start(queue: DispatchQueue(label: "outpost.network-path"))
                continuation.onTermination = { _ in
                    monitor.cancel()
                    forward.cancel()
                }
            }
        }
    }
#endif
