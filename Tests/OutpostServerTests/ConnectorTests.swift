import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOConcurrencyHelpers
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@testable import OutpostServer

/// A connector's receiver on loopback: keeps every request it took, with its headers; answers 500 while `failing`,
/// and waits `delay` before answering each.
final class ConnectorReceiver: Sendable {
    struct Taken: Sendable {
        var delivery: String
        var signature: String
        var body: [UInt8]
    }

    private struct State {
        var taken: [Taken] = []
        /// The delivery id of every request, taken or not.
        var attempts: [String] = []
        var failing = false
        var delay: Duration = .zero
        var requests = 0
        /// Requests past this many wait until it is lifted (nil).
        var holdingAfter: Int?
    }

    private let state = NIOLockedValueBox(State())
    private let task: Task<Void, any Error>
    let url: String

    var taken: [Taken] { state.withLockedValue { $0.taken } }
    /// Every request, taken or not.
    var requests: Int { state.withLockedValue { $0.requests } }
    var attempts: [String] { state.withLockedValue { $0.attempts } }
    func fail(_ failing: Bool) { state.withLockedValue { $0.failing = failing } }
    func delay(_ delay: Duration) { state.withLockedValue { $0.delay = delay } }
    /// Holds every request after the first `count` unanswered until ``release()``.
    func hold(after count: Int) { state.withLockedValue { $0.holdingAfter = count } }
    func release() { state.withLockedValue { $0.holdingAfter = nil } }

    init() async throws {
        let router = Router()
        router.post("hook") { [state] request, _ -> Response in
            let body = Array(buffer: try await request.body.collect(upTo: 8 << 20))
            let delivery = request.headers.first { $0.name.canonicalName == "outpost-delivery" }?.value ?? ""
            let (delay, number) = state.withLockedValue { state -> (Duration, Int) in
                state.requests += 1
                state.attempts.append(delivery)
                return (state.delay, state.requests)
            }
            if delay > .zero { try await Task.sleep(for: delay) }
            while let limit = state.withLockedValue({ $0.holdingAfter }), number > limit {
                try await Task.sleep(for: .milliseconds(10))
            }
            let failing = state.withLockedValue { state -> Bool in
                guard !state.failing else { return true }
                state.taken.append(
                    Taken(
                        delivery: delivery,
                        signature: request.headers.first { $0.name.canonicalName == "outpost-signature" }?.value ?? "",
                        body: body))
                return false
            }
            return Response(status: failing ? .internalServerError : .ok)
        }
        // An answer whose head comes at once and whose body never ends.
        router.post("stall") { _, _ -> Response in
            Response(
                status: .ok,
                body: ResponseBody { writer in
                    try await Task.sleep(for: .seconds(60))
                    try await writer.finish(nil)
                })
        }
        // What Apps Script's output page says: the id of the batch its doPost took, or an error page.
        router.get("output/:delivery") { _, context -> Response in
            let delivery = context.parameters.get("delivery") ?? ""
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: #"{"taken":"\#(delivery)"}"#)))
        }
        router.get("error-page") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "text/html"], body: .init(byteBuffer: ByteBuffer(string: "<html>TypeError</html>")))
        }
        let (task, port) = try await LoopbackApp.start(router, "the receiver")
        self.task = task
        url = "http://127.0.0.1:\(port)/hook"
    }

    /// Another route of the receiver.
    func url(_ path: String) -> String { url.replacingOccurrences(of: "/hook", with: path) }

    func stop() async {
        task.cancel()
        _ = try? await task.value
    }

    /// The batches taken, each once (by delivery id), in the order first taken; every signature checked against
    /// `secret`.
    func batches(secret: String) throws -> [ConnectorBatch] {
        var seen: [String: [UInt8]] = [:]
        var batches: [ConnectorBatch] = []
        for taken in taken {
            #expect(Self.verify(signature: taken.signature, body: taken.body, secret: secret), "a batch's signature does not verify")
            let batch = try JSONDecoder().decode(ConnectorBatch.self, from: Data(taken.body))
            #expect(batch.delivery == taken.delivery)
            if let earlier = seen[batch.delivery] {
                // Sent again: the same changes.
                #expect(try JSONDecoder().decode(ConnectorBatch.self, from: Data(earlier)).changes == batch.changes)
                continue
            }
            seen[batch.delivery] = taken.body
            batches.append(batch)
        }
        return batches
    }

    /// Checks `t=…,v1=…` as a receiver would: HMAC-SHA256 of "t.body" under the secret.
    static func verify(signature: String, body: [UInt8], secret: String) -> Bool {
        let parts = Dictionary(
            signature.split(separator: ",").compactMap { part -> (String, String)? in
                let pair = part.split(separator: "=", maxSplits: 1)
                return pair.count == 2 ? (String(pair[0]), String(pair[1])) : nil
            }, uniquingKeysWith: { first, _ in first })
        guard let time = parts["t"], let given = parts["v1"] else { return false }
        let code = HMAC<SHA256>.authenticationCode(for: Array("\(time).".utf8) + body, using: SymmetricKey(data: Array(secret.utf8)))
        return code.map { String(format: "%02x", $0) }.joined() == given
    }
}

