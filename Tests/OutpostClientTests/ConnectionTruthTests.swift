import Clocks
import Foundation
import NIOConcurrencyHelpers
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

/// What the engine tells of the connection is what it found: a save before the connection is known is settled
/// by the probe running then, a server answering errors is reachable with trouble, and an upload cut while the
/// server answers is a broken connection, never "offline".
@Suite("Connection truth")
struct ConnectionTruthTests {
    /// Passes calls to an in-memory server, except what the test scripts: a probe held until released, and
    /// errors for the probe or the push.
    final class Scripted: ForwardingTransport, Sendable {
        let inner: any SyncTransport
        private let state = NIOLockedValueBox(State())
        private let released: AsyncStream<Void>
        private let release: AsyncStream<Void>.Continuation
        private let pushReleased: AsyncStream<Void>
        private let releasePushes: AsyncStream<Void>.Continuation
        /// One element for each push that reached the transport.
        let pushes: AsyncStream<Void>
        private let pushed: AsyncStream<Void>.Continuation

        struct State {
            var holdsProbe = false
            var holdsPush = false
            var healthError: TransportError?
            var pushError: TransportError?
            /// The server takes the push, and its answer is lost on the way back.
            var losesAnswer = false
        }

        init(_ inner: InMemoryTransport, holdingProbe: Bool = false) {
            self.inner = inner
            (released, release) = AsyncStream.makeStream(of: Void.self)
            (pushReleased, releasePushes) = AsyncStream.makeStream(of: Void.self)
            (pushes, pushed) = AsyncStream.makeStream(of: Void.self)
            state.withLockedValue { $0.holdsProbe = holdingProbe }
        }

        func script(_ change: (inout State) -> Void) { state.withLockedValue(change) }

        /// Lets the held probe answer.
        func releaseProbe() { release.finish() }

        /// Lets held pushes go on to the server.
        func releasePush() { releasePushes.finish() }

        func health() async throws -> HealthResponse {
            if state.withLockedValue({ $0.holdsProbe }) {
                for await _ in released {}
            }
            if let error = state.withLockedValue({ $0.healthError }) { throw error }
            return try await inner.health()
        }

        func push(_ request: PushRequest) async throws -> PushResponse {
            pushed.yield()
            if state.withLockedValue({ $0.holdsPush }) {
                for await _ in pushReleased {}
            }
            if let error = state.withLockedValue({ $0.pushError }) { throw error }
            let response = try await inner.push(request)
            if state.withLockedValue({ $0.losesAnswer }) { throw TransportError.unreachable() }
            return response
        }
    }

    static let serverError = TransportError(kind: .server, status: 500, message: "server error")

    func engine(_ store: LocalStore, _ transport: any SyncTransport) -> SyncEngine {
        SyncEngine(
            store: store, transport: transport,
            configuration: .init(deviceId: "d", retryDelays: [], deliversAfterSave: false), clock: TestClock<Duration>())
    }

