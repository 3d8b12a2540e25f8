import Foundation
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// A transport that changes how snapshot pages are served and forwards the rest to a roster.
protocol RosterDouble: SyncTransport {
    var roster: ReferenceServer { get }
}

extension RosterDouble {
    func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        try await roster.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
    }

    func push(_ request: PushRequest) async throws -> PushResponse { try await roster.push(request) }
    func health() async throws -> HealthResponse { try await roster.health() }
}

/// The download's pipeline: asked for pages ahead of the store, it still stops when told to, and nothing of it
/// outlives the call.
@Suite("Roster download pipeline", .timeLimit(.minutes(5)))
struct DownloadPipelineTests {
    /// Serves a roster's snapshot pages, holding every request from number `holdFrom` (0-based) until its task
    /// is cancelled; counts the requests, and the ones still running.
    final class HeldServer: RosterDouble, @unchecked Sendable {
        let roster: ReferenceServer
        let holdFrom: Int
        /// One element for each request held, once it is.
        let holds: AsyncStream<Void>
        private let holding: AsyncStream<Void>.Continuation
        private let lock = NSLock()
        private var calls = 0
        private var running = 0
        private var heldContinuations: [CheckedContinuation<Void, Never>] = []

        init(roster: ReferenceServer, holdFrom: Int) {
            self.roster = roster
            self.holdFrom = holdFrom
            (holds, holding) = AsyncStream.makeStream()
        }

        var requests: Int { lock.withLock { calls } }
        var inFlight: Int { lock.withLock { running } }
        var held: Int { lock.withLock { heldContinuations.count } }

        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            let call = lock.withLock {
                calls += 1
                running += 1
                return calls - 1
            }
            defer { lock.withLock { running -= 1 } }
            if call >= holdFrom {
                // Held until cancelled: the continuation is resumed by the cancellation handler.
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let cancelled = lock.withLock {
                            heldContinuations.append(continuation)
                            return Task.isCancelled
                        }
                        if cancelled { release() } else { holding.yield() }
                    }
                } onCancel: {
                    release()
                }
                throw CancellationError()
            }
            return try await roster.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }

        private func release() {
            let waiting = lock.withLock {
                let waiting = heldContinuations
                heldContinuations = []
                return waiting
            }
            for continuation in waiting { continuation.resume() }
        }
    }

    @Test("cancelled while a page is asked for, it stops: no page asked for after, the stored ones kept, a resume finishes")
    func cancelled() async throws {
        try await withStore { store, _ in
            let roster = ReferenceDataTests.roster(1000)
            let held = HeldServer(roster: roster, holdFrom: 4)
            let data = ReferenceData(store: store, transport: held, pageSize: 100)
            let download = Task { try await data.download(collection: "guests", scope: "ev-1") }
            // Given the fifth request held, when the download is cancelled,
            var holds = held.holds.makeAsyncIterator()
            await holds.next()
            download.cancel()
            // then it throws, and has ended every request it made;
            await #expect(throws: CancellationError.self) {
                try await download.value(within: testWaitLimit, "the cancelled download")
            }
            #expect(held.inFlight == 0)
            #expect(held.requests == 5)
            // the pages received before are stored (some, or all four), and it resumes from them to the end.
            guard case .incomplete(let stored, total: 1000) = try await data.state(collection: "guests", scope: "ev-1") else {
                Issue.record("not incomplete after the cancellation")
                return
            }
            #expect(stored <= 400 && stored % 100 == 0)
            roster.failSnapshots(fromCall: nil)
            let resumed = ReferenceData(store: store, transport: roster, pageSize: 100)
            #expect(try await resumed.download(collection: "guests", scope: "ev-1").isReady)
            #expect(roster.snapshotRequests == (1000 - stored) / 100)
            for id in ["g00000", "g00399", "g00400", "g00999"] {
                guard case .found = try await resumed.lookup(collection: "guests", scope: "ev-1", recordId: id) else {
                    Issue.record("\(id) missing")
                    continue
                }
            }
        }
    }

    /// Serves a roster whose third page repeats an id of the first: the store refuses that page.
    struct RepeatingServer: RosterDouble {
        let roster: ReferenceServer
        let counter = Counter()

        /// Counts the requests, and the ones still running.
        final class Counter: @unchecked Sendable {
            private let lock = NSLock()
            private var value = 0
            private var running = 0
            func next() -> Int {
                lock.withLock {
                    value += 1; running += 1; return value - 1
                }
            }
            func end() { lock.withLock { running -= 1 } }
            var count: Int { lock.withLock { value } }
            var inFlight: Int { lock.withLock { running } }
        }

        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            let call = counter.next()
            defer { counter.end() }
            var page = try await roster.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
            if call == 2 { page.records[0].recordId = "g00000" }
            return page
        }
    }

    @Test("a page the store refuses ends the download there: nothing after it stored, no page asked for after the call")
    func refusedPage() async throws {
        try await withStore { store, _ in
            let server = RepeatingServer(roster: ReferenceDataTests.roster(2000))
            let data = ReferenceData(store: store, transport: server, pageSize: 100)
            await #expect(throws: ClientError.self) { try await data.download(collection: "guests", scope: "ev-1") }
            let state = try await data.state(collection: "guests", scope: "ev-1")
            #expect(state == .incomplete(stored: 200, total: 2000))
            // Pages are asked for at most a few ahead of the store, and every request has ended once the call has
            // returned (the pipeline awaits each task it started before it returns).
            #expect(server.counter.count <= 3 + ReferenceData.lookahead + 1)
            #expect(server.counter.inFlight == 0)
        }
    }
}
