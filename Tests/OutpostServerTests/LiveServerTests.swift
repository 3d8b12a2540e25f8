import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import OutpostApps
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

/// The client SDK's HTTP transport against the real application on a real loopback socket.
@Suite("Over a real socket")
struct LiveServerTests {
    @Test("push, pull, snapshot and health through HTTPSyncTransport", arguments: StorageKind.allCases)
    func transportRoundTrip(kind: StorageKind) async throws {
        try await withServer(kind, setup: .live) { client, storage in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let staff = HTTPSyncTransport(baseURL: base, token: try await Fixtures.token(role: .staff))
            let organizer = HTTPSyncTransport(baseURL: base, token: try await Fixtures.token(role: .organizer))
            #expect(try await staff.health().status == "ok")
            let mutation = Fixtures.upsert("r1", ["title": "über + 🚀 & more"], at: 1)
            let pushed = try await staff.push(PushRequest(deviceId: "dev-a", mutations: [mutation]))
            #expect(pushed.results.map(\.status) == [.applied])
            let replayed = try await staff.push(PushRequest(deviceId: "dev-a", mutations: [mutation]))
            #expect(replayed.results.map(\.status) == [.duplicate])
            try await storage.settle()
            let pulled = try await staff.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            #expect(pulled.changes.first?.fields["title"] == "über + 🚀 & more")
            _ = try await organizer.push(
                PushRequest(
                    deviceId: "org",
                    mutations: [
                        Fixtures.upsert("g1", ["event_id": "ev.1:a@b", "name": "A"], collection: "guests", device: "org")
                    ]))
            try await storage.settle()
            let snapshot = try await staff.snapshot(collection: "guests", scope: "ev.1:a@b", continuation: nil, limit: 10)
            #expect(snapshot.records.map(\.recordId) == ["g1"])
            #expect(snapshot.cursor != nil)
        }
    }

