import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP proxy on loopback that breaks the network on command, for tests with real processes: it forwards
/// bytes between a client and an upstream server until told to cut a connection after so many bytes, to
/// drop connections as they arrive, or to delay every chunk.
///
/// ```swift
/// let proxy = try await FaultProxy.start(upstreamPort: server.port)
/// proxy.inject(.cutAfter(bytes: 200_000, direction: .downstream))  // mid-download
/// … the device, pointed at proxy.port, fails part-way …
/// proxy.inject(nil)                                                 // the network returns
/// ```
public final class FaultProxy: Sendable {
    /// Which way bytes flow: to the server (requests) or to the client (responses).
    public enum Direction: Sendable {
        case upstream
        case downstream
    }

    public enum Fault: Sendable, Equatable {
        /// Forward `bytes` more bytes in `direction`, then close every connection, and every new one as it
        /// arrives, until the fault is cleared: a link that dies part-way through a transfer and stays down.
        case cutAfter(bytes: Int, direction: Direction)
        /// Forward `bytes` more bytes in `direction`, then nothing more in either direction, the connections left
        /// open, until the fault is cleared: a link that falls silent part-way through a transfer. What does not
        /// pass is lost.
        case silenceAfter(bytes: Int, direction: Direction)
        /// Accept connections and close them at once, before any byte is forwarded.
        case drop
        /// Hold every chunk this long before forwarding it.
        case delay(Duration)
        /// Forward every request, and close the connection of one that starts with `prefix` (such as
        /// `POST /v1/push`) before any byte of its answer reaches the client: the server did the work, the
        /// client never hears of it. Other requests pass.
        case cutAnswers(toRequestsStartingWith: String)
        /// Forward every request, and of the answer to one that starts with `prefix` (every one for "") only
        /// the head and the first byte of the body, then close the connection: an answer broken off part-way.
        case cutAnswersPartway(toRequestsStartingWith: String)
        /// Answer every request with `status` and an empty body, forwarding nothing: a server that is up and
        /// failing, such as one whose database is down (500) or behind a proxy that lost it (502).
        case answer(status: Int)
    }

    /// What the proxy has done so far.
    public struct Counters: Sendable, Equatable {
        public var connections = 0
        public var bytesUpstream = 0
        public var bytesDownstream = 0
        /// Connections the proxy closed because of a fault.
        public var cut = 0
    }

    fileprivate struct State {
        var fault: Fault?
        /// Bytes still to forward before a `cutAfter` fault cuts.
        var budget = 0
        var counters = Counters()
        var open: [ObjectIdentifier: Channel] = [:]
        /// The upstream connections whose answer is cut (``Fault/cutAnswers(toRequestsStartingWith:)``).
        var doomed: Set<ObjectIdentifier> = []
        /// The upstream connections whose answer is cut after its head
        /// (``Fault/cutAnswersPartway(toRequestsStartingWith:)``).
        var partway: Set<ObjectIdentifier> = []
    }

    public let port: Int
    private let upstreamHost: String
    private let upstreamPort: Int
    private let group: MultiThreadedEventLoopGroup
    private let listener = NIOLockedValueBox<Channel?>(nil)
    private let state = NIOLockedValueBox(State())

    private init(port: Int, upstreamHost: String, upstreamPort: Int, group: MultiThreadedEventLoopGroup) {
        self.port = port
        self.upstreamHost = upstreamHost
        self.upstreamPort = upstreamPort
        self.group = group
    }

    /// Listens on a free loopback port and forwards to `upstreamHost:upstreamPort`.
    public static func start(upstreamHost: String = "127.0.0.1", upstreamPort: Int) async throws -> FaultProxy {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let box = NIOLockedValueBox<FaultProxy?>(nil)
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                guard let proxy = box.withLockedValue({ $0 }) else { return child.close() }
                return proxy.accept(child)
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let proxy = FaultProxy(
            port: channel.localAddress?.port ?? 0, upstreamHost: upstreamHost, upstreamPort: upstreamPort, group: group)
        proxy.listener.withLockedValue { $0 = channel }
        box.withLockedValue { $0 = proxy }
        return proxy
    }

