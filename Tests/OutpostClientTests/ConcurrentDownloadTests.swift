import Foundation
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// Two downloads of one set at once: in one process the second waits for the first; across processes (two stores
/// on one file) each page is stored only onto the continuation it was asked with.
@Suite("Concurrent downloads of a set")
struct ConcurrentDownloadTests {
    /// Serves a roster's snapshot pages, holding every request from number `holdFrom` (0-based) until opened (or
    /// failed), and failing every request from number `failFrom` on as the network would.
    final class GatedServer: RosterDouble, @unchecked Sendable {
        let roster: ReferenceServer
        private let lock = NSLock()
        private let holdFrom: Int?
        private let failFrom: Int?
        private var calls = 0
        private var isOpen = false
        private var waiting: [CheckedContinuation<Void, any Error>] = []

        init(roster: ReferenceServer, holdFrom: Int? = nil, failFrom: Int? = nil) {
            self.roster = roster
            self.holdFrom = holdFrom
            self.failFrom = failFrom
        }

        var requests: Int { lock.withLock { calls } }
        var held: Int { lock.withLock { waiting.count } }

        /// Lets the requests held go on, and every request after them.
        func open() { release(with: nil) }

        /// Fails the requests held as the network would; every request after them goes on.
        func failHeld() { release(with: TransportError(kind: .network, message: "connection lost")) }

        private func release(with error: (any Error)?) {
            let held = lock.withLock {
                isOpen = true
                defer { waiting = [] }
                return waiting
            }
            for continuation in held {
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
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    let passes = lock.withLock {
                        if !isOpen { waiting.append(continuation) }
                        return isOpen
                    }
                    if passes { continuation.resume() }
                }
            }
            return try await roster.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }
    }

    /// Set once the first page of a download is stored.
    final class Flag: @unchecked Sendable {
        private let lock = NSLock()
        private var value = false
        func set() { lock.withLock { value = true } }
        var isSet: Bool { lock.withLock { value } }
    }

    /// Starts a download through `transport` that stores its first page and is then held; returns once that page
    /// is stored.
    static func heldDownload(_ store: LocalStore, _ transport: GatedServer) async -> Task<ReferenceState, any Error> {
        let firstStored = Flag()
        let data = ReferenceData(store: store, transport: transport, pageSize: 100)
        let download = Task { try await data.download(collection: "guests", scope: "ev-1") { _ in firstStored.set() } }
        while !firstStored.isSet || transport.held == 0 { await Task.yield() }
        return download
    }

    /// Every guest of a roster of `count` found once, and the set's count right.
    static func expectWhole(_ store: LocalStore, count: Int) async throws {
        let data = ReferenceData(store: store, transport: ReferenceServer())
        #expect(try await data.state(collection: "guests", scope: "ev-1").isReady)
        let rows = try await store.queue.read { db in
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

    @Test("in one process, a second download of a set waits for the first, then returns it ready without asking for a page", .timeLimit(.minutes(5)))
    func secondWaits() async throws {
        try await Self.withTwoDownloads { store, server, first, second in
            server.open()
            #expect(try await first.value.isReady)
            #expect(try await second.value.isReady)
            // Ten pages, each asked for once, all by the first.
            #expect(server.requests == 10)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    @Test("in one process, a second download waiting for the first stops at once when cancelled; the first goes on", .timeLimit(.minutes(5)))
    func waitingCancelled() async throws {
        try await Self.withTwoDownloads { store, server, first, second in
            second.cancel()
            // Given the first still held, the second throws, and no longer waits.
            await #expect(throws: CancellationError.self) { try await second.value }
            #expect(store.downloads.waiting == 0)
            server.open()
            #expect(try await first.value.isReady)
            #expect(server.requests == 10)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    @Test("in one process, when the first download fails, the one waiting for it resumes from its pages and completes", .timeLimit(.minutes(5)))
    func waitingResumesAfterFailure() async throws {
        try await Self.withTwoDownloads { store, server, first, second in
            server.failHeld()
            await #expect(throws: TransportError.self) { try await first.value }
            #expect(try await second.value.isReady)
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
            let second = Task {
                try await ReferenceData(store: store, transport: server, pageSize: 100).download(collection: "guests", scope: "ev-1")
            }
            while store.downloads.waiting == 0 { await Task.yield() }
            try await body(store, server, first, second)
        }
    }

    @Test("across processes, a download another one completed meanwhile stores nothing more and returns the set ready", .timeLimit(.minutes(5)))
    func overtakenAndCompleted() async throws {
        try await withStore { store, url in
            let roster = ReferenceDataTests.roster(1000)
            let server = GatedServer(roster: roster, holdFrom: 1)
            let first = await Self.heldDownload(store, server)
            // Another process resumes the set from the first one's page and completes it.
            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url))
            #expect(try await ReferenceData(store: other, transport: roster, pageSize: 100)
                .download(collection: "guests", scope: "ev-1").isReady)
            server.open()
            #expect(try await first.value.isReady)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    @Test("across processes, a download another one moved past and left incomplete stops with busy; the next one finishes the set", .timeLimit(.minutes(5)))
    func overtakenAndIncomplete() async throws {
        try await withStore { store, url in
            let roster = ReferenceDataTests.roster(1000)
            let server = GatedServer(roster: roster, holdFrom: 1)
            let first = await Self.heldDownload(store, server)
            // Another process stores two more pages, then loses the network.
            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url))
            let failing = GatedServer(roster: roster, failFrom: 2)
            await #expect(throws: TransportError.self) {
                try await ReferenceData(store: other, transport: failing, pageSize: 100).download(collection: "guests", scope: "ev-1")
            }
            #expect(try await ReferenceData(store: other, transport: roster).state(collection: "guests", scope: "ev-1")
                == .incomplete(stored: 300, total: 1000))
            server.open()
            do {
                _ = try await first.value
                Issue.record("the overtaken download returned")
            } catch let error as ClientError {
                #expect(error.code == .busy)
            }
            // Nothing of the overtaken download was stored over the other's pages.
            #expect(try await ReferenceData(store: store, transport: roster).state(collection: "guests", scope: "ev-1")
                == .incomplete(stored: 300, total: 1000))
            #expect(try await ReferenceData(store: store, transport: roster, pageSize: 100)
                .download(collection: "guests", scope: "ev-1").isReady)
            try await Self.expectWhole(store, count: 1000)
        }
    }

    @Test("across processes, two fresh downloads at once: the later first page is refused, not stored over the other's", .timeLimit(.minutes(5)))
    func freshDownloadsAtOnce() async throws {
        try await withStore { store, url in
            let roster = ReferenceDataTests.roster(1000)
            // Another process starts first: it finds nothing stored, and its first page is on the way.
            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url))
            let late = GatedServer(roster: roster, holdFrom: 0)
            let lateDownload = Task {
                try await ReferenceData(store: other, transport: late, pageSize: 100).download(collection: "guests", scope: "ev-1")
            }
            while late.held == 0 { await Task.yield() }
            // Meanwhile this one stores its first page.
            let server = GatedServer(roster: roster, holdFrom: 1)
            let first = await Self.heldDownload(store, server)
            late.open()
            do {
                _ = try await lateDownload.value
                Issue.record("the later download returned")
            } catch let error as ClientError {
                #expect(error.code == .busy)
            }
            #expect(try await ReferenceData(store: store, transport: roster).state(collection: "guests", scope: "ev-1")
                == .incomplete(stored: 100, total: 1000))
            server.open()
            #expect(try await first.value.isReady)
            try await Self.expectWhole(store, count: 1000)
        }
    }
}