/// Checks that `batches` follow on from one another from the start and carry `expected` record ids, in order, once.
func expectInOrder(_ batches: [ConnectorBatch], _ expected: [String], sourceLocation: SourceLocation = #_sourceLocation) {
    var cursor = PullCursor.start.token
    for batch in batches {
        #expect(batch.from == cursor, "a batch does not start where the one before ended", sourceLocation: sourceLocation)
        cursor = batch.to
    }
    #expect(batches.map(\.sequence) == (0..<batches.count).map { Int64($0 + 1) }, sourceLocation: sourceLocation)
    #expect(batches.flatMap(\.changes).map(\.recordId) == expected, sourceLocation: sourceLocation)
}

@Suite("Connectors")
struct ConnectorTests {
    static let secret = "a-receivers-secret-of-some-length"
    /// The cursor sealer of the servers `withServer` makes.
    static let sealer = CursorSealer(secret: SymmetricKey(data: Fixtures.secret))

    static func connector(
        tenant: String = "acme", id: String = "con_1", collection: String = "notes", scope: String = "", url: String
    )
        -> Connector
    {
        Connector(
            tenant: tenant, id: id, collection: collection, scope: scope, url: url, secret: secret, format: .json,
            createdAt: Fixtures.now.millisecondsSince1970)
    }

    /// A delivery on `now` whose receivers, in this process, have a minute to answer: a loaded machine can keep
    /// one from answering within seconds, and no test here waits for a receiver to time out.
    static func delivery<S: SyncStorage>(_ storage: S, now: ManualNow, metrics: ServerMetrics = ServerMetrics()) -> ConnectorDelivery<S> {
        ConnectorDelivery(
            storage: storage, clock: ManualClock(), now: { now.date }, logger: Fixtures.quietLogger, metrics: metrics,
            send: { connector, body, delivery in
                try await ConnectorMessage.post(connector, body: body, delivery: delivery, timeout: .seconds(60), now: now.date)
            },
            sealer: { Self.sealer }, batchSize: 3)
    }

    /// Sends con_1's next batch. On PostgreSQL a change shows only once every older transaction has ended, in
    /// every database of the test cluster: it is asked again until it shows (30 s at most).
    static func deliverNext<S: SyncStorage>(_ delivery: ConnectorDelivery<S>, _ storage: S) async throws {
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while try await delivery.deliverNext(try #require(try await storage.connector(tenant: "acme", id: "con_1"))) != .sent {
            guard ContinuousClock.now < deadline else { throw TestSetupError("no batch to send for 30 s") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    static func notes(_ ids: [String], at seconds: Double = 0) -> [Mutation] {
        ids.map { Fixtures.upsert($0, ["t": .string($0)], at: seconds) }
    }

    @Test(
        "one server holds a connector's lease at a time; the cursor moves only from where it was, by the holder",
        arguments: StorageKind.allCases)
    func leases(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            try await storage.addConnector(Self.connector(url: "https://example.org/hook"))
            try await storage.addConnector(Self.connector(tenant: "other", url: "https://example.org/other"))
            #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: "a", now: 1000, until: 2000))
            #expect(try await !storage.leaseConnector(tenant: "acme", id: "con_1", owner: "b", now: 1500, until: 2500))
            #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: "a", now: 1500, until: 2500))
            // The other tenant's connector of the same id is its own.
            #expect(try await storage.leaseConnector(tenant: "other", id: "con_1", owner: "b", now: 1500, until: 2500))

            let next = PullCursor(xid: 0, seq: 5)
            #expect(try await !storage.connectorDelivered(tenant: "acme", id: "con_1", owner: "b", from: .start, to: next, changes: 3, at: 1600))
            #expect(
                try await !storage.connectorDelivered(
                    tenant: "acme", id: "con_1", owner: "a", from: PullCursor(xid: 0, seq: 1), to: next, changes: 3, at: 1600))
            #expect(try await storage.connectorDelivered(tenant: "acme", id: "con_1", owner: "a", from: .start, to: next, changes: 3, at: 1600))
            // The same batch recorded twice moves it once.
            #expect(try await !storage.connectorDelivered(tenant: "acme", id: "con_1", owner: "a", from: .start, to: next, changes: 3, at: 1600))
            var stored = try #require(try await storage.connector(tenant: "acme", id: "con_1"))
            #expect(stored.cursor == next)
            #expect(stored.delivered == 1)
            #expect(stored.deliveredChanges == 3)

            // Failures count up for the holder only; five make it failing.
            #expect(try await storage.connectorFailed(tenant: "acme", id: "con_1", owner: "b", error: "x", at: 1700, nextAttemptAt: 2700) == nil)
            for expected in 1...Connector.failingAfter {
                #expect(
                    try await storage.connectorFailed(
                        tenant: "acme", id: "con_1", owner: "a", error: "the receiver answered 500", at: 1700, nextAttemptAt: 2700)
                        == expected)
            }
            stored = try #require(try await storage.connector(tenant: "acme", id: "con_1"))
            #expect(stored.isFailing)
            #expect(stored.lastError == "the receiver answered 500")
            #expect(try await storage.failingConnectorCount() == 1)

            // An expired lease is taken over; a released one at once.
            #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: "b", now: 2600, until: 3600))
            try await storage.releaseConnectors(owner: "b")
            #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: "c", now: 2700, until: 3700))

            // Replay moves it back and clears its failures; pausing takes it off the active list.
            #expect(try await storage.replayConnector(tenant: "acme", id: "con_1", from: .start))
            stored = try #require(try await storage.connector(tenant: "acme", id: "con_1"))
            #expect(stored.cursor == .start && stored.failures == 0 && stored.lastError == nil && stored.replays == 1)
            #expect(try await storage.setConnectorPaused(tenant: "acme", id: "con_1", paused: true))
            #expect(try await storage.activeConnectors().map(\.tenant) == ["other"])
            #expect(try await storage.failingConnectorCount() == 0)
            #expect(try await !storage.removeConnector(tenant: "other", id: "con_2"))
            #expect(try await storage.removeConnector(tenant: "acme", id: "con_1"))
            #expect(try await storage.connectors(tenant: "acme").isEmpty)
            #expect(try await storage.connectors(tenant: "other").count == 1)
        }
    }

