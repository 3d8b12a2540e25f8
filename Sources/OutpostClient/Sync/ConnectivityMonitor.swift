import Foundation

/// Tells the engine when the device goes online or offline.
///
/// ``HealthProbeMonitor`` probes the server's `/health`; on Apple platforms `NetworkPathMonitor` follows the network path.
public protocol ConnectivityMonitor: Sendable {
    /// Online (true) or offline (false), first the current state, then every change. Ends on cancellation.
    func changes() -> AsyncStream<Bool>
}

/// Probes the server's `/health` every `interval`, through the injected clock.
public struct HealthProbeMonitor: ConnectivityMonitor {
    let transport: any SyncTransport
    let clock: any Clock<Duration>
    let interval: Duration

    public init(transport: any SyncTransport, clock: any Clock<Duration> = ContinuousClock(), interval: Duration = .seconds(5)) {
        self.transport = transport
        self.clock = clock
        self.interval = interval
    }

    public func changes() -> AsyncStream<Bool> {
        changes(whilePathIsUp: { true })
    }

    /// Online while `pathIsUp` and the server answers `/health`, asked every `interval`: first the current state,
    /// then every change; ends when its consumer stops.
    func changes(whilePathIsUp pathIsUp: @escaping @Sendable () -> Bool) -> AsyncStream<Bool> {
        let (transport, clock, interval) = (transport, clock, interval)
        return AsyncStream { continuation in
            let task = Task {
                var last: Bool?
                while !Task.isCancelled {
                    let online = pathIsUp() ? (try? await transport.health()) != nil : false
                    if online != last {
                        continuation.yield(online)
                        last = online
                    }
                    do { try await clock.sleep(for: interval) } catch { break }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