    @Test(
        "a stream of pulls through HTTPSyncTransport: the pages of pulls one by one, up to `pages` or the last change",
        arguments: StorageKind.allCases)
    func streamedPulls(kind: StorageKind) async throws {
        try await withServer(kind, setup: .live) { client, storage in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let staff = HTTPSyncTransport(baseURL: base, token: try await Fixtures.token(role: .staff))
            for i in 0..<7 {
                _ = try await staff.push(
                    PushRequest(deviceId: "dev-a", mutations: [Fixtures.upsert("r\(i)", ["n": .number(Double(i))], at: Double(i + 1))]))
            }
            try await storage.settle()
            // One by one: pages of two, the cursors they end at.
            var expected: [(ids: [String], cursor: String, hasMore: Bool)] = []
            var cursor: String?
            repeat {
                let page = try await staff.pullPage(collection: "notes", scope: nil, cursor: cursor, limit: 2)
                expected.append((page.changes.map(\.recordId), page.cursor, page.hasMore))
                cursor = page.hasMore ? page.cursor : nil
            } while cursor != nil
            #expect(expected.map(\.ids) == [["r0", "r1"], ["r2", "r3"], ["r4", "r5"], ["r6"]])

            func streamed(from cursor: String?, pages: Int) async throws -> [(ids: [String], cursor: String, hasMore: Bool)] {
                var received: [(ids: [String], cursor: String, hasMore: Bool)] = []
                for try await page in staff.pullPageStream(collection: "notes", scope: nil, cursor: cursor, limit: 2, pages: pages) {
                    received.append((page.changes.map(\.recordId), page.cursor, page.hasMore))
                }
                return received
            }
            // Three pages of four: the last of them says more follow.
            let first = try await streamed(from: nil, pages: 3)
            #expect(first.map(\.ids) == expected.prefix(3).map(\.ids))
            #expect(first.map(\.cursor) == expected.prefix(3).map(\.cursor))
            #expect(first.map(\.hasMore) == [true, true, true])
            // The rest, asked for more pages than there are: the stream ends with the last change.
            let rest = try await streamed(from: first.last?.cursor, pages: 10)
            #expect(rest.map(\.ids) == [["r6"]])
            #expect(rest.map(\.cursor) == [expected[3].cursor])
            #expect(rest.map(\.hasMore) == [false])
            // Decoded whole, the same stream gives what `pull` gives one page at a time.
            var decoded: [PullResponse] = []
            for try await page in staff.pullStream(collection: "notes", scope: nil, cursor: nil, limit: 2, pages: 10) {
                decoded.append(page)
            }
            var oneByOne: [PullResponse] = []
            cursor = nil
            repeat {
                let page = try await staff.pull(collection: "notes", scope: nil, cursor: cursor, limit: 2)
                oneByOne.append(page)
                cursor = page.hasMore ? page.cursor : nil
            } while cursor != nil
            #expect(decoded == oneByOne)
            #expect(decoded.count == 4)
            // One page asked for: one page.
            let one = try await staff.pullPageStream(collection: "notes", scope: nil, cursor: nil, limit: 1, pages: 1)
                .first { _ in true }
            #expect(one?.changes.first?.recordId == "r0")
            // Refused before anything is sent: an ordinary error answer.
            await #expect {
                for try await _ in staff.pullPageStream(collection: "notes", scope: nil, cursor: "c9.1.2", limit: 2, pages: 3) {}
            } throws: { error in
                (error as? TransportError)?.status == 400 && (error as? TransportError)?.wire?.code == .invalidCursor
            }
            let forged = HTTPSyncTransport(baseURL: base, token: "forged")
            await #expect {
                for try await _ in forged.pullPageStream(collection: "notes", scope: nil, cursor: nil, limit: 2, pages: 3) {}
            } throws: { error in
                (error as? TransportError)?.status == 401
            }
        }
    }

    /// Counts the streams of pulls the engine opens, and passes them to the HTTP transport.
    struct CountingStreams: ForwardingTransport {
        let inner: any SyncTransport
        let opened = NIOLockedValueBox(0)

        func pullStream(
            collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
        )
            -> AsyncThrowingStream<PullResponse, any Error>
        {
            opened.withLockedValue { $0 += 1 }
            return inner.bulkPullStream(collection: collection, scope: scope, cursor: cursor, limit: limit, pages: pages)
        }
    }

    @Test("the engine's pull reads its pages from streams of pulls, and opens another where one ends with more to come")
    func enginePullStreams() async throws {
        try await withServer(.sqlite, setup: .live) { client, storage in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let staff = HTTPSyncTransport(baseURL: base, token: try await Fixtures.token(role: .staff))
            // Two streams' worth of one-change pages, and five more.
            let ids = (0..<(SyncEngine.pullPagesPerStream * 2 + 5)).map { String(format: "r%02d", $0) }
            _ = try await staff.push(
                PushRequest(
                    deviceId: "dev-a",
                    mutations: ids.enumerated().map { Fixtures.upsert($1, ["n": .number(Double($0))], at: Double($0 + 1)) }))
            try await storage.settle()
            let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-pull-\(UUID())")
            defer { try? FileManager.default.removeItem(at: root) }
            let url = root.appendingPathComponent("device.sqlite")
            let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            let transport = CountingStreams(inner: staff)
            let engine = SyncEngine(store: store, transport: transport, configuration: SyncConfiguration(deviceId: "dev-b", deliversAfterSave: false))
            #expect(try await engine.pull(collection: "notes", pageSize: 1) == ids.count)
            #expect(transport.opened.withLockedValue { $0 } == 3)
            #expect(try await store.records(collection: "notes").map(\.recordId).sorted() == ids)
            // Nothing new: one stream, with one empty page.
            #expect(try await engine.pull(collection: "notes", pageSize: 1) == 0)
            #expect(transport.opened.withLockedValue { $0 } == 4)
        }
    }

    @Test("a server that answers a stream of pulls with one ordinary page (one that predates streams) is read as that page")
    func streamFromOlderServer() async throws {
        let router = Router()
        router.get("v1/pull") { _, _ -> Response in
            let page = try PullResponse(changes: [], cursor: "c1.0.9", hasMore: true).jsonBytes()
            return Response(
                status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: page)))
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let transport = HTTPSyncTransport(
                baseURL: try #require(URL(string: "http://127.0.0.1:\(port)")), token: "t")
            var pages: [PullPage] = []
            for try await page in transport.pullPageStream(collection: "notes", scope: nil, cursor: nil, limit: 2, pages: 5) {
                pages.append(page)
            }
            #expect(pages.map(\.cursor) == ["c1.0.9"])
            #expect(pages.first?.hasMore == true)
        }
    }

    @Test("a stream that ends with an error line, or is cut in the middle of a line, gives the pages before it, then the error")
    func streamEndingBadly() async throws {
        let page = String(decoding: try PullResponse(changes: [], cursor: "c1.0.1", hasMore: true).jsonBytes(), as: UTF8.self)
        let router = Router()
        router.get("v1/pull") { request, _ -> Response in
            let ending =
                request.uri.queryParameters["cursor"] == "error"
                ? #"{"error":{"code":"service_unavailable","message":"storage is unavailable; retry later"}}"# + "\n"
                : #"{"changes":[{"colle"#
            return Response(
                status: .ok, headers: [.contentType: "application/x-ndjson"],
                body: .init(byteBuffer: ByteBuffer(string: page + "\n" + ending)))
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let transport = HTTPSyncTransport(
                baseURL: try #require(URL(string: "http://127.0.0.1:\(port)")), token: "t")
            for (cursor, kind) in [("error", TransportError.Kind.server), ("cut", .network)] {
                var pages: [PullPage] = []
                await #expect {
                    for try await page in transport.pullPageStream(collection: "notes", scope: nil, cursor: cursor, limit: 2, pages: 5) {
                        pages.append(page)
                    }
                } throws: { error in
                    guard let error = error as? TransportError else { return false }
                    return error.kind == kind && error.isRetryable
                        && (kind != .server || error.wire?.code == .serviceUnavailable)
                }
                #expect(pages.map(\.cursor) == ["c1.0.1"], "\(cursor)")
            }
        }
    }

    @Test(
        "an answer that falls silent halfway ends, at the silence limit, in a retryable network error; one that keeps coming does not",
        .timeLimit(.minutes(5)))
    func silentAnswer() async throws {
        // The server sends a first page, then one more each time the test steps: four in all, and the end at
        // the next step. The silent answer waits instead for the test to be over.
        let (steps, step) = AsyncStream<Void>.makeStream()
        let (over, end) = AsyncStream<Void>.makeStream()
        let router = Router()
        router.get("v1/pull") { request, _ -> Response in
            let silent = request.uri.queryParameters["cursor"] == "silent"
            return Response(
                status: .ok, headers: [.contentType: "application/x-ndjson"],
                body: ResponseBody { writer in
                    try await writer.write(ByteBuffer(string: try Self.pageLine(1)))
                    if silent {
                        for await _ in over {}
                    } else {
                        var more = steps.makeAsyncIterator()
                        for n in 2...5 {
                            guard await more.next() != nil, n < 5 else { break }
                            try await writer.write(ByteBuffer(string: try Self.pageLine(n)))
                        }
                    }
                    try await writer.finish(nil)
                })
        }
        // An ordinary answer that stops halfway.
        router.get("health") { _, _ -> Response in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: ResponseBody { writer in
                    try await writer.write(ByteBuffer(string: #"{"status":"#))
                    for await _ in over {}
                    try await writer.finish(nil)
                })
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            // The limit is long because it also bounds, in real time, the wait for an answer's head: on a machine
            // busy with the whole test run that wait must never be what ends it.
            let limit = Duration.seconds(600)
            for silent in [false, true] {
                let clock = ManualClock()
                var sleeps = clock.sleeps.makeAsyncIterator()
                let transport = HTTPSyncTransport(baseURL: base, token: "t", timeout: limit, clock: clock)
                let (received, receiving) = AsyncStream<String>.makeStream()
                var pages = received.makeAsyncIterator()
                let reading = Task {
                    defer { receiving.finish() }
                    for try await page in transport.pullPageStream(
                        collection: "notes", scope: nil, cursor: silent ? "silent" : "slow", limit: 2, pages: 5)
                    {
                        receiving.yield(page.cursor)
                    }
                }
                #expect(await pages.next() == "c1.0.1")
                _ = await sleeps.next()
                if silent {
                    // The watch looks every quarter of the limit: three looks pass, the fourth finds a whole limit
                    // of nothing since the first page.
                    for _ in 0..<3 {
                        clock.advance(by: limit / 4)
                        _ = await sleeps.next()
                    }
                    clock.advance(by: limit / 4)
                    await #expect {
                        try await reading.value(within: testWaitLimit, "the silent answer's end")
                    } throws: { error in
                        guard let error = error as? TransportError else { return false }
                        return error.kind == .network && error.isRetryable && error.message.contains("silent")
                    }
                } else {
                    // A page in every half limit: the watch looks twice after each, and the answer ends.
                    for n in 2...4 {
                        step.yield()
                        #expect(await pages.next() == "c1.0.\(n)")
                        for _ in 0..<2 {
                            clock.advance(by: limit / 4)
                            _ = await sleeps.next()
                        }
                    }
                    step.yield()
                    try await reading.value(within: testWaitLimit, "the answer's end")
                }
                #expect(await pages.next() == nil)
            }
            // The same watch bounds an answer read whole: a limit at a time passes, each once the watch
            // sleeps, until it gives up. (The manual clock may run past the first deadline before the head is
            // heard, in real time; the message then says the server could not be reached.)
            let clock = ManualClock()
            let transport = HTTPSyncTransport(baseURL: base, token: "t", timeout: limit, clock: clock)
            let time = Task {
                for await _ in clock.sleeps { clock.advance(by: limit) }
            }
            await #expect {
                _ = try await transport.health()
            } throws: { error in
                guard let error = error as? TransportError else { return false }
                return error.kind == .network && error.isRetryable
            }
            time.cancel()
            step.finish()
            end.finish()
        }
    }

    /// A line of a stream of pulls: an empty page whose cursor ends in `n`.
    static func pageLine(_ n: Int) throws -> String {
        String(decoding: try PullResponse(changes: [], cursor: "c1.0.\(n)", hasMore: true).jsonBytes(), as: UTF8.self) + "\n"
    }

    @Test("server errors come back as the wire error, with their status")
    func errorsDecode() async throws {
        try await withServer(.sqlite, setup: .live) { client, _ in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let forged = HTTPSyncTransport(baseURL: base, token: "forged")
            await #expect {
                _ = try await forged.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            } throws: { error in
                guard let error = error as? TransportError else { return false }
                return error.status == 401 && error.wire?.code == .invalidToken && !error.isRetryable
            }
        }
    }

    @Test("an unreachable server is a retryable network error that says so")
    func unreachable() async throws {
        let transport = HTTPSyncTransport(baseURL: URL(string: "http://127.0.0.1:1")!, token: "t", timeout: .seconds(5))
        let error = await #expect(throws: TransportError.self) { _ = try await transport.health() }
        #expect(error?.kind == .network)
        #expect(error?.isRetryable == true)
        // AsyncHTTPClient's deadline, or on a busy machine the silence watch after it, ends the call.
        #expect(error?.message == "the server could not be reached")
    }

    @Test("a server that takes the connection and never answers did not answer within the limit; it is not called unreachable")
    func notAnswering() async throws {
        let silent = try SilentPort()
        let transport = HTTPSyncTransport(
            baseURL: URL(string: "http://127.0.0.1:\(silent.port)")!, token: "t", timeout: .seconds(1))
        let error = await #expect(throws: TransportError.self) { _ = try await transport.health() }
        #expect(error?.kind == .network)
        // AsyncHTTPClient's deadline ends the call; on a machine so busy that the silence watch (at twice the
        // limit) ends it first, nothing was heard and it is unreachable.
        #expect(
            (error?.answerTimedOut == true && error?.message == "the server did not answer within 1 s")
                || error?.message == "the server could not be reached", "\(String(describing: error))")
        withExtendedLifetime(silent) {}
    }

    @Test("an answer that is not the protocol is an invalid response that keeps the decoder's error beneath")
    func notTheProtocol() async throws {
        let router = Router()
        router.get("health") { _, _ in "not JSON" }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let transport = HTTPSyncTransport(baseURL: try #require(URL(string: "http://127.0.0.1:\(port)")), token: "t")
            let error = await #expect(throws: TransportError.self) { _ = try await transport.health() }
            #expect(error?.kind == .invalidResponse)
            #expect(error?.message == "the server's answer is not Outpost's protocol")
            #expect(error?.underlying != nil)
            #expect(error?.underlying is TransportError == false)
        }
    }
}