    /// Sets the fault for what follows (nil heals the link). A `cutAfter` budget starts now.
    public func inject(_ fault: Fault?) {
        state.withLockedValue { state in
            state.fault = fault
            switch fault {
            case .cutAfter(let bytes, _), .silenceAfter(let bytes, _): state.budget = bytes
            default: break
            }
        }
    }

    public var counters: Counters { state.withLockedValue { $0.counters } }

    /// Closes every open connection now, as a network that drops without warning.
    public func cutAll() {
        let channels = state.withLockedValue { state -> [Channel] in
            state.counters.cut += state.open.count
            return Array(state.open.values)
        }
        for channel in channels { channel.close(promise: nil) }
    }

    public func stop() async throws {
        cutAll()
        try await listener.withLockedValue({ $0 })?.close()
        try await group.shutdownGracefully()
    }

    // MARK: Forwarding

    private enum Decision {
        case forward(Int, delay: Duration?)
        case cut
        /// Forward so many bytes of the chunk and lose the rest, the connection left open.
        case silence(Int)
    }

    /// How much of a `count`-byte chunk flowing in `direction` may pass.
    private func decide(_ direction: Direction, count: Int) -> Decision {
        state.withLockedValue { state in
            switch state.fault {
            case nil:
                break
            case .drop:
                return .cut
            case .delay(let delay):
                state.count(direction, count)
                return .forward(count, delay: delay)
            case .cutAfter(_, let faulty) where faulty == direction:
                let passing = min(count, state.budget)
                state.budget -= passing
                state.count(direction, passing)
                return passing == 0 ? .cut : .forward(passing, delay: nil)
            case .cutAfter:
                if state.budget == 0 { return .cut }
            case .silenceAfter(_, let faulty) where faulty == direction:
                let passing = min(count, state.budget)
                state.budget -= passing
                state.count(direction, passing)
                return .silence(passing)
            case .silenceAfter:
                if state.budget == 0 { return .silence(0) }
            case .cutAnswers, .cutAnswersPartway, .answer:
                break
            }
            state.count(direction, count)
            return .forward(count, delay: nil)
        }
    }

    private func accept(_ client: Channel) -> EventLoopFuture<Void> {
        let refuse = state.withLockedValue { state -> Bool in
            state.counters.connections += 1
            switch state.fault {
            case .drop: return true
            case .cutAfter where state.budget == 0: return true
            default: return false
            }
        }
        if refuse {
            state.withLockedValue { $0.counters.cut += 1 }
            return client.close()
        }
        track(client)
        // The client's bytes are read from the start and held until the upstream connection is up.
        let toServer = Forwarder(proxy: self, direction: .upstream)
        return client.pipeline.addHandler(toServer).map {
            ClientBootstrap(group: client.eventLoop)
                .channelInitializer { server in
                    server.pipeline.addHandler(Forwarder(proxy: self, direction: .downstream, partner: client))
                }
                .connect(host: self.upstreamHost, port: self.upstreamPort)
                .whenComplete { result in
                    switch result {
                    case .success(let server):
                        self.track(server)
                        toServer.connected(to: server)
                    case .failure:
                        client.close(promise: nil)
                    }
                }
        }
    }

    private func track(_ channel: Channel) {
        let id = ObjectIdentifier(channel)
        state.withLockedValue { $0.open[id] = channel }
        channel.closeFuture.whenComplete { _ in
            self.state.withLockedValue { _ = $0.open.removeValue(forKey: id) }
        }
    }

    /// Forwards what one side reads to its partner, as the proxy's fault allows. The client side holds what
    /// it reads until its partner, the upstream connection, is up. All of it runs on one event loop.
    private final class Forwarder: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer

        let proxy: FaultProxy
        let direction: Direction
        private var partner: Channel?
        private var held: [ByteBuffer] = []
        private var context: ChannelHandlerContext?

        init(proxy: FaultProxy, direction: Direction, partner: Channel? = nil) {
            self.proxy = proxy
            self.direction = direction
            self.partner = partner
        }

