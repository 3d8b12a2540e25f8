import Foundation
import NIOConcurrencyHelpers
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

/// The engine's entry points for `BGAppRefreshTask` and `BGProcessingTask`: the work within a deadline on the
/// injected clock, and a clean stop when it passes.
@Suite("Background runs")
struct BackgroundRunTests {
    static let roster = ReferenceSet(collection: "guests", scope: "gala")

    /// Pushes to the in-memory server, guests from a reference server; pushes hang, until cancelled, while `hangs`.
    final class Network: ForwardingTransport, @unchecked Sendable {
        let inner: any SyncTransport
        let roster: ReferenceServer
        let hangs = NIOLockedValueBox(false)
        /// One element for each push that hangs.
        let hanging: AsyncStream<Void>
        private let hung: AsyncStream<Void>.Continuation

        init(server: InMemoryServer, roster: ReferenceServer) {
            inner = InMemoryTransport(server: server)
            self.roster = roster
            (hanging, hung) = AsyncStream.makeStream(of: Void.self)
        }

        /// Waits until a push hangs.
        func awaitHangingPush() async throws {
            let hanging = self.hanging
            try await bounded("a push hanging") {
                for await _ in hanging { break }
            }
        }

        func push(_ request: PushRequest) async throws -> PushResponse {
            if hangs.withLockedValue({ $0 }) {
                hung.yield()
                let (never, _) = AsyncStream.makeStream(of: Void.self)
                for await _ in never {}
                throw CancellationError()
            }
            return try await inner.push(request)
        }

        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            collection == "guests"
                ? try await roster.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
                : try await inner.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
        }

        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            try await roster.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }
    }

    func withDevice<T>(_ body: (SyncEngine, Network, ManualClock, InMemoryServer) async throws -> T) async throws -> T {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let roster = ReferenceServer()
            for index in 0..<5 { roster.put("g\(index)", ["name": .string("Guest \(index)"), "event_id": "gala"], scope: "gala") }
            let network = Network(server: server, roster: roster)
            let clock = ManualClock()
            let engine = SyncEngine(
                store: store, transport: network,
                configuration: SyncConfiguration(deviceId: "dev-bg", retryDelays: [], deliversAfterSave: false), clock: clock)
            return try await body(engine, network, clock, server)
        }
    }

    @Test("an app refresh delivers the outbox and refreshes the sets already on the device, within its budget")
    func refresh() async throws {
        try await withDevice { engine, network, _, server in
            for id in ["a", "b", "c"] { try await engine.save(note(id)) }
            let skipped = await engine.backgroundRefresh(budget: .seconds(25), sets: [Self.roster])
            #expect(skipped.finished && skipped.isOnline)
            #expect(skipped.sync?.synced == 3)
            // Not downloaded yet: an app refresh does not start a whole download.
            #expect(skipped.updatedSets.isEmpty)
            #expect(await server.applied.map(\.mutation.recordId) == ["a", "b", "c"])

            let processed = await engine.backgroundProcessing(budget: .seconds(600), sets: [Self.roster])
            #expect(processed.finished)
            #expect(processed.updatedSets == [Self.roster])
            let reference = ReferenceData(store: engine.store, transport: network)
            #expect(try await reference.state(collection: "guests", scope: "gala").isReady)

            network.roster.put("g9", ["name": "Walk-in", "event_id": "gala"], scope: "gala")
            let refreshed = await engine.backgroundRefresh(budget: .seconds(25), sets: [Self.roster])
            #expect(refreshed.updatedSets == [Self.roster])
            #expect(try await reference.lookup(collection: "guests", scope: "gala", recordId: "g9") != .notFound)
        }
    }

    @Test("past the deadline the run stops cleanly: the push ends unanswered, its records stay queued and go next time")
    func deadline() async throws {
        try await withDevice { engine, network, clock, server in
            for id in ["a", "b"] { try await engine.save(note(id)) }
            network.hangs.withLockedValue { $0 = true }
            var sleeps = clock.sleeps.makeAsyncIterator()
            let run = Task { await engine.backgroundRefresh(budget: .seconds(25), sets: [Self.roster]) }
            #expect(await sleeps.next() == .seconds(25))
            // The deadline passes while the push is out.
            try await network.awaitHangingPush()
            clock.advance(by: .seconds(25))
            let stopped = try await run.value(within: testWaitLimit, "the run stopping at its deadline")
            #expect(!stopped.finished)
            #expect(stopped.isOnline)
            #expect(stopped.sync == nil)
            #expect(stopped.errors == ["stopped at the deadline"])
            #expect(try await engine.store.counts() == RecordCounts(pending: 2))
            #expect(await server.applied.isEmpty)

            network.hangs.withLockedValue { $0 = false }
            let next = await engine.backgroundRefresh(budget: .seconds(25))
            #expect(next.finished)
            #expect(next.sync?.synced == 2)
            #expect(await server.applied.map(\.mutation.recordId) == ["a", "b"])
        }
    }

    @Test("the task's cancellation (a BGTask's expiration) stops the run as the deadline does")
    func expiration() async throws {
        try await withDevice { engine, network, clock, _ in
            try await engine.save(note("a"))
            network.hangs.withLockedValue { $0 = true }
            var sleeps = clock.sleeps.makeAsyncIterator()
            let run = Task { await engine.backgroundProcessing(budget: .seconds(600)) }
            _ = await sleeps.next()
            try await network.awaitHangingPush()
            run.cancel()
            let stopped = try await run.value(within: testWaitLimit, "the run stopping when cancelled")
            #expect(!stopped.finished)
            #expect(try await engine.store.counts().pending == 1)
        }
    }

    @Test("offline, the run ends at once and says so; nothing is sent")
    func offline() async throws {
        try await withStore { store, _ in
            let transport = InMemoryTransport(server: InMemoryServer())
            transport.isOnline = false
            let engine = SyncEngine(
                store: store, transport: transport, configuration: SyncConfiguration(deviceId: "dev-bg", retryDelays: []),
                clock: ManualClock())
            try await engine.save(note("a"))
            let run = await engine.backgroundRefresh(budget: .seconds(25))
            #expect(run.finished && !run.isOnline && run.sync == nil)
            #expect(try await store.counts().pending == 1)
        }
    }
}
