import Foundation
import OutpostApps
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// Two downloads of one set at once: in one process the second waits for the first; across processes (two stores
/// on one file) each page is stored only onto the continuation it was asked with.
@Suite("Concurrent downloads of a set", .timeLimit(.minutes(5)))
struct ConcurrentDownloadTests {
    /// Serves a roster's snapshot pages, holding every request from number `holdFrom` (0-based) until opened (or
    /// failed, or its task cancelled), and failing every request from number `failFrom` on as the network would.
    final class GatedServer: RosterDouble, @unchecked Sendable {
        let roster: ReferenceServer
        /// One element for each request held, once it is.
        let holds: AsyncStream<Void>
        private let held: AsyncStream<Void>.Continuation
        private let lock = NSLock()
        private let holdFrom: Int?
        private let failFrom: Int?
        private var calls = 0
        private var isOpen = false
        private var waiting: [Int: CheckedContinuation<Void, any Error>] = [:]

        init(roster: ReferenceServer, holdFrom: Int? = nil, failFrom: Int? = nil) {
            self.roster = roster
            self.holdFrom = holdFrom
            self.failFrom = failFrom
            (holds, held) = AsyncStream.makeStream()
        }

        var requests: Int { lock.withLock { calls } }

        /// Lets the requests held go on, and every request after them.
        func open() { release(with: nil) }

        /// Fails the requests held as the network would; every request after them goes on.
        func failHeld() { release(with: TransportError(kind: .network, message: "connection lost")) }

