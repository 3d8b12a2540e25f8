import Clocks
import Foundation
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

@Suite("Sync health on the device", .timeLimit(.minutes(5)))
struct SyncHealthTests {
    func engine(
        _ store: LocalStore, transport: any SyncTransport, now: ManualNow = ManualNow(),
        clock: any Clock<Duration> = TestClock<Duration>(), escalation: EscalationPolicy = EscalationPolicy(retryDelays: [])
    ) -> SyncEngine {
        SyncEngine(
            store: store, transport: transport,
            configuration: SyncConfiguration(
                deviceId: "phone-1", retryDelays: [], appVersion: "test/1", escalation: escalation, deliversAfterSave: false),
            clock: clock, now: now.closure)
    }

    /// An engine over an in-memory server, offline, with a clock the test moves.
    func offline(_ store: LocalStore) -> (InMemoryServer, InMemoryTransport, ManualNow, SyncEngine) {
        let server = InMemoryServer()
        let transport = InMemoryTransport(server: server)
        transport.isOnline = false
        let now = ManualNow()
        return (server, transport, now, engine(store, transport: transport, now: now))
    }

    @Test("every sync ends with a heartbeat: device, event, counts, roster fetch and version, never a payload")
    func heartbeatOnSync() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let engine = engine(store, transport: InMemoryTransport(server: server))
            try await store.setSetting(LocalStore.currentEventSetting, "gala")
            await engine.setOnline(true)
            try await engine.save(note("n1", ["secret": "do not send"]))
            _ = try await engine.sync()
            try await bounded("the sync's heartbeat") { await engine.awaitHeartbeat(upTo: .seconds(60)) }
            let beat = try #require(await server.heartbeats.last)
            #expect(beat.deviceId == "phone-1")
            #expect(beat.event == "gala")
            #expect(beat.pendingCount == 0 && beat.failedCount == 0)
            #expect(beat.appVersion == "test/1")
            #expect(beat.lastRosterFetch == nil)
            #expect(!String(decoding: try JSONEncoder().encode(beat), as: UTF8.self).contains("do not send"))
        }
    }

    @Test("a record the server refused is reported as refused, with its reason; one waiting too long as persistent")
    func refusalsReportedAsSuch() async throws {
        try await withStore { store, _ in
            // Given a refused record and, a day later, one that never reached the server.
            let server = InMemoryServer(rejecting: { mutation in
                mutation.recordId == "bad" ? .init(code: .guestCancelled, message: "guest bad's registration is cancelled") : nil
            })
            let transport = InMemoryTransport(server: server)
            let now = ManualNow()
            let engine = engine(store, transport: transport, now: now)
            try await engine.save(note("bad"))
            _ = try await engine.sync()
            transport.isOnline = false
            try await engine.save(note("late"))
            _ = try await engine.sync()
            now.advance(seconds: 25 * 3600)
            transport.isOnline = true

            // When the device checks.
            #expect(try await engine.checkPersistentFailures().map(\.recordId) == ["late"])

            // Then the report says which is which; the refusal's reason is the server's, with no prefix.
            let failures = try #require(await server.failureReports.first).failures
            let byRecord = Dictionary(uniqueKeysWithValues: failures.map { ($0.recordId, $0) })
            #expect(byRecord["late"]?.kind == .persistent)
            #expect(byRecord["bad"]?.kind == .rejected)
            #expect(byRecord["bad"]?.lastError == "guest bad's registration is cancelled")
        }
    }

    @Test("more persistent failures than one report may carry go in several reports of at most 500")
    func failureReportBatches() async throws {
        try await withStore { store, _ in
            let (server, transport, now, engine) = offline(store)
            for index in 0..<1001 { try await engine.save(note(String(format: "n%04d", index))) }
            _ = try await engine.sync()
            now.advance(seconds: 25 * 3600)
            transport.isOnline = true
            #expect(try await engine.checkPersistentFailures().count == 1001)
            let reports = await server.failureReports
            #expect(reports.map(\.failures.count) == [500, 500, 1])
            #expect(Set(reports.flatMap { $0.failures.map(\.recordId) }).count == 1001)
        }
    }

    @Test("records failing for over 24 hours raise a notice that cannot be dismissed, are reported once online, and clear when they sync")
    func persistentFailureNotice() async throws {
        try await withStore { store, _ in
            let (server, transport, now, engine) = offline(store)
            try await engine.save(note("n1"))
            try await engine.save(note("n2"))
            _ = try await engine.sync()
            #expect(await engine.status.failedCount == 2)

            now.advance(seconds: 23 * 3600)
            #expect(try await engine.checkPersistentFailures().isEmpty)
            #expect(await engine.status.persistentFailureNotice == nil)

            now.advance(seconds: 2 * 3600)
            let failures = try await engine.checkPersistentFailures()
            #expect(failures.map(\.recordId) == ["n1", "n2"])
            #expect(failures.allSatisfy { $0.lastError == "The server could not be reached" })
            let notice = try #require(await engine.status.persistentFailureNotice)
            #expect(notice.message == "2 records have not synced for over 24 hours")
            #expect(!notice.isDismissible)
            let refusal = await #expect(throws: ClientError.self) { try await engine.dismissPersistentFailureNotice() }
            #expect(refusal?.code == .notDismissible)
            #expect(await server.failureReports.isEmpty)

            // Online again: the check reports them (ids, times and reasons only).
            transport.isOnline = true
            _ = try await engine.checkPersistentFailures()
            let report = try #require(await server.failureReports.first)
            #expect(report.deviceId == "phone-1")
            #expect(report.failures.map(\.recordId) == ["n1", "n2"])

            // "Retry sync" delivers them, and the notice goes.
            guard case .finished(let summary) = try await engine.retryPersistentFailures() else {
                Issue.record("the retry did not run")
                return
            }
            #expect(summary.synced == 2)
            #expect(await engine.status.persistentFailureNotice == nil)
        }
    }

    @Test("a retry shows a busy state, ignores a second press, and on failure keeps the notice with a short error")
    func retryBusyState() async throws {
        try await withStore { store, _ in
            let gate = GatedTransport(inner: InMemoryTransport(server: InMemoryServer()))
            let now = ManualNow()
            let engine = engine(store, transport: gate, now: now)
            gate.memory.isOnline = false
            try await engine.save(note("n1"))
            _ = try await engine.sync()
            now.advance(seconds: 25 * 3600)
            try await engine.checkPersistentFailures()
            // The network stays down: the retry fails.
            gate.close()

            var updates = await engine.statusUpdates().makeAsyncIterator()
            let first = Task { try await engine.retryPersistentFailures() }
            while let status = await updates.next() {
                let retrying = status.persistentFailureNotice.map(\.isRetrying) ?? false
                if retrying { break }
            }
            #expect(try await engine.retryPersistentFailures() == .alreadyRunning)
            await gate.open()
            guard case .finished = try await first.value(within: testWaitLimit, "the first press") else {
                Issue.record("the first press did not run")
                return
            }
            let notice = try #require(await engine.status.persistentFailureNotice)
            #expect(!notice.isRetrying)
            #expect(notice.retryError == "Retry failed: The server could not be reached")
        }
    }

    @Test("reports are retried with backoff; with escalation off in the SDK, the notice stays and nothing is sent")
    func reportBackoffAndSwitch() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let inner = InMemoryTransport(server: server)
            let transport = FlakyReports(inner: inner, failures: 2)
            let clock = ManualClock()
            let now = ManualNow()
            let engine = engine(
                store, transport: transport, now: now, clock: clock,
                escalation: EscalationPolicy(retryDelays: [.seconds(1), .seconds(2), .seconds(4)]))
            inner.isOnline = false
            try await engine.save(note("n1"))
            _ = try await engine.sync()
            inner.isOnline = true
            now.advance(seconds: 25 * 3600)
            let check = Task { try await engine.checkPersistentFailures() }
            var sleeps = clock.sleeps.makeAsyncIterator()
            #expect(await sleeps.next() == .seconds(1))
            clock.advance(by: .seconds(1))
            #expect(await sleeps.next() == .seconds(2))
            clock.advance(by: .seconds(2))
            _ = try await check.value(within: testWaitLimit, "the check, its reports retried")
            #expect(await server.failureReports.count == 1)

            let quiet = self.engine(
                store, transport: InMemoryTransport(server: server), now: now,
                escalation: EscalationPolicy(reportsToServer: false))
            _ = try await quiet.checkPersistentFailures()
            #expect(await quiet.status.persistentFailureNotice?.count == 1)
            #expect(await server.failureReports.count == 1)
        }
    }
}

