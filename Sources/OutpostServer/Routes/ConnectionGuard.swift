import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTPTypes

/// Keeps one client from holding the server's connections: it bounds how many connections one address holds
/// at once, and how long a connection may take to send its first request's head. A client over its share is
/// closed as it connects; one whose head has not come whole in time is closed then. Bodies have their own bound
/// (``ServerConfiguration/bodyTimeout``), and a connection that goes silent its own
/// (``ServerConfiguration/idleTimeout``).
final class ConnectionGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let tally: ConnectionTally
    private let headTimeout: TimeAmount
    /// The address this connection is counted under, until it closes.
    private var address: String?
    private var deadline: Scheduled<Void>?

    init(tally: ConnectionTally, headTimeout: TimeAmount) {
        self.tally = tally
        self.headTimeout = headTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if let address = context.channel.remoteAddress?.ipAddress {
            guard tally.open(address) else {
                context.close(promise: nil)
                return
            }
            self.address = address
        }
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: headTimeout) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) {
            deadline?.cancel()
            deadline = nil
        }
        context.fireChannelRead(data)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        if let address { tally.close(address) }
        address = nil
    }
}

/// How many connections each client address holds, shared by every connection's ``ConnectionGuard``.
final class ConnectionTally: Sendable {
    /// The most connections one address may hold; nil for no bound.
    let limit: Int?
    private let open = NIOLockedValueBox<[String: Int]>([:])

    init(limit: Int?) {
        self.limit = limit
    }

    /// Counts a new connection from `address`; false, counting nothing, when the address holds its limit.
    func open(_ address: String) -> Bool {
        open.withLockedValue { open in
            let count = open[address, default: 0]
            if let limit, count >= limit { return false }
            open[address] = count + 1
            return true
        }
    }

    func close(_ address: String) {
        open.withLockedValue { open in
            let count = open[address, default: 0] - 1
            open[address] = count > 0 ? count : nil
        }
    }
}