        func handlerAdded(context: ChannelHandlerContext) {
            self.context = context
        }

        func handlerRemoved(context: ChannelHandlerContext) {
            self.context = nil
        }

        /// The upstream connection is up: pass on what was held.
        func connected(to partner: Channel) {
            self.partner = partner
            guard let context else {
                partner.close(promise: nil)
                return
            }
            let held = self.held
            self.held = []
            for buffer in held { forward(buffer, context: context, to: partner) }
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            guard let partner else {
                held.append(buffer)
                return
            }
            forward(buffer, context: context, to: partner)
        }

        private func forward(_ buffer: ByteBuffer, context: ChannelHandlerContext, to partner: Channel) {
            var buffer = buffer
            if direction == .upstream, case .answer(let status) = proxy.state.withLockedValue({ $0.fault }) {
                let head = "HTTP/1.1 \(status) Failing\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                let channel = context.channel
                channel.writeAndFlush(channel.allocator.buffer(string: head)).whenComplete { _ in channel.close(promise: nil) }
                partner.close(promise: nil)
                return
            }
            let (cutsAnswer, partway) = proxy.state.withLockedValue { state -> (Bool, Bool) in
                switch direction {
                case .upstream:
                    let request = buffer.readableBytesView
                    switch state.fault {
                    case .cutAnswers(let prefix) where request.starts(with: Array(prefix.utf8)):
                        state.doomed.insert(ObjectIdentifier(partner))
                    case .cutAnswersPartway(let prefix) where request.starts(with: Array(prefix.utf8)):
                        state.partway.insert(ObjectIdentifier(partner))
                    default:
                        break
                    }
                    return (false, false)
                case .downstream:
                    let id = ObjectIdentifier(context.channel)
                    return (state.doomed.remove(id) != nil, state.partway.contains(id))
                }
            }
            if cutsAnswer {
                proxy.state.withLockedValue { $0.counters.cut += 1 }
                context.close(promise: nil)
                partner.close(promise: nil)
                return
            }
            if partway, let headEnd = buffer.readableBytesView.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound {
                // The head, and a byte of the body when it came with it; then the connection breaks.
                let through = min(headEnd - buffer.readerIndex + 1, buffer.readableBytes)
                let slice = buffer.readSlice(length: through)!
                proxy.state.withLockedValue { state in
                    state.partway.remove(ObjectIdentifier(context.channel))
                    state.counters.cut += 1
                }
                partner.writeAndFlush(slice).whenComplete { _ in partner.close(promise: nil) }
                context.close(promise: nil)
                return
            }
            switch proxy.decide(direction, count: buffer.readableBytes) {
            case .silence(let count):
                if count > 0, let slice = buffer.readSlice(length: count) { partner.writeAndFlush(slice, promise: nil) }
            case .cut:
                proxy.state.withLockedValue { $0.counters.cut += 1 }
                context.close(promise: nil)
                partner.close(promise: nil)
            case .forward(let count, let delay):
                let slice = buffer.readSlice(length: count)!
                let whole = buffer.readableBytes == 0
                let send: @Sendable () -> Void = {
                    partner.writeAndFlush(slice).whenComplete { _ in
                        // The budget ran out inside this chunk: what passed is delivered, then the cut.
                        if !whole { partner.close(promise: nil) }
                    }
                }
                if let delay {
                    context.eventLoop.scheduleTask(in: .nanoseconds(delay.nanoseconds)) { send() }
                } else {
                    send()
                }
                if !whole {
                    proxy.state.withLockedValue { $0.counters.cut += 1 }
                    context.close(promise: nil)
                }
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            partner?.close(promise: nil)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
            partner?.close(promise: nil)
        }
    }
}

extension FaultProxy.State {
    fileprivate mutating func count(_ direction: FaultProxy.Direction, _ bytes: Int) {
        switch direction {
        case .upstream: counters.bytesUpstream += bytes
        case .downstream: counters.bytesDownstream += bytes
        }
    }
}

extension Duration {
    fileprivate var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}