    @Test(
        "batches arrive in commit order, signed, with versions, tombstones and receive times; one scope and one tenant only",
        arguments: StorageKind.allCases)
    func delivery(kind: StorageKind) async throws {
        let receiver = try await ConnectorReceiver()
        defer { Task { await receiver.stop() } }
        let now = ManualNow(Fixtures.serverNow.date)
        try await withStorage(kind) { storage in try await Self.deliversInOrder(storage, receiver: receiver, now: now) }
    }

    static func deliversInOrder<S: SyncStorage>(_ storage: S, receiver: ConnectorReceiver, now: ManualNow) async throws {
        do {
            let delivery = Self.delivery(storage, now: now)
            try await storage.addConnector(Self.connector(collection: Guest.collection, scope: "gala", url: receiver.url))
            func guest(_ id: String, _ event: String) -> Mutation {
                ExportTests.guest(id, event: event, name: "Guest \(id)")
            }
            _ = try await storage.push([guest("g1", "gala"), guest("g2", "fair"), guest("g3", "gala")], role: .organizer)
            _ = try await storage.push([guest("g4", "gala")], tenant: "other", role: .organizer)
            _ = try await storage.push([guest("g5", "gala"), guest("g6", "gala")], role: .organizer)
            #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: delivery.owner, now: 0, until: .max))
            func deliverAll(upTo changes: Int) async throws {
                while try receiver.batches(secret: Self.secret).flatMap(\.changes).count < changes {
                    try await Self.deliverNext(delivery, storage)
                }
            }
            try await deliverAll(upTo: 4)
            _ = try await storage.push(
                [Fixtures.delete("g1", at: 5, collection: Guest.collection, device: "admin", scope: "gala")], role: .organizer)
            try await deliverAll(upTo: 5)
            #expect(try await delivery.deliverNext(try #require(try await storage.connector(tenant: "acme", id: "con_1"))) == .nothing)
            let batches = try receiver.batches(secret: Self.secret)
            // g1 was deleted after the first batch took it: it comes again, as a tombstone.
            expectInOrder(batches, ["g1", "g3", "g5", "g6", "g1"])
            #expect(batches.allSatisfy { $0.collection == Guest.collection && $0.scope == "gala" && $0.connector == "con_1" })
            let changes = batches.flatMap(\.changes)
            #expect(changes.last?.tombstone == true)
            #expect(changes.last?.version == 2)
            #expect(changes.first?.fields["name"] == .string("Guest g1"))
            #expect(changes.allSatisfy { $0.receivedAt == Fixtures.time(3600) && $0.scope == "gala" })
            let stored = try #require(try await storage.connector(tenant: "acme", id: "con_1"))
            #expect(Self.sealer.token(stored.cursor, tenant: "acme") == batches.last?.to)
            // Cursors are sealed for the tenant: they tell nothing of other tenants' changes.
            #expect(batches.dropFirst().allSatisfy { $0.from.hasPrefix("c2.") && $0.to.hasPrefix("c2.") })
            #expect(stored.delivered == Int64(batches.count))
            #expect(stored.deliveredChanges == 5)
        }
    }

    @Test(
        "a batch not taken is sent again, the same, after a growing wait; the connector is failing after five",
        arguments: StorageKind.allCases)
    func retries(kind: StorageKind) async throws {
        let receiver = try await ConnectorReceiver()
        defer { Task { await receiver.stop() } }
        let now = ManualNow(Fixtures.serverNow.date)
        try await withStorage(kind) { storage in try await Self.retriesGrowing(storage, receiver: receiver, now: now) }
    }

