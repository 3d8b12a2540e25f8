import Clocks
import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

@Suite("Triggers", .timeLimit(.minutes(5)))
struct TriggerTests {
    @Test("the health probe reports the current state, then only changes")
    func healthProbe() async throws {
        let transport = InMemoryTransport(server: InMemoryServer())
        transport.isOnline = false
        let clock = ManualClock()
        let monitor = HealthProbeMonitor(transport: transport, clock: clock, interval: .seconds(5))
        var changes = monitor.changes().makeAsyncIterator()
        var sleeps = clock.sleeps.makeAsyncIterator()
        #expect(await changes.next() == false)
        // Still offline at the next probe: nothing is reported; then the server comes back.
        #expect(await sleeps.next() == .seconds(5))
        clock.advance(by: .seconds(5))
        #expect(await sleeps.next() == .seconds(5))
        transport.isOnline = true
        clock.advance(by: .seconds(5))
        #expect(await changes.next() == true)
    }

    @Test("coming back online syncs what was written offline, with no user action")
    func reconnectSyncs() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let transport = InMemoryTransport(server: server)
            transport.isOnline = false
            let engine = SyncEngine(
                store: store, transport: transport, configuration: .init(deviceId: "d", deliversAfterSave: false), clock: TestClock<Duration>())
            #expect(await engine.probe() == false)
            for id in ["a", "b"] { try await engine.save(note(id)) }
            transport.isOnline = true
            #expect(await engine.probe() == true)
            #expect(await server.applied.count == 2)
            #expect(await engine.status.pendingCount == 0)
        }
    }

    @Test("a probe before a save syncs nothing: the save is durable first, and its delivery carries the queue before it, once")
    func probeBeforeSave() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let transport = InMemoryTransport(server: server)
            transport.isOnline = false
            let engine = SyncEngine(store: store, transport: transport, configuration: .init(deviceId: "d"), clock: TestClock<Duration>())
            for id in ["a", "b"] { try await engine.save(note(id)) }
            transport.isOnline = true
            #expect(await engine.probe(syncingPending: false) == true)
            #expect(await engine.status.isOnline)
            #expect(await server.applied.isEmpty)
            #expect(await engine.status.pendingCount == 2)
            // The save returns the moment it is durable, and starts the delivery behind it.
            let saved = try await engine.save(note("c"))
            #expect(saved.syncStatus == .pending && !saved.isOfflineEntry)
            #expect(await engine.awaitDelivery(upTo: .seconds(3600)))
            #expect(try await store.record(collection: "notes", recordId: "c")?.syncStatus == .synced)
            #expect(await server.applied.map(\.mutation.recordId) == ["a", "b", "c"])
            #expect(await engine.status.pendingCount == 0)
        }
    }

    @Test("the scheduler retries on its timer while online")
    func timerRetries() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let transport = FlakyTransport(inner: InMemoryTransport(server: server), failures: 1)
            let clock = ManualClock()
            let engine = SyncEngine(
                store: store, transport: transport, configuration: .init(deviceId: "d", retryDelays: [], deliversAfterSave: false), clock: clock)
            await engine.setOnline(true)
            // A 503 leaves the record failed and queued while the device stays online.
            try await engine.save(note("a"))
            _ = try await engine.sync()
            #expect(await engine.status.failedCount == 1)
            let scheduler = SyncScheduler(engine: engine, monitor: FixedMonitor(online: true), clock: clock, retryInterval: .seconds(60))
            let run = Task { await scheduler.run() }
            var sleeps = clock.sleeps.makeAsyncIterator()
            #expect(await sleeps.next() == .seconds(60))
            #expect(await server.applied.isEmpty)
            clock.advance(by: .seconds(60))
            #expect(await sleeps.next() == .seconds(60))
            #expect(await server.applied.count == 1)
            #expect(await engine.status.failedCount == 0)
            run.cancel()
            try await run.value(within: testWaitLimit, "the scheduler, cancelled")
        }
    }

    @Test("a change of connectivity counts the store again: what another process queued shows at once")
    func connectivityCounts() async throws {
        try await withStore { store, url in
            let engine = SyncEngine(
                store: store, transport: InMemoryTransport(server: InMemoryServer()), configuration: .init(deviceId: "d", deliversAfterSave: false),
                clock: TestClock<Duration>())
            await engine.setOnline(true)
            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            try await other.write(note("a"), deviceId: "d", at: Date(), offline: true)
            #expect(await engine.status.pendingCount == 0)
            await engine.setOnline(false)
            #expect(await engine.status.pendingCount == 1)
            #expect(await engine.status.offlineIndicatorText == "1 record waiting to sync")
        }
    }

    @Test("the retry timer also finds what another process queued in the store (`device put` beside `device run`)")
    func timerFindsOtherWriters() async throws {
        try await withStore { store, url in
            let server = InMemoryServer()
            let clock = ManualClock()
            let engine = SyncEngine(
                store: store, transport: InMemoryTransport(server: server), configuration: .init(deviceId: "d", deliversAfterSave: false),
                clock: clock)
            await engine.setOnline(true)
            // The other process saved while this one was online; its own push did not get through.
            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            try await other.write(note("a"), deviceId: "d", at: Date(), offline: false)
            #expect(await engine.status.pendingCount == 0)
            let scheduler = SyncScheduler(engine: engine, monitor: FixedMonitor(online: true), clock: clock, retryInterval: .seconds(60))
            let run = Task { await scheduler.run() }
            var sleeps = clock.sleeps.makeAsyncIterator()
            #expect(await sleeps.next() == .seconds(60))
            clock.advance(by: .seconds(60))
            #expect(await sleeps.next() == .seconds(60))
            #expect(await server.applied.map(\.mutation.recordId) == ["a"])
            #expect(await engine.status.pendingCount == 0)
            run.cancel()
            try await run.value(within: testWaitLimit, "the scheduler, cancelled")
        }
    }
}

/// Fails the first `failures` pushes with a 503, then passes through.
final class FlakyTransport: ForwardingTransport, @unchecked Sendable {
    let inner: any SyncTransport
    private let lock = NSLock()
    private var failures: Int

    init(inner: any SyncTransport, failures: Int) {
        self.inner = inner
        self.failures = failures
    }

    func push(_ request: PushRequest) async throws -> PushResponse {
        let fail = lock.withLock { () -> Bool in
            failures -= 1
            return failures >= 0
        }
        if fail { throw TransportError(kind: .server, status: 503, message: "unavailable") }
        return try await inner.push(request)
    }
}

/// A monitor that reports one state and then stays silent until cancelled.
struct FixedMonitor: ConnectivityMonitor {
    var online: Bool

    func changes() -> AsyncStream<Bool> {
        AsyncStream { continuation in continuation.yield(online) }
    }
}
