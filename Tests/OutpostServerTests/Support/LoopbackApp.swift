import Hummingbird

/// A Hummingbird application of a test's own (a webhook receiver, an identity provider's keys) on a free loopback
/// port, running until its task is cancelled.
enum LoopbackApp {
    /// Starts `router`'s application; its task and port, once it accepts connections.
    static func start(_ router: Router<BasicRequestContext>, _ what: String) async throws -> (task: Task<Void, any Error>, port: Int) {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) },
            logger: Fixtures.quietLogger)
        let task = Task { try await app.runService() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw TestSetupError("\(what) did not start")
        }
        return (task, port)
    }
}