    @Test(
        "a save before the connection is known is answered at once as made offline; the probe it started settles it online, its queued write included"
    )
    func settledOnline() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let transport = Scripted(InMemoryTransport(server: server), holdingProbe: true)
            let engine = engine(store, transport)
            let saved = try await bounded("a save while the probe is held") { try await engine.save(note("a")) }
            #expect(saved.isOfflineEntry && saved.fields[LocalRecord.offlineEntryField] == true)
            #expect(await engine.status.connection == .unknown)
            transport.releaseProbe()
            #expect(try await bounded("the save's probe") { await engine.awaitConnection(upTo: testWaitLimit) })
            let settled = try #require(try await store.record(collection: "notes", recordId: "a"))
            #expect(!settled.isOfflineEntry && settled.fields[LocalRecord.offlineEntryField] == nil)
            #expect(try await engine.sync().synced == 1)
            let sent = try #require(await server.applied.first?.mutation)
            #expect(sent.fields[LocalRecord.offlineEntryField] == nil)
        }
    }

    @Test("a save before the connection is known stays made offline when the probe finds no server, and goes so")
    func settledOffline() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let inner = InMemoryTransport(server: server)
            inner.isOnline = false
            let transport = Scripted(inner, holdingProbe: true)
            let engine = engine(store, transport)
            try await engine.save(note("a"))
            transport.releaseProbe()
            #expect(try await bounded("the save's probe") { await engine.awaitConnection(upTo: testWaitLimit) })
            #expect(await engine.status.connection == .offline)
            #expect(try await store.record(collection: "notes", recordId: "a")?.isOfflineEntry == true)
            inner.isOnline = true
            #expect(try await engine.sync().synced == 1)
            #expect(await server.applied.first?.mutation.fields[LocalRecord.offlineEntryField] == true)
        }
    }

    /// Saves `a` while the save's probe is held, and starts a sync of it through a transport scripted by
    /// `script`; returns once its push has reached the transport.
    func saveAndSync(
        _ store: LocalStore, _ script: (inout Scripted.State) -> Void
    ) async throws -> (InMemoryServer, Scripted, SyncEngine, Task<SyncSummary, any Error>) {
        let server = InMemoryServer()
        let transport = Scripted(InMemoryTransport(server: server), holdingProbe: true)
        transport.script(script)
        let engine = engine(store, transport)
        try await engine.save(note("a"))
        let sync = Task { try await engine.sync() }
        let pushes = transport.pushes
        try await bounded("the push") {
            for await _ in pushes { break }
        }
        return (server, transport, engine, sync)
    }

    @Test("a probe answering while the push of a save made before it is out leaves that save as sent: made offline")
    func settledAfterThePush() async throws {
        try await withStore { store, _ in
            let (server, transport, engine, sync) = try await saveAndSync(store) { $0.holdsPush = true }
            transport.releaseProbe()
            #expect(try await bounded("the save's probe") { await engine.awaitConnection(upTo: testWaitLimit) })
            #expect(try await store.record(collection: "notes", recordId: "a")?.isOfflineEntry == true)
            transport.releasePush()
            #expect(try await bounded("the sync") { try await sync.value }.synced == 1)
            // The server has it as sent, made offline, and so does the device.
            #expect(await server.applied.first?.mutation.fields[LocalRecord.offlineEntryField] == true)
            #expect(try await store.record(collection: "notes", recordId: "a")?.isOfflineEntry == true)
        }
    }

    @Test("a save made offline whose push the server took and whose answer was lost goes again as it was sent, and is one")
    func settledAfterALostAnswer() async throws {
        try await withStore { store, _ in
            // The push goes while the save's probe is held; its answer is lost, and the engine asks the server
            // whether it is there. Both probes answer once the push has failed.
            let (server, transport, engine, sync) = try await saveAndSync(store) { $0.losesAnswer = true }
            transport.releaseProbe()
            #expect(try await bounded("the sync") { try await sync.value }.failed == 1)
            #expect(try await bounded("the save's probe") { await engine.awaitConnection(upTo: testWaitLimit) })
            #expect(try await store.record(collection: "notes", recordId: "a")?.isOfflineEntry == true)
            transport.script { $0.losesAnswer = false }
            let summary = try await engine.sync()
            #expect(summary.synced == 1 && summary.refused == 0, "\(summary.reasons)")
            #expect(await server.applied.count == 1)
            #expect(await server.applied.first?.mutation.fields[LocalRecord.offlineEntryField] == true)
        }
    }

    @Test("a write whose answer was lost while the device clock ran ahead goes again as sent once the clock is put right")
    func lostAnswerNotRestamped() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let transport = Scripted(InMemoryTransport(server: server))
            transport.script { $0.losesAnswer = true }
            let now = ManualNow()
            let engine = SyncEngine(
                store: store, transport: transport,
                configuration: .init(deviceId: "d", retryDelays: [], deliversAfterSave: false), clock: TestClock<Duration>(),
                now: now.closure)
            await engine.setOnline(true)
            // The device clock is three hours ahead: the server takes the write, and its answer is lost.
            now.advance(seconds: 3 * 3600)
            try await engine.save(note("a"))
            #expect(try await engine.sync().failed == 1)
            // The clock is put right; the write goes again as it was sent, and the server has it once.
            now.advance(seconds: -3 * 3600)
            transport.script { $0.losesAnswer = false }
            let summary = try await engine.sync()
            #expect(summary.synced == 1 && summary.refused == 0, "\(summary.reasons)")
            #expect(await server.applied.count == 1)
        }
    }

    @Test("a server answering 500 is reachable with trouble, not offline; the push it refuses says so, and the next one it takes clears it")
    func serverTrouble() async throws {
        try await withStore { store, _ in
            let transport = Scripted(InMemoryTransport(server: InMemoryServer()))
            transport.script {
                $0.healthError = Self.serverError
                $0.pushError = Self.serverError
            }
            let engine = engine(store, transport)
            #expect(await engine.probe())
            var status = await engine.status
            #expect(status.connection == .serverTrouble("Server error (500)"))
            #expect(status.connectionText == "Online — the server is having trouble")
            try await engine.save(note("a"))
            #expect(try await store.record(collection: "notes", recordId: "a")?.isOfflineEntry == false)
            let summary = try await engine.sync()
            #expect(summary.failed == 1 && summary.reasons == ["Server error (500)"])
            status = await engine.status
            #expect(status.isOnline && status.serverProblem == "Server error (500)")
            transport.script {
                $0.healthError = nil
                $0.pushError = nil
            }
            #expect(try await engine.sync().synced == 1)
            #expect(await engine.status.connection == .online)
        }
    }

    @Test("an upload cut while the server answers a probe is a broken connection and the device stays online; with no answer it is offline")
    func droppedUpload() async throws {
        try await withStore { store, _ in
            let inner = InMemoryTransport(server: InMemoryServer())
            let transport = Scripted(inner)
            transport.script { $0.pushError = .unreachable() }
            let engine = engine(store, transport)
            await engine.setOnline(true)
            try await engine.save(note("a"))
            var summary = try await engine.sync()
            #expect(summary.failed == 1 && summary.reasons == ["The connection to the server broke before it answered"])
            #expect(await engine.status.connection == .online)
            inner.isOnline = false
            summary = try await engine.sync()
            #expect(summary.reasons == ["The server could not be reached"])
            #expect(await engine.status.connection == .offline)
        }
    }

    @Test("a save stamped at the action's time keeps it, and never goes before the device's last write")
    func stampedAtTheAction() async throws {
        try await withStore { store, _ in
            let now = ManualNow()
            let engine = SyncEngine(
                store: store, transport: InMemoryTransport(server: InMemoryServer()),
                configuration: .init(deviceId: "d", retryDelays: [], deliversAfterSave: false), clock: TestClock<Duration>(),
                now: now.closure)
            let tapped = now.closure()
            now.advance(seconds: 1)
            let saved = try await engine.save(note("a"), at: tapped)
            #expect(saved.createdAt == Timestamp(tapped))
            let later = try await engine.save(note("b"))
            let earlier = try await engine.save(note("c"), at: tapped)
            #expect(later.createdAt > saved.createdAt && earlier.createdAt > later.createdAt)
        }
    }
}
