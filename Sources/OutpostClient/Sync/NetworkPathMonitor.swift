#if canImport(Network)
import Dispatch
import Network

/// Follows the device's network path (`NWPathMonitor`): offline at once when the path goes, online when a path
/// is back and the server answers `/health` (a path alone, such as a captive Wi-Fi portal, proves nothing).
public struct NetworkPathMonitor: ConnectivityMonitor {
    let transport: any SyncTransport

    public init(transport: any SyncTransport) {
        self.transport = transport
    }

    public func changes() -> AsyncStream<Bool> {
        let transport = self.transport
        return AsyncStream { continuation in
            let (paths, path) = AsyncStream.makeStream(of: Bool.self, bufferingPolicy: .bufferingNewest(1))
            nonisolated(unsafe) let monitor = NWPathMonitor()
            monitor.pathUpdateHandler = { update in path.yield(update.status == .satisfied) }
            let task = Task {
                var last: Bool?
                for await satisfied in paths {
                    let online = satisfied ? (try? await transport.health()) != nil : false
                    if online != last {
                        continuation.yield(online)
                        last = online
                    }
                }
                continuation.finish()
            }
            monitor.start(queue: DispatchQueue(label: "outpost.network-path"))
            continuation.onTermination = { _ in
                monitor.cancel()
                path.finish()
                task.cancel()
            }
        }
    }
}
#endif