        private func release(with error: (any Error)?) {
            let released = lock.withLock {
                isOpen = true
                defer { waiting = [:] }
                return waiting.values
            }
            for continuation in released {
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }

        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            let call = lock.withLock {
                calls += 1
                return calls - 1
            }
            if let failFrom, call >= failFrom { throw TransportError(kind: .network, message: "connection lost") }
            if let holdFrom, call >= holdFrom {
                try await withTaskCancellationHandler {
                    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                        // In one step with the cancellation handler's: a request cancelled first is never held.
                        let outcome = lock.withLock { () -> Result<Void, any Error>? in
                            if Task.isCancelled { return .failure(CancellationError()) }
                            if isOpen { return .success(()) }
                            waiting[call] = continuation
                            return nil
                        }
                        if let outcome { continuation.resume(with: outcome) } else { held.yield() }
                    }
                } onCancel: {
                    lock.withLock { waiting.removeValue(forKey: call) }?.resume(throwing: CancellationError())
                }
            }
            return try await roster.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }
    }

    /// Starts a download through `transport` that stores its first page and is then held; returns once that page
    /// is stored and a request held.
    static func heldDownload(_ store: LocalStore, _ transport: GatedServer) async -> Task<ReferenceState, any Error> {
        let (stored, storing) = AsyncStream<Void>.makeStream()
        let data = ReferenceData(store: store, transport: transport, pageSize: 100)
        let download = Task { try await data.download(collection: "guests", scope: "ev-1") { _ in storing.yield() } }
        var pages = stored.makeAsyncIterator()
        await pages.next()
        var holds = transport.holds.makeAsyncIterator()
        await holds.next()
        return download
    }

    /// Every guest of a roster of `count` found once, and the set's count right.
    static func expectWhole(_ store: LocalStore, count: Int) async throws {
        let data = ReferenceData(store: store, transport: ReferenceServer())
        #expect(try await data.state(collection: "guests", scope: "ev-1").isReady)
        let rows = try await store.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM reference_records WHERE scope = 'ev-1'") ?? 0
        }
        #expect(rows == count)
        for id in [0, count / 2, count - 1].map({ String(format: "g%05d", $0) }) {
            guard case .found = try await data.lookup(collection: "guests", scope: "ev-1", recordId: id) else {
                Issue.record("\(id) missing")
                continue
            }
        }
        // The search index holds each row once.
        #expect(try await data.search(collection: "guests", scope: "ev-1", query: "guest\(count - 1)@example.org").count == 1)
    }

    @Test("in one process, a second download of a set waits for the first, then returns it ready without asking for a page")
    func secondWaits() async throws {
        try await Self.withTwoDownloads { store, server, first, second in
            server.open()
            #expect(try await first.value(within: testWaitLimit, "the first download").isReady)
            #expect(try await second.value(within: testWaitLimit, "the second download").isReady)
            // Ten pages, each asked for once, all by the first.
            #expect(server.requests == 10)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    @Test("in one process, a second download waiting for the first stops at once when cancelled; the first goes on")
    func waitingCancelled() async throws {
        try await Self.withTwoDownloads { store, server, first, second in
            second.cancel()
            // Given the first still held, the second throws, and no longer waits.
            await #expect(throws: CancellationError.self) {
                try await second.value(within: testWaitLimit, "the second download, cancelled")
            }
            #expect(store.downloads.waiting == 0)
            server.open()
            #expect(try await first.value(within: testWaitLimit, "the first download").isReady)
            #expect(server.requests == 10)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    @Test("in one process, when the first download fails, the one waiting for it resumes from its pages and completes")
    func waitingResumesAfterFailure() async throws {
        try await Self.withTwoDownloads { store, server, first, second in
            server.failHeld()
            await #expect(throws: TransportError.self) { try await first.value(within: testWaitLimit, "the first download") }
            #expect(try await second.value(within: testWaitLimit, "the second download").isReady)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    /// Runs `body` with two downloads of one set through one store: the first has stored its first page and is
    /// held, the second waits for its turn.
    static func withTwoDownloads(
        _ body: (LocalStore, GatedServer, Task<ReferenceState, any Error>, Task<ReferenceState, any Error>) async throws -> Void
    ) async throws {
        try await withStore { store, _ in
            let server = GatedServer(roster: ReferenceDataTests.roster(1000), holdFrom: 1)
            let first = await heldDownload(store, server)
            let (joined, joining) = AsyncStream<Void>.makeStream()
            store.downloads.seams.withLockedValue { $0.joined = { joining.yield() } }
            let second = Task {
                try await ReferenceData(store: store, transport: server, pageSize: 100).download(collection: "guests", scope: "ev-1")
            }
            var joins = joined.makeAsyncIterator()
            await joins.next()
            try await body(store, server, first, second)
        }
    }

    @Test("across processes, a download another one completed meanwhile stores nothing more and returns the set ready")
    func overtakenAndCompleted() async throws {
        try await withStore { store, url in
            let roster = ReferenceDataTests.roster(1000)
            let server = GatedServer(roster: roster, holdFrom: 1)
            let first = await Self.heldDownload(store, server)
            // Another process resumes the set from the first one's page and completes it.
            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            #expect(
                try await ReferenceData(store: other, transport: roster, pageSize: 100)
                    .download(collection: "guests", scope: "ev-1").isReady)
            server.open()
            #expect(try await first.value(within: testWaitLimit, "the first download").isReady)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    @Test("across processes, a download another one moved past and left incomplete stops with busy; the next one finishes the set")
    func overtakenAndIncomplete() async throws {
        try await withStore { store, url in
            let roster = ReferenceDataTests.roster(1000)
            let server = GatedServer(roster: roster, holdFrom: 1)
            let first = await Self.heldDownload(store, server)
            // Another process stores two more pages, then loses the network.
            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            let failing = GatedServer(roster: roster, failFrom: 2)
            await #expect(throws: TransportError.self) {
                try await ReferenceData(store: other, transport: failing, pageSize: 100).download(collection: "guests", scope: "ev-1")
            }
            #expect(
                try await ReferenceData(store: other, transport: roster).state(collection: "guests", scope: "ev-1")
                    == .incomplete(stored: 300, total: 1000))
            server.open()
            do {
                _ = try await first.value(within: testWaitLimit, "the overtaken download")
                Issue.record("the overtaken download returned")
            } catch let error as ClientError {
                #expect(error.code == .busy)
            }
            // Nothing of the overtaken download was stored over the other's pages.
            #expect(
                try await ReferenceData(store: store, transport: roster).state(collection: "guests", scope: "ev-1")
                    == .incomplete(stored: 300, total: 1000))
            #expect(
                try await ReferenceData(store: store, transport: roster, pageSize: 100)
                    .download(collection: "guests", scope: "ev-1").isReady)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    @Test("across processes, two fresh downloads at once: the later first page is refused, not stored over the other's")
    func freshDownloadsAtOnce() async throws {
        try await withStore { store, url in
            let roster = ReferenceDataTests.roster(1000)
            // Another process starts first: it finds nothing stored, and its first page is on the way.
            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            let late = GatedServer(roster: roster, holdFrom: 0)
            let lateDownload = Task {
                try await ReferenceData(store: other, transport: late, pageSize: 100).download(collection: "guests", scope: "ev-1")
            }
            var holds = late.holds.makeAsyncIterator()
            await holds.next()
            // Meanwhile this one stores its first page.
            let server = GatedServer(roster: roster, holdFrom: 1)
            let first = await Self.heldDownload(store, server)
            late.open()
            do {
                _ = try await lateDownload.value(within: testWaitLimit, "the later download")
                Issue.record("the later download returned")
            } catch let error as ClientError {
                #expect(error.code == .busy)
            }
            #expect(
                try await ReferenceData(store: store, transport: roster).state(collection: "guests", scope: "ev-1")
                    == .incomplete(stored: 100, total: 1000))
            server.open()
            #expect(try await first.value(within: testWaitLimit, "the first download").isReady)
            try await Self.expectWhole(store, count: 1000)
        }
    }
}