    static func retriesGrowing<S: SyncStorage>(_ storage: S, receiver: ConnectorReceiver, now: ManualNow) async throws {
        do {
            let metrics = ServerMetrics()
            let delivery = Self.delivery(storage, now: now, metrics: metrics)
            try await storage.addConnector(Self.connector(url: receiver.url))
            _ = try await storage.push(Self.notes(["n1", "n2"]))
            #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: delivery.owner, now: 0, until: .max))
            receiver.fail(true)
            var waits: [Int64] = []
            for _ in 1...Connector.failingAfter {
                try await Self.deliverNext(delivery, storage)
                let failed = try #require(try await storage.connector(tenant: "acme", id: "con_1"))
                waits.append(failed.nextAttemptAt - Timestamp(now.date).millisecondsSince1970)
                #expect(failed.cursor == .start)
                #expect(failed.lastError == "the receiver answered 500")
            }
            // 1, 2, 4, 8, 16 s, each less up to half at random.
            for (attempt, wait) in waits.enumerated() {
                let ceiling = Int64(1000 << attempt)
                #expect((ceiling / 2...ceiling).contains(wait), "attempt \(attempt + 1) waits \(wait) ms")
            }
            #expect(try await storage.connector(tenant: "acme", id: "con_1")?.isFailing == true)
            let exposition = try await metrics.exposition(storage: storage, gate: AdmissionGate(limit: 1, maxWaiting: 0), now: now.date)
            #expect(exposition.contains("outpost_connectors_failing 1"))
            #expect(exposition.contains(#"outpost_connector_batches_total{result="failed"} 5"#))

            receiver.fail(false)
            try await Self.deliverNext(delivery, storage)
            #expect(receiver.requests == Connector.failingAfter + 1)
            expectInOrder(try receiver.batches(secret: Self.secret), ["n1", "n2"])
            let recovered = try #require(try await storage.connector(tenant: "acme", id: "con_1"))
            #expect(recovered.failures == 0 && recovered.lastError == nil && !recovered.isFailing)
            #expect(try await storage.failingConnectorCount() == 0)
        }
    }

    @Test(
        "a batch not taken is sent again ending where it did, with its id: later changes wait for the next batch, and a record changed since comes there",
        arguments: StorageKind.allCases)
    func retrySameBatch(kind: StorageKind) async throws {
        let receiver = try await ConnectorReceiver()
        defer { Task { await receiver.stop() } }
        let now = ManualNow(Fixtures.serverNow.date)
        try await withStorage(kind) { storage in try await Self.retriesSameBatch(storage, receiver: receiver, now: now) }
    }

    static func retriesSameBatch<S: SyncStorage>(_ storage: S, receiver: ConnectorReceiver, now: ManualNow) async throws {
        let delivery = Self.delivery(storage, now: now)
        try await storage.addConnector(Self.connector(url: receiver.url))
        #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: delivery.owner, now: 0, until: .max))
        _ = try await storage.push(Self.notes(["n1", "n2"]))
        receiver.fail(true)
        try await Self.deliverNext(delivery, storage)
        let refused = try #require(receiver.attempts.first)
        #expect(try await storage.connector(tenant: "acme", id: "con_1")?.pending != nil)
        // Meanwhile n1 changes again and n3 arrives.
        _ = try await storage.push([Fixtures.upsert("n1", ["t": "again"], at: 5)] + Self.notes(["n3"], at: 6))
        receiver.fail(false)
        try await Self.deliverNext(delivery, storage)
        try await Self.deliverNext(delivery, storage)
        let batches = try receiver.batches(secret: Self.secret)
        #expect(batches.first?.delivery == refused)
        expectInOrder(batches, ["n2", "n1", "n3"])
        #expect(batches.last?.changes.first?.fields["t"] == .string("again"))
        #expect(try await storage.connector(tenant: "acme", id: "con_1")?.pending == nil)
    }

    @Test("an answer whose body never ends is no answer; Apps Script's output must name the batch")
    func answers() async throws {
        let receiver = try await ConnectorReceiver()
        defer { Task { await receiver.stop() } }
        let stalled = Self.connector(url: receiver.url("/stall"))
        let started = ContinuousClock.now
        await #expect(throws: ConnectorMessage.TimedOut.self) {
            try await ConnectorMessage.post(stalled, body: Array("{}".utf8), delivery: "dlv_1", timeout: .seconds(1), now: Date())
        }
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect(ConnectorMessage.reason(ConnectorMessage.TimedOut()) == "the receiver did not answer in time")

