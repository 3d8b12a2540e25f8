#if canImport(Network)
import Dispatch
import Network
import NIOConcurrencyHelpers

/// Follows the device's network path (`NWPathMonitor`) and the server: offline at once when the path goes; online
/// when a path is up and the server answers `/health`, asked every `interval` while the path is up, so that a server
/// back after an outage, or a captive portal signed in to, is noticed without a change of network.
public struct NetworkPathMonitor: ConnectivityMonitor {
    let transport: any SyncTransport
    let clock: any Clock<Duration>
    let interval: Duration

    public init(transport: any SyncTransport, clock: any Clock<Duration> = ContinuousClock(), interval: Duration = .seconds(5)) {
        self.transport = transport
        self.clock = clock
        self.interval = interval
    }

    public func changes() -> AsyncStream<Bool> {
        let (transport, clock, interval) = (self.transport, self.clock, self.interval)
        return AsyncStream { continuation in
            let pathIsUp = NIOLockedValueBox(true)
            nonisolated(unsafe) let monitor = NWPathMonitor()
            monitor.pathUpdateHandler = { update in
                let up = update.status == .satisfied
                pathIsUp.withLockedValue { $0 = up }
                // A path gone is offline at once; a path back waits for the server's answer below.
                if !up { continuation.yield(false) }
            }
            let task = Task {
                var last: Bool?
                while !Task.isCancelled {
                    let up = pathIsUp.withLockedValue { $0 }
                    let online = up ? (try? await transport.health()) != nil : false
                    if online != last {
                        continuation.yield(online)
                        last = online
                    }
                    do { try await clock.sleep(for: interval) } catch { break }
                }
                continuation.finish()
            }
            monitor.start(queue: DispatchQueue(label: "outpost.network-path"))
            continuation.onTermination = { _ in
                monitor.cancel()
                task.cancel()
            }
        }
    }
}
#endif
