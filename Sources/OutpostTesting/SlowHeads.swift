import NIOCore
import NIOPosix

/// Connections that open to a server and send only the start of a request's head, then nothing: a client that
/// means to hold the server's connections. Each comes from `source`, a loopback address of the test's choosing
/// (Linux answers the whole of 127/8), so that a well-behaved client on 127.0.0.1 is another address.
///
/// ```swift
/// let slow = try await SlowHeads.open(260, to: port, from: "127.0.0.2")
/// … slow.openCount falls as the server closes them …
/// try await slow.close()
/// ```
public final class SlowHeads: Sendable {
    private let group: MultiThreadedEventLoopGroup
    private let channels: [any Channel]

    private init(group: MultiThreadedEventLoopGroup, channels: [any Channel]) {
        self.group = group
        self.channels = channels
    }

    /// Opens `count` connections to `port` on 127.0.0.1 from `source`, each sending the start of a head. A
    /// connection the server refuses is still counted, closed.
    public static func open(_ count: Int, to port: Int, from source: String) async throws -> SlowHeads {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var channels: [any Channel] = []
        do {
            for _ in 0..<count {
                let channel = try await ClientBootstrap(group: group)
                    .bind(to: try SocketAddress(ipAddress: source, port: 0))
                    .connect(host: "127.0.0.1", port: port).get()
                channel.writeAndFlush(ByteBuffer(string: "GET /health HTTP/1.1\r\nHost: outpost\r\n"), promise: nil)
                channels.append(channel)
            }
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        return SlowHeads(group: group, channels: channels)
    }

    /// How many of the connections the server still holds open.
    public var openCount: Int { channels.filter(\.isActive).count }

    public func close() async throws {
        for channel in channels { channel.close(promise: nil) }
        try await group.shutdownGracefully()
    }
}