/// Passes pushes through until `close()`; then holds them until `open()`, or until their task is cancelled.
final class GatedTransport: ForwardingTransport, @unchecked Sendable {
    let memory: InMemoryTransport
    var inner: any SyncTransport { memory }
    private let lock = NSLock()
    private var isOpen = true
    private var waiting: [UInt64: CheckedContinuation<Void, any Error>] = [:]
    private var lastId: UInt64 = 0

    init(inner: InMemoryTransport) {
        self.memory = inner
    }

    func close() {
        lock.withLock { isOpen = false }
    }

    func open() async {
        let resumed = lock.withLock { () -> [CheckedContinuation<Void, any Error>] in
            isOpen = true
            defer { waiting = [:] }
            return Array(waiting.values)
        }
        for continuation in resumed { continuation.resume() }
    }

    func push(_ request: PushRequest) async throws -> PushResponse {
        let id = lock.withLock {
            lastId += 1
            return lastId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // In one step with the cancellation handler's: a push cancelled before it is held is never held.
                let outcome = lock.withLock { () -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if isOpen { return .success(()) }
                    waiting[id] = continuation
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            lock.withLock { waiting.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
        return try await inner.push(request)
    }
}

/// Fails the first `failures` failure reports with a 503.
final class FlakyReports: ForwardingTransport, @unchecked Sendable {
    let memory: InMemoryTransport
    var inner: any SyncTransport { memory }
    private let lock = NSLock()
    private var failures: Int

    init(inner: InMemoryTransport, failures: Int) {
        self.memory = inner
        self.failures = failures
    }

    func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        let fail = lock.withLock { () -> Bool in
            failures -= 1
            return failures >= 0
        }
        if fail { throw TransportError(kind: .server, status: 503, message: "unavailable") }
        return try await inner.monitorReportFailures(report)
    }
}
