import Clocks
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import OutpostClient
import OutpostConcurrency
import OutpostHTTP
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// The gate in front of `/v1`: at most `limit` requests run, later ones wait in arrival order, a full queue is
/// answered 503 at once, and a waiter whose client goes away leaves the queue.
@Suite("Admission gate", .timeLimit(.minutes(5)))
struct AdmissionGateTests {
    /// A request body that runs until it is told to finish.
    final class Held: Sendable {
        private let stream: AsyncStream<Void>
        private let continuation: AsyncStream<Void>.Continuation
        init() { (stream, continuation) = AsyncStream.makeStream() }
        func wait() async { for await _ in stream { return } }
        func finish() { continuation.yield(); continuation.finish() }
    }

    /// The order in which requests were let in.
    final class Log: Sendable {
        private let entries = NIOLockedValueBox<[String]>([])
        func add(_ entry: String) { entries.withLockedValue { $0.append(entry) } }
        var all: [String] { entries.withLockedValue { $0 } }
    }

    /// Yields until `condition` holds; the tasks it waits for need only to be scheduled, never a clock. However
    /// long they take, it waits; only the test's time limit ends it, with an issue naming what it waited for.
    static func until(_ what: String, _ condition: () -> Bool) async throws {
        while !condition() {
            guard !Task.isCancelled else {
                Issue.record("never reached: \(what)")
                throw CancellationError()
            }
            await Task.yield()
        }
    }

    static func until(_ gate: AdmissionGate, is expected: AdmissionGate.Snapshot) async throws {
        try await until("\(expected), the gate is at \(gate.snapshot)") { gate.snapshot == expected }
    }

    static func until(_ log: Log, has count: Int) async throws {
        try await until("\(count) entries, the log has \(log.all)") { log.all.count == count }
    }

    /// A gate whose wait bound runs on a test clock that never moves: no request here is refused for taking
    /// long, however loaded the machine running the tests.
    static func gate(limit: Int, maxWaiting: Int) -> AdmissionGate {
        AdmissionGate(limit: limit, maxWaiting: maxWaiting, watch: DeadlineWatch(clock: TestClock<Duration>()))
    }

    static func snapshot(running: Int, waiting: Int) -> AdmissionGate.Snapshot {
        AdmissionGate.Snapshot(running: running, waiting: waiting)
    }