        try await ConnectorMessage.checkAppsScriptOutput(receiver.url("/output/dlv_7"), delivery: "dlv_7", timeout: .seconds(60))
        await #expect(throws: ConnectorMessage.NotTakenByScript.self) {
            try await ConnectorMessage.checkAppsScriptOutput(receiver.url("/output/dlv_6"), delivery: "dlv_7", timeout: .seconds(60))
        }
        await #expect(throws: ConnectorMessage.NotTakenByScript.self) {
            try await ConnectorMessage.checkAppsScriptOutput(receiver.url("/error-page"), delivery: "dlv_7", timeout: .seconds(60))
        }
    }

    @Test("a receiver's name is resolved first and every address checked: a name leading inside is refused before any connection")
    func receiverNamesResolved() async throws {
        for address in [
            "127.0.0.1", "10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1",
            "::1", "::", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "ff02::1",
        ] {
            #expect(ReceiverClient.isInternal(address), "\(address)")
        }
        for address in ["8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            #expect(!ReceiverClient.isInternal(address), "\(address)")
        }
        // One internal address among public ones is refused: which one a connection would use is not the server's
        // choice alone.
        #expect(try ReceiverClient.checked(["8.8.8.8", "2606:4700::1111"]) == "8.8.8.8")
        #expect(throws: ReceiverClient.InternalAddress.self) { try ReceiverClient.checked(["8.8.8.8", "10.0.0.7"]) }
        #expect(throws: ReceiverClient.Unresolved.self) { try ReceiverClient.checked([]) }

        // A real name that resolves to loopback (from the hosts file, no network needed): refused before a request.
        let resolved = try await ReceiverClient.resolve("localhost")
        #expect(!resolved.isEmpty && resolved.allSatisfy(ReceiverClient.isInternal), "\(resolved)")
        var request = HTTPClientRequest(url: "https://localhost:9/hook")
        request.method = .POST
        await #expect(throws: ReceiverClient.InternalAddress.self) { _ = try await ReceiverClient.execute(request, timeout: .seconds(5)) }
        #expect(ConnectorMessage.reason(ReceiverClient.InternalAddress()) == "the receiver's name leads to a private, link-local or loopback address")
        // An address in the URL is checked by the URL's rules, and http goes only to this machine: both are sent as
        // they are.
        #expect(try await ReceiverClient.client(for: "http://127.0.0.1:8080/hook") === NotificationClient.shared)
    }

    @Test("receivers are https unless the server allows loopback; no internal address in any of its forms")
    func receiverURLs() async throws {
        for host in ["127.1", "2130706433", "0x7f.0.0.1", "10.1", "192.168.0.9", "172.20.1.1", "169.254.169.254", "0.0.0.0"] {
            #expect(NotificationURL.isInternal(host), "\(host)")
            #expect(NotificationURL.problem(url: "https://\(host)/x", allowingLoopback: true) != nil, "\(host)")
        }
        for host in ["example.org", "8.8.8.8", "172.32.0.1", "script.google.com"] {
            #expect(!NotificationURL.isInternal(host), "\(host)")
        }
        for url in ["https://localhost/x", "https://api.localhost/x", "https://1.2.3.4/x"] {
            #expect(NotificationURL.problem(url: url, allowingLoopback: true) != nil, "\(url)")
        }
        #expect(NotificationURL.problem(url: "https://script.google.com/macros/s/AKfy/exec", allowingLoopback: false) == nil)
        #expect(NotificationURL.problem(url: "http://127.0.0.1:8080/hook", allowingLoopback: false)?.contains("https") == true)
        #expect(NotificationURL.problem(url: "http://127.0.0.1:8080/hook", allowingLoopback: true) == nil)
        try await withServer(.sqlite, configure: { $0.allowsLoopbackReceivers = false }) { client, storage in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let answer = try await client.send(
                .post, "/v1/connectors", token: organizer,
                body: try Fixtures.json(["collection": "notes", "url": "http://127.0.0.1:6379/x"]))
            #expect(answer.status == .badRequest)
            #expect(try await storage.connectors(tenant: "acme").isEmpty)
        }
    }

    @Test("the same changes sent again carry the same delivery id; other changes, another connector or a replay another")
    func deliveryIds() throws {
        let connector = Self.connector(url: "https://example.org/hook")
        let row = RecordRow(
            collection: "notes", recordId: "n1", scope: "", version: 1, fieldsJSON: #"{"t":"x"}"#, createdAt: 0, updatedAt: 0)
        let page = PulledChanges(changes: [row], cursor: PullCursor(xid: 0, seq: 1), hasMore: false)
        func batch(_ connector: Connector, through end: PullCursor = PullCursor(xid: 0, seq: 1)) throws -> ConnectorBatch {
            try ConnectorDelivery<SQLiteStorage>.batch(connector, page, through: end, received: [:], sealer: Self.sealer)
        }
        let first = try batch(connector)
        #expect(first.delivery == (try batch(connector)).delivery)
        #expect(first.delivery.hasPrefix("dlv_"))
        #expect(try batch(connector, through: PullCursor(xid: 0, seq: 2)).delivery != first.delivery)
        var other = connector
        other.id = "con_2"
        #expect(try batch(other).delivery != first.delivery)
        // A replay sends the same changes as new batches, which a receiver that keeps the ids it took takes again.
        var replayed = connector
        replayed.replays = 1
        #expect(try batch(replayed).delivery != first.delivery)
    }

    @Test("the Slack format is a readable message; the signature is what Python's hmac computes", .requires(.python))
    func formats() async throws {
        let changes = (1...22).map { i in
            ConnectorChange(
                recordId: "b\(i)", scope: "", version: 1, tombstone: i == 2, fields: i == 2 ? [:] : ["site": .string("North")],
                createdAt: Fixtures.time(0), updatedAt: Fixtures.time(0), receivedAt: nil)
        }
        let batch = ConnectorBatch(
            delivery: "dlv_1", connector: "con_1", collection: "builds", scope: nil, sequence: 1, from: "c1.0.0", to: "c1.0.22",
            changes: changes)
        let message = try JSONDecoder().decode([String: String].self, from: Data(try ConnectorMessage.body(batch, format: .slack)))
        let lines = try #require(message["text"]).split(separator: "\n")
        #expect(lines.first == "builds: 22 changes")
        #expect(lines[1] == "• b1 v1 — site: North")
        #expect(lines[2] == "• b2 deleted")
        #expect(lines.last == "and 2 more")

        let body = Array(#"{"changes":[]}"#.utf8)
        let signature = ConnectorMessage.signature(secret: Self.secret, body: body, at: Date(timeIntervalSince1970: 1_795_251_600))
        let script = """
            import hmac, hashlib, sys
            secret, body = sys.argv[1].encode(), sys.stdin.buffer.read()
            print("t=1795251600,v1=" + hmac.new(secret, b"1795251600." + body, hashlib.sha256).hexdigest())
            """
        let python = try await Tool.run("python3", ["-c", script, Self.secret], input: Data(body))
        #expect(python.status == 0, "\(python.output)")
        #expect(python.output.trimmingCharacters(in: .whitespacesAndNewlines) == signature)
    }

    @Test("Apps Script's answer to a web app that ran (302 to its output) is taken; no other redirect is")
    func appsScript() {
        let script = "https://script.google.com/macros/s/AKfy123/exec"
        let output = "https://script.googleusercontent.com/macros/echo?user_content_key=abc"
        #expect(ConnectorMessage.isAppsScriptAnswer(url: script, status: 302, location: output))
        #expect(!ConnectorMessage.isAppsScriptAnswer(url: script, status: 301, location: output))
        #expect(!ConnectorMessage.isAppsScriptAnswer(url: script, status: 302, location: "https://accounts.google.com/signin"))
        #expect(!ConnectorMessage.isAppsScriptAnswer(url: script, status: 302, location: "http://script.googleusercontent.com/x"))
        #expect(!ConnectorMessage.isAppsScriptAnswer(url: script, status: 302, location: nil))
        #expect(!ConnectorMessage.isAppsScriptAnswer(url: "https://hooks.example.org/x", status: 302, location: output))
    }

    @Test("the Google Sheets receiver (deploy/google-sheets/Code.gs) keeps a row per record, however often a batch arrives", .requires(.node))
    func sheetsReceiver() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sheets/apps_script_test.js")
        let run = try await Tool.run("node", [script.path])
        #expect(run.status == 0, "\(run.output)")
        #expect(run.output.contains("all checks passed"))
    }

    @Test(
        "/v1/deliveries says, of the caller's own records, whether every connector delivered the version the server has",
        arguments: StorageKind.allCases)
    func deliveries(kind: StorageKind) async throws {
        let receiver = try await ConnectorReceiver()
        defer { Task { await receiver.stop() } }
        try await withServer(kind) { client, storage in try await Self.deliveries(client, storage, receiver: receiver) }
    }

    static func deliveries<S: SyncStorage>(_ client: any TestClientProtocol, _ storage: S, receiver: ConnectorReceiver) async throws {
        let ana = try await Fixtures.token(user: "ana")
        let ben = try await Fixtures.token(user: "ben")
        func build(_ id: String, _ name: String, at seconds: Double = 0) -> Mutation {
            Fixtures.upsert(id, ["name": .string(name)], at: seconds, collection: "builds")
        }
        _ = try await client.push([build("b1", "Shed"), build("b2", "Roof")], token: ana)
        _ = try await client.push([build("b3", "Barn")], token: ben, device: "dev-b")
        func ask(_ token: String, _ query: String = "collection=builds&ids=b1,b2,b3,b9") async throws -> [RecordDelivery] {
            let answer = try await client.send(.get, "/v1/deliveries?\(query)", token: token)
            #expect(answer.status == .ok, "\(String(buffer: answer.body))")
            return try JSONDecoder().decode(RecordDeliveries.self, from: answer.body).records
        }
        // No connector: the records go nowhere else. Ben's build, and one the server does not have, are left out.
        #expect(try await ask(ana).map(\.recordId) == ["b1", "b2"])
        #expect(try await ask(ana).allSatisfy { $0.receivers == 0 && !$0.delivered })

        let now = ManualNow(Fixtures.serverNow.date)
        let delivery = ConnectorDelivery(
            storage: storage, clock: ManualClock(), now: { now.date }, logger: Fixtures.quietLogger, metrics: ServerMetrics(),
            send: { connector, body, delivery in
                try await ConnectorMessage.post(connector, body: body, delivery: delivery, timeout: .seconds(60), now: now.date)
            },
            sealer: { Self.sealer }, batchSize: 1)
        try await storage.addConnector(Self.connector(collection: "builds", url: receiver.url))
        #expect(try await ask(ana).map { "\($0.recordId) \($0.receivers) \($0.delivered)" } == ["b1 1 false", "b2 1 false"])
        #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: delivery.owner, now: 0, until: .max))
        try await Self.deliverNext(delivery, storage)
        #expect(try await ask(ana).map { "\($0.recordId) \($0.delivered)" } == ["b1 true", "b2 false"])
        // A newer version of b1 is not delivered until the connector sends it.
        _ = try await client.push([build("b1", "Shed, roofed", at: 10)], token: ana)
        #expect(try await ask(ana).map { "\($0.recordId) v\($0.version) \($0.delivered)" } == ["b2 v1 false", "b1 v2 false"])
        // A chat's connector is not where records are kept: it is not counted.
        var chat = Self.connector(id: "con_chat", collection: "builds", url: receiver.url)
        chat.format = .slack
        try await storage.addConnector(chat)
        #expect(try await ask(ana).map(\.receivers) == [1, 1])
        // A second connector that has sent nothing: delivered only when both have.
        try await storage.addConnector(Self.connector(id: "con_2", collection: "builds", url: receiver.url))
        while try receiver.batches(secret: Self.secret).flatMap(\.changes).count < 3 {
            try await Self.deliverNext(delivery, storage)
        }
        let both = try await ask(ana)
        #expect(both.count == 2 && both.allSatisfy { $0.receivers == 2 && !$0.delivered }, "\(both)")

        // A supervisor reads every build; staff without the event are refused a scoped collection; bad ids are 400.
        let sue = try await Fixtures.token(user: "sue", role: .supervisor)
        #expect(try await ask(sue).map(\.recordId).sorted() == ["b1", "b2", "b3"])
        let scoped = try await client.send(.get, "/v1/deliveries?collection=checkins&ids=g1", token: ana)
        #expect(scoped.status == .forbidden)
        for query in [
            "collection=builds", "collection=builds&ids=", "collection=builds&ids=a,,b", "collection=builds&ids=a%20b",
            "collection=builds&ids=" + (0...200).map { "b\($0)" }.joined(separator: ","),
        ] {
            let answer = try await client.send(.get, "/v1/deliveries?\(query)", token: ana)
            #expect(answer.status == .badRequest, "\(query)")
        }
        #expect(try await client.send(.get, "/v1/deliveries?collection=nope&ids=a", token: ana).status == .notFound)
        #expect(try await client.send(.get, "/v1/deliveries?collection=builds&ids=b1", token: nil).status == .unauthorized)
    }

    @Test(
        "a connector that failed tells whoever may read the record why; a retry brings its next attempt to 5 s after the failure, and no nearer",
        arguments: StorageKind.allCases)
    func deliveryRetry(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            let ben = try await Fixtures.token(user: "ben")
            _ = try await client.push([Fixtures.upsert("b1", ["name": "Shed"], collection: "builds")], token: ana)
            try await storage.addConnector(Self.connector(collection: "builds", url: "https://sheets.example.org/exec/AKfy123"))
            let failedAt = Fixtures.serverNow.millisecondsSince1970
            let later = failedAt + 3_600_000
            #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: "test", now: 0, until: .max))
            _ = try await storage.connectorFailed(
                tenant: "acme", id: "con_1", owner: "test", error: "the receiver answered 502", at: failedAt, nextAttemptAt: later)
            func ask(_ token: String, _ method: HTTPRequest.Method = .get, ids: String = "b1") async throws -> [RecordDelivery] {
                let path = method == .get ? "/v1/deliveries" : "/v1/deliveries/retry"
                let answer = try await client.send(method, "\(path)?collection=builds&ids=\(ids)", token: token)
                #expect(answer.status == .ok, "\(String(buffer: answer.body))")
                return try JSONDecoder().decode(RecordDeliveries.self, from: answer.body).records
            }
            func nextAttempt() async throws -> Int64 { try #require(try await storage.connector(tenant: "acme", id: "con_1")).nextAttemptAt }
            let told = try #require(try await ask(ana).first)
            #expect(!told.delivered && told.isFailing && told.lastError == "the receiver answered 502")
            #expect(told.nextAttemptAt == Timestamp(millisecondsSince1970: later))
            // Ben may not read Ana's build: his retry names nothing and moves nothing.
            #expect(try await ask(ben, .post).isEmpty)
            #expect(try await nextAttempt() == later)
            let retried = try #require(try await ask(ana, .post).first)
            #expect(try await nextAttempt() == failedAt + 5_000)
            #expect(retried.nextAttemptAt == Timestamp(millisecondsSince1970: failedAt + 5_000) && retried.isFailing)
            // Asked again, it stays: a device that presses Retry many times does not flood the receiver.
            _ = try await ask(ana, .post)
            #expect(try await nextAttempt() == failedAt + 5_000)
            // Bad input and no token are refused, as for GET.
            #expect(try await client.send(.post, "/v1/deliveries/retry?collection=builds&ids=a,,b", token: ana).status == .badRequest)
            #expect(try await client.send(.post, "/v1/deliveries/retry?collection=builds&ids=b1", token: nil).status == .unauthorized)
            #expect(try await client.send(.post, "/v1/deliveries/retry?collection=checkins&ids=g1", token: ana).status == .forbidden)
        }
    }

    @Test(
        "organizers add, list, pause, resume, replay and remove connectors; others, bad input and other tenants are refused",
        arguments: StorageKind.allCases)
    func api(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let otherOrganizer = try await Fixtures.token(tenant: "other", user: "oscar", role: .organizer)
            let body = try Fixtures.json(["collection": "builds", "url": "https://sheets.example.org/exec/AKfy123"])
            for role in [Role.staff, .supervisor] {
                let token = try await Fixtures.token(user: "sam", role: role)
                let refused = try await client.send(.post, "/v1/connectors", token: token, body: body)
                #expect(refused.status == .forbidden)
                #expect(refused.wireError?.code == .forbidden)
                #expect(try await client.send(.get, "/v1/connectors", token: token).status == .forbidden)
            }
            #expect(try await client.send(.get, "/v1/connectors", token: nil).status == .unauthorized)

            let made = try await client.send(.post, "/v1/connectors", token: organizer, body: body)
            #expect(made.status == .created)
            let status = try JSONDecoder().decode(ConnectorStatus.self, from: made.body)
            #expect(status.id.hasPrefix("con_"))
            #expect(status.host == "sheets.example.org")
            #expect(status.state == "active")
            #expect(status.cursor == PullCursor.start.token)
            let secret = try #require(status.secret)
            #expect(secret.hasPrefix("osk_") && secret.count == 68)
            let listed = try await client.send(.get, "/v1/connectors", token: organizer)
            let text = String(buffer: listed.body)
            #expect(!text.contains(secret))
            #expect(!text.contains("AKfy123"))
            #expect(try JSONDecoder().decode([ConnectorStatus].self, from: listed.body).map(\.id) == [status.id])
            // The secret chosen by the organizer is never shown.
            let own = try await client.send(
                .post, "/v1/connectors", token: organizer,
                body: try Fixtures.json([
                    "collection": "checkins", "scope": "gala", "url": "http://127.0.0.1:9/hook", "secret": Self.secret, "format": "slack",
                ]))
            #expect(own.status == .created)
            #expect(!String(buffer: own.body).contains(Self.secret))

            // Another tenant sees none of them and can change none.
            #expect(
                try JSONDecoder().decode([ConnectorStatus].self, from: try await client.send(.get, "/v1/connectors", token: otherOrganizer).body)
                    .isEmpty)
            for (method, path) in [
                (HTTPRequest.Method.get, ""), (.post, "/pause"), (.post, "/resume"), (.delete, ""),
            ] {
                let answer = try await client.send(method, "/v1/connectors/\(status.id)\(path)", token: otherOrganizer)
                #expect(answer.status == .notFound, "\(method) \(path)")
                #expect(answer.wireError?.code == .notFound)
            }

            let paused = try await client.send(.post, "/v1/connectors/\(status.id)/pause", token: organizer)
            #expect(try JSONDecoder().decode(ConnectorStatus.self, from: paused.body).state == "paused")
            let resumed = try await client.send(.post, "/v1/connectors/\(status.id)/resume", token: organizer)
            #expect(try JSONDecoder().decode(ConnectorStatus.self, from: resumed.body).state == "active")
            let cursor = Self.sealer.token(PullCursor(xid: 0, seq: 7), tenant: "acme")
            let replayed = try await client.post("/v1/connectors/\(status.id)/replay", ["from": cursor], token: organizer)
            #expect(try JSONDecoder().decode(ConnectorStatus.self, from: replayed.body).cursor == cursor)
            #expect(try await storage.connector(tenant: "acme", id: status.id)?.cursor == PullCursor(xid: 0, seq: 7))
            // Another tenant's cursor opens for no one else.
            let foreign = Self.sealer.token(PullCursor(xid: 0, seq: 7), tenant: "other")
            let refused = try await client.post("/v1/connectors/\(status.id)/replay", ["from": foreign], token: organizer)
            #expect(refused.status == .badRequest)
            #expect(try JSONDecoder().decode(WireError.self, from: refused.body).code == .invalidCursor)
            #expect(try await client.post("/v1/connectors/\(status.id)/replay", ["from": "start"], token: organizer).status == .ok)
            #expect(try await storage.connector(tenant: "acme", id: status.id)?.cursor == .start)

            // Bad input: one clear error, nothing stored.
            for (bad, code) in [
                (#"{"collection":"nope","url":"https://example.org/x"}"#, WireError.Code.unknownCollection),
                (#"{"collection":"builds","url":"http://example.org/x"}"#, .invalidRequest),
                (#"{"collection":"builds","url":"https://10.0.0.8/x"}"#, .invalidRequest),
                (#"{"collection":"builds","url":"https://example.org/x","scope":"a b"}"#, .invalidRequest),
                (#"{"collection":"builds","url":"https://example.org/x","secret":"short"}"#, .invalidRequest),
                (#"{"collection":"builds","url":"https://example.org/x","format":"xml"}"#, .invalidJSON),
                (#"{"collection":"builds","url":"https://example.org/x","tenant":"other"}"#, .invalidJSON),
                (#"{"collection":"builds"}"#, .invalidJSON),
                (#"{"collection":"builds","url":"https://example.org/x","format":null}"#, .invalidJSON),
                (#"{"collection":"builds","url":"https://example.org/x","scope":null}"#, .invalidJSON),
            ] {
                let answer = try await client.send(.post, "/v1/connectors", token: organizer, body: ByteBuffer(string: bad))
                #expect(answer.status.code / 100 == 4, "\(bad)")
                #expect(answer.wireError?.code == code, "\(bad)")
            }
            #expect(try await client.post("/v1/connectors/\(status.id)/replay", ["from": "c2.1"], token: organizer).status == .badRequest)
            #expect(
                try await client.post("/v1/connectors/\(status.id)/replay", ["from": "start", "to": "x"], token: organizer).status == .badRequest)
            #expect(try await storage.connectors(tenant: "acme").count == 2)

            // At most twenty a tenant.
            for _ in 2..<ConnectorController<SQLiteStorage>.maxConnectors {
                #expect(try await client.send(.post, "/v1/connectors", token: organizer, body: body).status == .created)
            }
            let over = try await client.send(.post, "/v1/connectors", token: organizer, body: body)
            #expect(over.status == .conflict)

            #expect(try await client.send(.delete, "/v1/connectors/\(status.id)", token: organizer).status == .noContent)
            #expect(try await client.send(.delete, "/v1/connectors/\(status.id)", token: organizer).status == .notFound)
        }
    }
}
