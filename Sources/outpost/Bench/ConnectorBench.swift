import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore
import OutpostClient
import OutpostHTTP
import OutpostProtocol

extension SyncBench {
    /// A connector of `notes` to a receiver in this process: changes delivered per second from a backlog of
    /// `backlog`, beside the same batches POSTed straight to the receiver (the bound the HTTP round trips set); then
    /// the delay from a push to its delivery, one record every 50 ms.
    func connector(backlog: Int = 20_000, samples: Int = 200) async throws -> [BenchResult] {
        let receiver = try await BenchReceiver.start()
        defer { receiver.stop() }
        return try await withServer { base, token, client, _ in
            let staff = HTTPSyncTransport(baseURL: base, token: try await token("staff", .staff), client: client, timeout: .seconds(60))
            progress("connector (\(engine)): writing \(backlog) changes…")
            for start in stride(from: 0, to: backlog, by: 500) {
                let time = Timestamp(Date())
                let mutations = (start..<min(start + 500, backlog)).map { i in
                    Mutation(
                        idempotencyKey: "backlog-\(i)", collection: "notes", recordId: "b\(i)", op: .upsert,
                        fields: ["text": .string("note \(i)"), "n": .integer(Int64(i))], clientTimestamp: time)
                }
                _ = try await staff.push(PushRequest(deviceId: "bench", mutations: mutations))
            }
            let organizer = HTTPSyncTransport(baseURL: base, token: try await token("organizer", .organizer), client: client)
            let clock = ContinuousClock()
            progress("connector (\(engine)): delivering the backlog…")
            let started = clock.now
            _ = try await organizer.exchange(
                .POST, path: "/v1/connectors",
                body: try JSONEncoder().encode(["collection": "notes", "url": receiver.url, "secret": "a-bench-receivers-secret"]))
            try await receiver.wait(forChanges: backlog, within: .seconds(600))
            let delivered = clock.now - started
            let bodies = receiver.bodies

            // The bound: the same bodies, POSTed one after another, as the connector sends them.
            let posted = try await clock.measure {
                for body in bodies {
                    var request = HTTPClientRequest(url: receiver.url)
                    request.method = .POST
                    request.headers.add(name: "Content-Type", value: "application/json")
                    request.body = .bytes(ByteBuffer(bytes: body))
                    let response = try await client.execute(request, timeout: .seconds(30))
                    _ = try await response.body.collect(upTo: 1 << 20)
                }
            }

            progress("connector (\(engine)): \(samples) pushes, one every 50 ms…")
            var delays = Samples()
            var sent: [String: ContinuousClock.Instant] = [:]
            for i in 0..<samples {
                let id = "live\(i)"
                sent[id] = clock.now
                _ = try await staff.push(
                    PushRequest(
                        deviceId: "bench",
                        mutations: [
                            Mutation(
                                idempotencyKey: "live-\(i)", collection: "notes", recordId: id, op: .upsert, fields: ["n": .integer(Int64(i))],
                                clientTimestamp: Timestamp(Date()))
                        ]))
                try await Task.sleep(for: .milliseconds(50))
            }
            try await receiver.wait(forChanges: backlog + samples, within: .seconds(120))
            for (id, arrived) in receiver.arrivals where id.hasPrefix("live") {
                if let at = sent[id] { delays.add(arrived - at) }
            }
            let rate = Double(backlog) / delivered.seconds
            let bound = Double(backlog) / posted.seconds
            return [
                BenchResult(
                    name:
                        "connector: a backlog of \(backlog) changes delivered in batches of 100 (\(engine); the same batches POSTed straight: \(Int(bound))/s)",
                    figure: rate, unit: "changes/s", target: "≥ 2,000/s", met: rate >= 2000),
                BenchResult(
                    name: "connector: push to delivery, p50 (\(engine))", figure: delays.percentile(50), unit: "ms",
                    target: "≤ 500 ms", met: delays.percentile(50) <= 500),
                BenchResult(
                    name: "connector: push to delivery, p99 (\(engine))", figure: delays.percentile(99), unit: "ms",
                    target: "≤ 1,000 ms", met: delays.percentile(99) <= 1000),
            ]
        }
    }
}

/// A connector's receiver in the bench's process: keeps each body and when each record arrived.
final class BenchReceiver: Sendable {
    private struct State {
        var bodies: [[UInt8]] = []
        var arrivals: [String: ContinuousClock.Instant] = [:]
    }

    private let state: NIOLockedValueBox<State>
    private let task: Task<Void, any Error>
    let url: String

    private init(state: NIOLockedValueBox<State>, task: Task<Void, any Error>, url: String) {
        self.state = state
        self.task = task
        self.url = url
    }

    static func start() async throws -> BenchReceiver {
        let state = NIOLockedValueBox(State())
        let router = Router()
        router.post("hook") { request, _ -> Response in
            let body = Array(buffer: try await request.body.collect(upTo: 8 << 20))
            let arrived = ContinuousClock.now
            let batch = try JSONDecoder().decode(ConnectorBatch.self, from: Data(body))
            state.withLockedValue { state in
                state.bodies.append(body)
                for change in batch.changes where state.arrivals[change.recordId] == nil {
                    state.arrivals[change.recordId] = arrived
                }
            }
            return Response(status: .ok)
        }
        let (task, port) = try await serve(router, label: "outpost.bench.receiver")
        return BenchReceiver(state: state, task: task, url: "http://127.0.0.1:\(port)/hook")
    }

    /// Runs `router` on a free loopback port, its logs dropped: the running application and its port.
    static func serve(_ router: Router<BasicRequestContext>, label: String) async throws -> (Task<Void, any Error>, Int) {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) },
            logger: Logger(label: label, factory: { _ in SwiftLogNoOpLogHandler() }))
        let task = Task { try await app.runService() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw CLIError("the bench's \(label) did not start")
        }
        return (task, port)
    }

    var bodies: [[UInt8]] { state.withLockedValue { $0.bodies } }
    var arrivals: [String: ContinuousClock.Instant] { state.withLockedValue { $0.arrivals } }

    func wait(forChanges count: Int, within limit: Duration) async throws {
        let deadline = ContinuousClock.now.advanced(by: limit)
        while state.withLockedValue({ $0.arrivals.count }) < count {
            guard ContinuousClock.now < deadline else {
                throw CLIError("the receiver has \(state.withLockedValue { $0.arrivals.count }) of \(count) changes after \(limit)")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func stop() { task.cancel() }
}