    @Test("at most `limit` run at once; waiters are let in first come, first served")
    func limitAndOrder() async throws {
        let gate = Self.gate(limit: 2, maxWaiting: 10)
        let log = Log()
        let held = (0..<5).map { _ in Held() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<5 {
                group.addTask {
                    try await gate.withAdmission {
                        log.add("in \(index)")
                        await held[index].wait()
                    }
                }
                // Each request arrives after the one before it has run or queued.
                try await Self.until(gate, is: Self.snapshot(running: min(index + 1, 2), waiting: max(index - 1, 0)))
            }
            try await Self.until(log, has: 2)
            #expect(log.all == ["in 0", "in 1"])
            held[1].finish()
            try await Self.until(log, has: 3)
            #expect(gate.snapshot == Self.snapshot(running: 2, waiting: 2))
            #expect(log.all == ["in 0", "in 1", "in 2"])
            held[0].finish()
            try await Self.until(log, has: 4)
            #expect(gate.snapshot == Self.snapshot(running: 2, waiting: 1))
            #expect(log.all == ["in 0", "in 1", "in 2", "in 3"])
            held[3].finish()
            held[2].finish()
            try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 0))
            held[4].finish()
            try await group.waitForAll()
        }
        #expect(log.all == ["in 0", "in 1", "in 2", "in 3", "in 4"])
        #expect(gate.snapshot == Self.snapshot(running: 0, waiting: 0))
    }

    @Test("a freed place goes to the waiting caller with the fewest running, then to the one waiting longest")
    func fairAcrossCallers() async throws {
        let gate = Self.gate(limit: 2, maxWaiting: 10)
        let log = Log()
        // mallory's two run and three more wait; then ana's and bob's one each arrive, in that order.
        let arrivals = ["mallory 0", "mallory 1", "mallory 2", "mallory 3", "mallory 4", "ana", "bob"]
        let held = arrivals.map { _ in Held() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, name) in arrivals.enumerated() {
                let caller = String(name.split(separator: " ")[0])
                group.addTask {
                    try await gate.withAdmission(caller: caller) {
                        log.add(name)
                        await held[index].wait()
                    }
                }
                try await Self.until(gate, is: Self.snapshot(running: min(index + 1, 2), waiting: max(index - 1, 0)))
            }
            #expect(log.all == ["mallory 0", "mallory 1"])
            // Each freed place and who takes it: ana, with none running against mallory's one and before bob;
            // bob, with none running against mallory's one; then mallory, who alone waits, in her own order.
            for (step, (freed, next)) in [(0, "ana"), (5, "bob"), (1, "mallory 2"), (6, "mallory 3")].enumerated() {
                held[freed].finish()
                try await Self.until(log, has: 3 + step)
                #expect(log.all.last == next)
            }
            for index in [2, 3] { held[index].finish() }
            try await Self.until(log, has: 7)
            held[4].finish()
            try await group.waitForAll()
        }
        #expect(log.all == ["mallory 0", "mallory 1", "ana", "bob", "mallory 2", "mallory 3", "mallory 4"])
        #expect(gate.snapshot == Self.snapshot(running: 0, waiting: 0))
    }

    @Test("a full queue is refused at once with 503, and the gate stays usable")
    func fullQueue() async throws {
        let gate = Self.gate(limit: 1, maxWaiting: 1)
        let held = (Held(), Held())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await gate.withAdmission { await held.0.wait() } }
            try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 0))
            group.addTask { try await gate.withAdmission { await held.1.wait() } }
            try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 1))
            let error = await #expect(throws: OutpostHTTPError.self) { try await gate.withAdmission {} }
            #expect(error?.status == .serviceUnavailable)
            #expect(error?.headers[.retryAfter] == "1")
            #expect(gate.snapshot == Self.snapshot(running: 1, waiting: 1))
            held.0.finish()
            held.1.finish()
            try await group.waitForAll()
        }
        try await gate.withAdmission {}
        #expect(gate.snapshot == Self.snapshot(running: 0, waiting: 0))
    }

    @Test("a request that has waited `maxWait` is refused with 503 and leaves the queue; the one behind it still waits")
    func waitBound() async throws {
        let clock = ManualClock()
        var sleeps = clock.sleeps.makeAsyncIterator()
        let watch = DeadlineWatch(clock: clock, tick: .seconds(1))
        let gate = AdmissionGate(limit: 1, maxWaiting: 10, maxWait: .seconds(3), watch: watch)
        let log = Log()
        let first = Held()
        let running = Task {
            try await gate.withAdmission {
                log.add("first"); await first.wait()
            }
        }
        try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 0))
        let early = Task { try await gate.withAdmission { log.add("early") } }
        try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 1))
        // The watch sleeps; two seconds later it looks, finds nothing due, and sleeps again.
        #expect(await sleeps.next() == .seconds(1))
        clock.advance(by: .seconds(2))
        #expect(await sleeps.next() == .seconds(1))
        // A second waiter arrives two seconds later: its own three seconds have not passed when the first's have.
        let late = Task { try await gate.withAdmission { log.add("late") } }
        try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 2))
        clock.advance(by: .seconds(1))
        // (Checked first so that a gate that never refuses fails here instead of hanging below.)
        try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 1))
        let error = await #expect(throws: OutpostHTTPError.self) {
            try await early.value(within: testWaitLimit, "the refused request")
        }
        #expect(error?.status == .serviceUnavailable)
        #expect(error?.headers[.retryAfter] == "1")
        first.finish()
        try await running.value(within: testWaitLimit, "the first request")
        try await late.value(within: testWaitLimit, "the late request")
        #expect(log.all == ["first", "late"])
        #expect(gate.snapshot == Self.snapshot(running: 0, waiting: 0))
        #expect(watch.pendingCount == 0)
    }

    @Test("a waiter cancelled while it waits throws, leaves the queue, and is never let in")
    func cancelledWaiter() async throws {
        let gate = Self.gate(limit: 1, maxWaiting: 10)
        let log = Log()
        let first = Held()
        let last = Held()
        let running = Task {
            try await gate.withAdmission {
                log.add("first"); await first.wait()
            }
        }
        try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 0))
        let cancelled = Task { try await gate.withAdmission { log.add("cancelled") } }
        try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 1))
        let next = Task {
            try await gate.withAdmission {
                log.add("next"); await last.wait()
            }
        }
        try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 2))

        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(gate.snapshot == Self.snapshot(running: 1, waiting: 1))
        first.finish()
        try await running.value
        try await Self.until(log, has: 2)
        #expect(gate.snapshot == Self.snapshot(running: 1, waiting: 0))
        last.finish()
        try await next.value
        #expect(log.all == ["first", "next"])
        #expect(gate.snapshot == Self.snapshot(running: 0, waiting: 0))
    }

    @Test("a task cancelled before it queues throws at once and takes no place")
    func cancelledBeforeQueueing() async throws {
        let gate = Self.gate(limit: 1, maxWaiting: 10)
        let first = Held()
        let running = Task { try await gate.withAdmission { await first.wait() } }
        try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 0))
        let late = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await gate.withAdmission { Issue.record("a cancelled waiter was let in") }
        }
        await #expect(throws: CancellationError.self) { try await late.value }
        #expect(gate.snapshot == Self.snapshot(running: 1, waiting: 0))
        first.finish()
        try await running.value
        #expect(gate.snapshot == Self.snapshot(running: 0, waiting: 0))
    }

    @Test("many requests at once, every third cancelled: none over the limit, and the gate ends empty")
    func manyWithCancellations() async throws {
        let gate = Self.gate(limit: 3, maxWaiting: 1_000)
        let peak = NIOLockedValueBox((now: 0, peak: 0))
        let tasks = (0..<400).map { index in
            Task {
                try await gate.withAdmission {
                    peak.withLockedValue {
                        $0.now += 1; $0.peak = max($0.peak, $0.now)
                    }
                    await Task.yield()
                    peak.withLockedValue { $0.now -= 1 }
                }
            }
        }
        for (index, task) in tasks.enumerated() where index % 3 == 2 { task.cancel() }
        for (index, task) in tasks.enumerated() {
            if case .failure(let error) = await task.result {
                #expect(index % 3 == 2 && error is CancellationError, "request \(index) failed: \(error)")
            }
        }
        #expect(peak.withLockedValue { $0.peak } <= 3)
        #expect(gate.snapshot == Self.snapshot(running: 0, waiting: 0))
    }

    @Test("over a real socket: a push whose client stalls halfway through its body gives its place back once the connection idles out")
    func stalledUpload() async throws {
        try await withServer(
            .sqlite, setup: .live,
            configure: {
                $0.maxConcurrentRequests = 1
                $0.idleTimeout = .seconds(1)
            }
        ) { client, _ in
            let port = try #require(client.port)
            let token = try await Fixtures.token()
            // A device sends the head of a push and half its body, then its network drops without a word.
            let head = Self.pushHead(token: token, bodyStart: "{\"deviceId\":\"dev-a\",\"mut")
            // The server closes the silent connection (the read sees its end) and frees the only place:
            // Blocking socket calls, on a thread of their own.
            let outcome = try await Thread.blocking { () -> String in
                guard let socket = try? Self.connect(port: port) else { return "no connection" }
                defer { close(socket) }
                guard head.withCString({ send(socket, $0, strlen($0), 0) }) > 0 else { return "no head sent" }
                let (answer, ended) = Self.readToEnd(socket)
                return ended ? "<end>\(answer)" : "no end in 60 s after \(answer.count) bytes"
            }
            #expect(outcome == "<end>")
            // the next device's push goes through (on a connection of its own: the test client's idled out too).
            #expect(try await Self.nextDevicePushes(port: port, token: token) == [.applied])
        }
    }

    @Test("over a real socket: a push whose client trickles its body is answered 408 at the body deadline, and gives its place back")
    func tricklingUpload() async throws {
        try await withServer(
            .sqlite, setup: .live,
            configure: {
                $0.maxConcurrentRequests = 1
                // The next device's whole push must arrive within it too, on a machine that other tests load.
                $0.bodyTimeout = .seconds(10)
            }
        ) { client, _ in
            let port = try #require(client.port)
            let token = try await Fixtures.token()
            let head = Self.pushHead(token: token, bodyStart: "{", length: 1_000)
            // A client sends the head, then one byte of its body every 100 ms: never silent long enough to idle
            // out, it would take 100 s to finish. It reads what the server answers between bytes, for up to 30 s.
            let answer = try await Thread.blocking { () -> String in
                guard let socket = try? Self.connect(port: port) else { return "no connection" }
                defer { close(socket) }
                guard head.withCString({ send(socket, $0, strlen($0), 0) }) > 0 else { return "no head sent" }
                for _ in 0..<300 {
                    var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
                    if poll(&descriptor, 1, 100) > 0 {
                        // Then the server ends the connection.
                        let (answer, ended) = Self.readToEnd(socket)
                        return answer.isEmpty ? "closed without an answer" : answer + (ended ? "\n<end>" : "\n<no end>")
                    }
                    _ = send(socket, " ", 1, Int32(MSG_NOSIGNAL))
                }
                return "no answer in 30 s"
            }
            let shown = "\(answer.prefix(300))"
            #expect(answer.hasPrefix("HTTP/1.1 408"), "\(shown)")
            #expect(answer.contains(#""code":"request_timeout""#), "\(shown)")
            #expect(answer.lowercased().contains("connection: close"), "\(shown)")
            #expect(answer.hasSuffix("<end>"), "\(shown)")
            // The only place is free again: the next device's push goes through.
            #expect(try await Self.nextDevicePushes(port: port, token: token) == [.applied])
        }
    }

    @Test(
        "over real sockets: accounts that stall eight bodies each hold no place once the grace ends; another account's pull and push go through",
        arguments: [9, 40])
    func slowAccountsCannotStallOthers(accounts: Int) async throws {
        try await withServer(
            .sqlite, setup: .live,
            configure: {
                $0.maxConcurrentRequests = 64
                // Far beyond the wait below, however loaded the machine: no stalled push is let go meanwhile.
                $0.bodyTimeout = .seconds(300)
                $0.requestHeadTimeout = .seconds(300)
                $0.idleTimeout = .seconds(300)
                // Every socket here comes from 127.0.0.1: this test is about accounts, not addresses.
                $0.maxConnectionsPerAddress = nil
            }
        ) { client, _ in
            let port = try #require(client.port)
            // The test client's own connection made first: hundreds of connections at once can fill the server's
            // backlog, and that client gives up on a connection after 5 s (and then fails the test as it closes).
            #expect(try await client.send(.get, "/health", token: nil).status == .ok)
            var sockets: [Int32] = []
            defer { sockets.forEach { close($0) } }
            for account in 0..<accounts {
                let head = Self.pushHead(
                    token: try await Fixtures.token(user: "slow-\(account)"), bodyStart: "{", length: 1_000)
                for _ in 0..<8 {
                    let socket = try Self.connect(port: port)
                    sockets.append(socket)
                    _ = head.withCString { send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                }
            }
            // Each stalled push is let in, finds its body still arriving after the grace, and gives its place
            // back. The check below must come well before their deadlines.
            let deadline = ContinuousClock.now + .seconds(120)
            while true {
                let arriving = try await Self.metric("outpost_http_bodies_arriving", port: port)
                let running = try await Self.metric("outpost_http_requests_running", port: port)
                if arriving == sockets.count && running == 0 { break }
                let waiting = try await Self.metric("outpost_http_requests_waiting", port: port)
                try #require(
                    ContinuousClock.now < deadline,
                    "the stalled pushes never all gave their places back: \(String(describing: arriving)) of \(sockets.count) arriving, \(String(describing: running)) running, \(String(describing: waiting)) waiting"
                )
                try await Task.sleep(for: .milliseconds(50))
            }
            let token = try await Fixtures.token(user: "ana")
            let reader = HTTPSyncTransport(baseURL: try #require(URL(string: "http://127.0.0.1:\(port)")), token: token)
            _ = try await reader.pull(collection: "notes", scope: nil, cursor: nil, limit: 10)
            #expect(try await Self.nextDevicePushes(port: port, token: token) == [.applied])
            // Both were answered while every stalled push still waits for its body.
            for socket in sockets {
                var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
                #expect(poll(&descriptor, 1, 0) == 0, "a stalled push was answered before the others' requests")
            }
            #expect(try await Self.metric("outpost_http_bodies_arriving", port: port) == sockets.count)
        }
    }

    @Test("over a real socket: a push whose body arrives after the grace waits its turn again and is applied")
    func lateBodyIsApplied() async throws {
        try await withServer(.sqlite, setup: .live, configure: { $0.bodyTimeout = .seconds(60) }) { client, _ in
            let port = try #require(client.port)
            let token = try await Fixtures.token()
            let push = PushRequest(deviceId: "dev-late", mutations: [Fixtures.upsert("late", ["n": 1], device: "dev-late")])
            let body = String(decoding: try JSONEncoder().encode(push), as: UTF8.self)
            let split = body.index(body.startIndex, offsetBy: 10)
            let socket = try Self.connect(port: port)
            defer { close(socket) }
            let head = Self.pushHead(token: token, bodyStart: String(body[..<split]), length: body.utf8.count)
            _ = head.withCString { send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            let deadline = ContinuousClock.now + .seconds(30)
            while try await Self.metric("outpost_http_bodies_arriving", port: port) != 1 {
                try #require(ContinuousClock.now < deadline, "the push never gave its place back")
                try await Task.sleep(for: .milliseconds(50))
            }
            let rest = String(body[split...])
            _ = rest.withCString { send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            let answer = try await Thread.blocking { () -> String in
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                // One answer: its head, then a body as long as its Content-Length says.
                while !String(decoding: received, as: UTF8.self).contains("\"results\"") {
                    let count = recv(socket, &buffer, buffer.count, 0)
                    guard count > 0 else { break }
                    received += buffer[..<count]
                }
                return String(decoding: received, as: UTF8.self)
            }
            #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer.prefix(300))")
            #expect(answer.contains(#""status":"applied""#), "\(answer.prefix(300))")
            #expect(try await Self.metric("outpost_http_bodies_arriving", port: port) == 0)
        }
    }

    /// A gauge's value from `/metrics`.
    static func metric(_ name: String, port: Int) async throws -> Int? {
        let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/metrics")!)
        let text = String(decoding: data, as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name + " ") }),
            let value = line.split(separator: " ").last.flatMap({ Double($0) })
        else { return nil }
        return Int(value)
    }

    /// The head of a push announcing a body of `length` bytes, and the first bytes of that body.
    static func pushHead(token: String, bodyStart: String, length: Int = 200) -> String {
        "POST /v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(length)\r\n\r\n" + bodyStart
    }

    /// Everything the server sends until it ends the connection, and whether it did (within the socket's minute).
    ///
    /// A reset is an end too: a server that closes with bytes of ours it has not read makes the kernel send a
    /// reset instead of a plain close, and which of the two comes depends only on timing. Data sent before
    /// it is still read first.
    static func readToEnd(_ socket: Int32) -> (String, ended: Bool) {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while true {
            let count = recv(socket, &buffer, buffer.count, 0)
            if count > 0 {
                received += buffer[..<count]
                continue
            }
            if count < 0 && errno == EINTR { continue }
            let ended = count == 0 || errno == ECONNRESET
            return (String(decoding: received, as: UTF8.self), ended)
        }
    }

    /// Another device's push of one record over a connection of its own: its results.
    static func nextDevicePushes(port: Int, token: String) async throws -> [MutationResult.Status] {
        let device = HTTPSyncTransport(baseURL: try #require(URL(string: "http://127.0.0.1:\(port)")), token: token)
        return try await device.push(PushRequest(deviceId: "dev-b", mutations: [Fixtures.upsert("r1", ["n": 1])])).results.map(\.status)
    }

    /// A blocking TCP connection to the loopback port; reads give up after a minute.
    static func connect(port: Int) throws -> Int32 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port)).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            close(socket)
            throw CancellationError()
        }
        return socket
    }

    @Test("over HTTP: a full gate answers 503 with the error document and Retry-After; /metrics shows the queue")
    func overHTTP() async throws {
        try await withServer(
            .sqlite,
            configure: {
                $0.maxConcurrentRequests = 1; $0.maxWaitingRequests = 0
            }
        ) { client, _ in
            // One request at a time passes, so sequential requests all succeed.
            let token = try await Fixtures.token()
            for _ in 0..<3 {
                #expect(try await client.send(.get, "/v1/pull?collection=notes", token: token).status == .ok)
            }
            let text = String(
                decoding: try await client.send(.get, "/metrics", token: nil).body.readableBytesView, as: UTF8.self)
            #expect(text.contains("outpost_http_requests_running 0"))
            #expect(text.contains("outpost_http_requests_waiting 0"))
        }
        // A held route behind the same middleware, to fill the gate deterministically.
        let gate = Self.gate(limit: 1, maxWaiting: 0)
        let held = Held()
        let router = Router(context: OutpostRequestContext.self)
        router.add(middleware: ErrorMiddleware())
        router.group("v1").add(
            middleware: AdmissionMiddleware(
                gate: gate, callers: CallerGates(share: 64, maxWaiting: 100), maxBodyBytes: 1 << 20,
                bodyTimeout: .seconds(30)
            )
        ).get("slow") { _, _ in
            await held.wait()
            return "done"
        }
        try await Application(router: router).test(.router) { client in
            async let slow = client.execute(uri: "/v1/slow", method: .get)
            try await Self.until(gate, is: Self.snapshot(running: 1, waiting: 0))
            let refused = try await client.execute(uri: "/v1/slow", method: .get)
            #expect(refused.status == .serviceUnavailable)
            #expect(refused.headers[.retryAfter] == "1")
            #expect(refused.wireError?.code == .serviceUnavailable)
            held.finish()
            #expect(try await slow.status == .ok)
        }
    }
}
