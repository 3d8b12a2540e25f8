import Clocks
import Foundation
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

@Suite("Sync engine", .timeLimit(.minutes(5)))
struct SyncEngineTests {
    struct Harness {
        let store: LocalStore
        let server: InMemoryServer
        let transport: InMemoryTransport
        let clock: ManualClock
        let engine: SyncEngine
        let now: ManualNow
    }

    func withEngine(
        rejecting: @escaping @Sendable (Mutation) -> WireError.Detail? = { _ in nil },
        _ body: (Harness) async throws -> Void
    ) async throws {
        try await withStore { store, _ in
            let server = InMemoryServer(rejecting: rejecting)
            let transport = InMemoryTransport(server: server)
            let clock = ManualClock()
            let now = ManualNow()
            let engine = SyncEngine(
                store: store, transport: transport, configuration: SyncConfiguration(deviceId: "dev-1", deliversAfterSave: false), clock: clock,
                now: now.closure)
            await engine.setOnline(true)
            try await body(Harness(store: store, server: server, transport: transport, clock: clock, engine: engine, now: now))
        }
    }

    @Test("the outbox goes out in chronological order, in chunks of 50, and every record ends synced")
    func chronologicalChunks() async throws {
        try await withEngine { h in
            h.transport.isOnline = false
            await h.engine.setOnline(false)
            for i in 0..<120 { try await h.engine.save(note(String(format: "r%03d", 119 - i))) }
            h.transport.isOnline = true
            let summary = try await h.engine.sync(retrying: false)
            #expect(summary.synced == 120)
            #expect(summary.failed == 0)
            #expect(summary.chunks == 3)
            #expect(h.transport.pushCount == 3)
            let applied = await h.server.applied.map(\.mutation.clientTimestamp)
            #expect(applied == applied.sorted())
            #expect(applied.count == 120)
            #expect(try await h.store.records(.pending).isEmpty)
            #expect(await h.engine.status.pendingCount == 0)
            #expect(await h.engine.status.offlineIndicatorText == "All records synced")
        }
    }

    @Test("writes while offline succeed locally, flagged offline, and count as pending")
    func offlineWrites() async throws {
        try await withEngine { h in
            h.transport.isOnline = false
            await h.engine.setOnline(false)
            for i in 0..<3 { try await h.engine.save(note("r\(i)")) }
            let status = await h.engine.status
            #expect(status.pendingCount == 3)
            #expect(status.offlineIndicatorText == "3 records waiting to sync")
            #expect(try await h.store.records().allSatisfy(\.isOfflineEntry))
        }
    }

    @Test("an app that opens with records waiting from an earlier run sends them once the server answers, with no save")
    func resumeSendsWhatWaits() async throws {
        try await withStore { store, _ in
            // Given three records saved offline by an earlier run of the app.
            let server = InMemoryServer()
            let transport = InMemoryTransport(server: server)
            transport.isOnline = false
            let earlier = SyncEngine(
                store: store, transport: transport, configuration: SyncConfiguration(deviceId: "dev-1"), clock: ManualClock())
            for i in 0..<3 { try await earlier.save(note("r\(i)")) }
            #expect(transport.pushCount == 0)

            // When the app opens again, offline: nothing is sent, and the screen says offline.
            let engine = SyncEngine(
                store: store, transport: transport, configuration: SyncConfiguration(deviceId: "dev-1"), clock: ManualClock())
            #expect(await engine.resume() == false)
            let offline = await engine.status
            #expect(offline.isConnectionKnown && !offline.isOnline)
            #expect(await engine.status.pendingCount == 3)

            // Then opened online: the three go without a save or a sync call.
            transport.isOnline = true
            #expect(await engine.resume())
            #expect(await engine.awaitDelivery(upTo: .seconds(3600)))
            #expect(await server.applied.count == 3)
            #expect(await engine.status.pendingCount == 0)
        }
    }

    @Test("a network failure is retried after 1 s, 2 s and 4 s, then the records are marked failed")
    func backoff() async throws {
        try await withEngine { h in
            try await h.engine.save(note("r1"))
            h.transport.isOnline = false
            let sync = Task { try await h.engine.sync() }
            var sleeps = h.clock.sleeps.makeAsyncIterator()
            var observed: [Duration] = []
            for _ in 0..<3 {
                let duration = try #require(await sleeps.next())
                observed.append(duration)
                h.clock.advance(by: duration)
            }
            let summary = try await sync.value(within: testWaitLimit, "the sync after its retries")
            #expect(observed == [.seconds(1), .seconds(2), .seconds(4)])
            #expect(summary.failed == 1)
            #expect(summary.reasons == ["The server could not be reached"])
            let record = try #require(try await h.store.record(collection: "notes", recordId: "r1"))
            #expect(record.syncStatus == .failed)
            #expect(record.badge.accessibilityLabel == "Synchronization failed, will retry: The server could not be reached")
            #expect(record.lastSyncAttempt != nil)
            // The mutation is still queued, and coming back online delivers it without a user.
            #expect(try await h.store.outbox.count() == 1)
            h.transport.isOnline = true
            await h.engine.setOnline(true)
            #expect(try await h.store.record(collection: "notes", recordId: "r1")?.syncStatus == .synced)
            #expect(await h.server.applicationCounts().values.sorted() == [1])
            #expect(await h.server.applied.map(\.mutation.clientTimestamp) == [record.updatedAt])
        }
    }

    @Test("a retry of one record that cannot reach the server marks that record failed; the others keep their state")
    func retryOfOneFailsAlone() async throws {
        try await withEngine { h in
            h.transport.isOnline = false
            await h.engine.setOnline(false)
            try await h.engine.save(note("r1"))
            try await h.engine.save(note("r2"))
            let retry = Task { try await h.engine.retry(recordId: "r1") }
            var sleeps = h.clock.sleeps.makeAsyncIterator()
            for _ in 0..<3 { h.clock.advance(by: try #require(await sleeps.next())) }
            let summary = try await retry.value(within: testWaitLimit, "the retry after its waits")
            #expect(summary.failed == 1 && summary.synced == 0)
            let tried = try #require(try await h.store.record(collection: "notes", recordId: "r1"))
            #expect(tried.syncStatus == .failed)
            #expect(tried.lastSyncAttempt != nil)
            let untried = try #require(try await h.store.record(collection: "notes", recordId: "r2"))
            #expect(untried.syncStatus == .pending)
            #expect(untried.lastSyncAttempt == nil)
            #expect(try await h.store.counts() == RecordCounts(pending: 1, failed: 1, refused: 0))
        }
    }

    @Test(
        "a write the server did not take, keeping an earlier one, leaves the record synced with the server's fields; without them, the next pull starts over",
        arguments: [true, false])
    func supersededWrite(withFields: Bool) async throws {
        struct Keeping: SyncTransport {
            let withFields: Bool
            func push(_ request: PushRequest) async throws -> PushResponse {
                PushResponse(
                    results: request.mutations.map { mutation in
                        withFields
                            ? MutationResult(
                                idempotencyKey: mutation.idempotencyKey, status: .superseded, version: 3,
                                serverFields: ["n": 1, "by": "door-a"])
                            : MutationResult(
                                idempotencyKey: mutation.idempotencyKey, status: .duplicate, version: 3,
                                originalStatus: .superseded)
                    })
            }
            func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse { fatalError() }
            func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse { fatalError() }
            func health() async throws -> HealthResponse { HealthResponse(status: "ok", storage: "ok") }
        }
        try await withStore { store, _ in
            let engine = SyncEngine(
                store: store, transport: Keeping(withFields: withFields),
                configuration: .init(deviceId: "door-b", deliversAfterSave: false), clock: ManualClock())
            try await store.setSetting("pull_cursor:notes:", "c1")
            try await engine.save(note("g7", ["n": 2, "by": "door-b"]))
            let summary = try await engine.sync()
            #expect(summary.synced == 0 && summary.superseded == 1 && summary.isComplete)
            #expect(summary.description == "0 synced, 0 failed; 1 already recorded on another device first: the server keeps that one")
            let record = try #require(try await store.record(collection: "notes", recordId: "g7"))
            #expect(record.syncStatus == .synced)
            #expect(record.version == 3)
            #expect(record.fields == (withFields ? ["n": 1, "by": "door-a"] : ["n": 2, "by": "door-b"]))
            #expect(try await store.setting("pull_cursor:notes:") == (withFields ? "c1" : nil))
            #expect(try await store.outbox.count() == 0)
        }
    }

    @Test("a push no answer began for within the limit is not sent again in that sync; the connection is then not known, and no probe waits again")
    func silentServerNotRetried() async throws {
        struct Silent: SyncTransport {
            let pushes = Counter()
            let probes = Counter()
            func push(_ request: PushRequest) async throws -> PushResponse {
                pushes.increment()
                throw TransportError.notAnswering(within: .seconds(30))
            }
            func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse { fatalError() }
            func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse { fatalError() }
            func health() async throws -> HealthResponse {
                probes.increment()
                throw TransportError.notAnswering(within: .seconds(30))
            }
        }
        try await withStore { store, _ in
            let transport = Silent()
            let engine = SyncEngine(
                store: store, transport: transport, configuration: .init(deviceId: "d", deliversAfterSave: false), clock: ManualClock())
            await engine.setOnline(true)
            try await engine.save(note("r1"))
            let summary = try await engine.sync()
            #expect(transport.pushes.value == 1 && transport.probes.value == 0)
            #expect(summary.failed == 1 && summary.reasons == ["The server did not answer within 30 s"])
            #expect(await engine.status.connection == .unknown)
            #expect(try await store.record(collection: "notes", recordId: "r1")?.syncError == "The server did not answer within 30 s")
        }
    }

    @Test("a 5xx and a 408 (a body that came too slowly) are retried; another 4xx of the whole request is not")
    func serverErrors() async throws {
        struct Failing: SyncTransport {
            let status: Int
            let calls = Counter()
            func push(_ request: PushRequest) async throws -> PushResponse {
                calls.increment()
                throw TransportError(kind: .server, status: status, wire: WireError(code: .internalError, message: "boom"), message: "boom")
            }
            func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse { fatalError() }
            func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse { fatalError() }
            func health() async throws -> HealthResponse { HealthResponse(status: "ok", storage: "ok") }
        }
        for (status, expectedCalls) in [(503, 4), (408, 4), (401, 1)] {
            try await withStore { store, _ in
                let transport = Failing(status: status)
                let clock = ManualClock()
                let engine = SyncEngine(
                    store: store, transport: transport, configuration: .init(deviceId: "d", deliversAfterSave: false), clock: clock)
                try await engine.save(note("r1"))
                let sync = Task { try await engine.sync() }
                if expectedCalls > 1 {
                    var sleeps = clock.sleeps.makeAsyncIterator()
                    for _ in 0..<3 { clock.advance(by: try #require(await sleeps.next())) }
                }
                let summary = try await sync.value(within: testWaitLimit, "the sync of status \(status)")
                #expect(transport.calls.value == expectedCalls, "status \(status)")
                #expect(summary.failed == 1)
                if status == 401 {
                    // A refused token is not retried: the person signs in again.
                    #expect(summary.requiresSignIn)
                    #expect(summary.reasons.first?.contains("sign in again") == true)
                } else {
                    #expect(summary.reasons.first?.contains("\(status)") == true)
                }
            }
        }
    }

    @Test("a refused record is set aside as rejected with the reason, is not counted as waiting, and does not block the records behind it")
    func rejectionDoesNotBlock() async throws {
        try await withEngine(rejecting: { $0.recordId == "bad" ? .init(code: .invalidFields, message: "GPS signal required") : nil }) { h in
            try await h.engine.save(note("a"))
            try await h.engine.save(note("bad"))
            try await h.engine.save(note("c"))
            let summary = try await h.engine.sync()
            #expect(summary.synced == 2)
            #expect(summary.failed == 0 && summary.refused == 1)
            #expect(summary.description == "2 synced, 0 failed, 1 refused: GPS signal required")
            let bad = try #require(try await h.store.record(collection: "notes", recordId: "bad"))
            #expect(bad.syncStatus == .refused)
            #expect(bad.syncError == "GPS signal required")
            #expect(bad.syncErrorCode == "invalid_fields")
            #expect(try await h.store.counts() == RecordCounts(pending: 0, failed: 0, refused: 1))
            #expect(await h.engine.status.offlineIndicatorText == "Nothing waiting to sync; 1 record refused by the server — review them")
            #expect(try await h.store.record(collection: "notes", recordId: "c")?.syncStatus == .synced)
            // Set aside: a later sync does not resend it, a retry of that record does.
            #expect(try await h.engine.sync().synced == 0)
            // Sync all leaves it to the user; a retry of that record sends it alone, as it is.
            #expect(try await h.engine.retryAll().refused == 0)
            let retried = try await h.engine.retry(recordId: "bad")
            #expect(retried.refused == 1 && retried.synced == 0)
            await #expect(throws: ClientError.self) { _ = try await h.engine.retry(recordId: "missing") }
            // Named with its collection, the record must be in that one.
            #expect(try await h.engine.retry(collection: "notes", recordId: "bad").refused == 1)
            await #expect(throws: ClientError.self) { _ = try await h.engine.retry(collection: "guests", recordId: "bad") }
        }
    }

    @Test("a summary's reasons come most frequent first, and reasons as frequent in alphabetical order")
    func reasonsInOrder() async throws {
        let reasons = ["z1": "Zone closed", "z2": "Zone closed", "b": "Badge expired", "a": "Already used"]
        try await withEngine(rejecting: { reasons[$0.recordId].map { .init(code: .invalidFields, message: $0) } }) { h in
            for id in ["b", "z1", "a", "z2"] { try await h.engine.save(note(id)) }
            let summary = try await h.engine.sync()
            #expect(summary.refused == 4)
            #expect(summary.reasons == ["Zone closed", "Already used", "Badge expired"])
        }
    }

    /// Forwards to an in-memory transport, running `beforePush` with the push's number first. (The results of
    /// a sync's first chunk may still be being stored when its second push starts.)
    final class Observer: SyncTransport, @unchecked Sendable {
        let inner: InMemoryTransport
        var pushes = 0
        /// The record ids of every push, in order.
        var sent: [[String]] = []
        var beforePush: (Int) async throws -> Void = { _ in }
        init(inner: InMemoryTransport) { self.inner = inner }
        func push(_ request: PushRequest) async throws -> PushResponse {
            pushes += 1
            sent.append(request.mutations.map(\.recordId))
            try await beforePush(pushes)
            return try await inner.push(request)
        }
        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            try await inner.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
        }
        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            try await inner.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }
        func health() async throws -> HealthResponse { try await inner.health() }
    }

    /// An engine whose server refuses any note with `n` = -1.
    func withObservedEngine(_ body: (LocalStore, SyncEngine, Observer) async throws -> Void) async throws {
        try await withStore { store, _ in
            let server = InMemoryServer(rejecting: {
                $0.fields["n"] == .integer(-1) ? .init(code: .invalidFields, message: "n must not be negative") : nil
            })
            let observer = Observer(inner: InMemoryTransport(server: server))
            let engine = SyncEngine(
                store: store, transport: observer, configuration: SyncConfiguration(deviceId: "dev-1", deliversAfterSave: false),
                clock: TestClock<Duration>(), now: ManualNow().closure)
            try await body(store, engine, observer)
        }
    }

    @Test("a record with an entry still queued after the chunk, or set aside, is not marked synced by it")
    func stillQueuedAfterChunk() async throws {
        try await withObservedEngine { store, engine, observer in
            var seen: [String: RecordSyncStatus] = [:]
            observer.beforePush = { push in
                guard push == 3 else { return }
                // The first chunk's answers are stored while the second chunk travels: wait until b0 is
                // marked synced, then read a, whose status was written in the same transaction. However long
                // that takes: only the test's time limit ends the wait.
                while true {
                    seen["b0"] = try await store.record(collection: "notes", recordId: "b0")?.syncStatus
                    if seen["b0"] == .synced { break }
                    try Task.checkCancellation()
                    await Task.yield()
                }
                seen["a"] = try await store.record(collection: "notes", recordId: "a")?.syncStatus
            }
            // Given x's first entry refused and set aside (the first push),
            _ = try await engine.save(note("x", ["n": -1]))
            #expect(try await engine.sync().refused == 1)
            // and a queue whose first chunk holds a and 49 others, and whose second holds a again and x fixed,
            _ = try await engine.save(note("a"))
            for i in 0..<49 { _ = try await engine.save(note("b\(i)")) }
            _ = try await engine.save(note("a", ["n": 2]))
            _ = try await engine.save(note("x", ["n": 3]))
            _ = try await engine.sync()
            // then after the first chunk, a still waits for its second entry while b0 is synced;
            #expect(seen["a"] == .pending)
            #expect(seen["b0"] == .synced)
            // and at the end a is synced, and so is x: the edit resent it whole, its refused entry archived.
            #expect(try await store.record(collection: "notes", recordId: "a")?.syncStatus == .synced)
            #expect(try await store.record(collection: "notes", recordId: "x")?.syncStatus == .synced)
            #expect(try await store.record(collection: "notes", recordId: "x")?.fields["n"] == 3)
            #expect(try await store.outbox.discardedCount() == 1)
        }
    }

    @Test("a network failure while the next chunk is out keeps the answers already received, and the next sync resumes after them")
    func failureAfterAnsweredChunk() async throws {
        try await withObservedEngine { store, engine, observer in
            for i in 0..<120 { _ = try await engine.save(note(String(format: "r%03d", i))) }
            observer.beforePush = { push in
                if push == 2 { throw TransportError(kind: .network, message: "the venue network failed") }
            }
            let summary = try await engine.sync(retrying: false)
            // The first chunk's answers were being stored while the second went out: they stay stored.
            #expect(summary.synced == 50)
            #expect(summary.failed == 70)
            #expect(
                try await store.records().filter { $0.syncStatus == .synced }.map(\.recordId).sorted() == (0..<50).map { String(format: "r%03d", $0) }
            )
            #expect(try await store.outbox.count() == 70)
            observer.beforePush = { _ in }
            let healed = try await engine.sync()
            #expect(healed.synced == 70)
            #expect(observer.sent.count == 4)
            #expect(observer.sent[2].first == "r050")
            #expect(try await store.outbox.count() == 0)
        }
    }

    @Test("a record written while the last chunk is out goes out in the same sync")
    func writtenDuringLastChunk() async throws {
        try await withObservedEngine { store, engine, observer in
            for i in 0..<60 { _ = try await engine.save(note("r\(i)")) }
            observer.beforePush = { push in if push == 2 { _ = try await engine.save(note("late")) } }
            let summary = try await engine.sync()
            #expect(summary.synced == 61)
            #expect(observer.sent.count == 3)
            #expect(observer.sent[2] == ["late"])
            #expect(try await store.outbox.count() == 0)
            #expect(try await store.record(collection: "notes", recordId: "late")?.syncStatus == .synced)
        }
    }

    @Test("an entry put back by a retry while a chunk is out keeps its record from being marked synced")
    func retryDuringPush() async throws {
        try await withObservedEngine { store, engine, observer in
            var seenX: RecordSyncStatus?
            observer.beforePush = { push in
                // While the second sync's chunk is out, the user retries x as it is,
                if push == 2 { try await store.outbox.requeue(recordId: "x") }
                // and when the entry put back goes out, x must not have been marked synced meanwhile.
                if push == 3 { seenX = try await store.record(collection: "notes", recordId: "x")?.syncStatus }
            }
            _ = try await engine.save(note("x", ["n": -1]))
            #expect(try await engine.sync().refused == 1)
            _ = try await engine.save(note("y", ["n": 3]))
            _ = try await engine.sync()
            #expect(observer.pushes == 3)
            #expect(seenX != nil && seenX != .synced)
        }
    }

    @Test("an older entry put back by a retry while a chunk is out goes out before the newer ones")
    func retriedEntryKeepsItsPlace() async throws {
        try await withObservedEngine { store, engine, observer in
            // x's first entry is refused and set aside;
            _ = try await engine.save(note("x", ["n": -1]))
            #expect(try await engine.sync().refused == 1)
            // then two chunks queue, and while the first is out, the user retries x.
            for i in 0..<50 { _ = try await engine.save(note("a\(i)")) }
            for i in 0..<50 { _ = try await engine.save(note("b\(i)")) }
            observer.beforePush = { push in if push == 2 { try await store.outbox.requeue(recordId: "x") } }
            _ = try await engine.sync()
            // x's entry is older than every b: it goes out first.
            #expect(observer.sent.count == 4)
            #expect(observer.sent[1] == (0..<50).map { "a\($0)" })
            #expect(observer.sent[2] == ["x"] + (0..<49).map { "b\($0)" })
            #expect(observer.sent[3] == ["b49"])
            // x is refused again and set aside; nothing else waits.
            #expect(try await store.outbox.count() == 0)
            #expect(try await store.record(collection: "notes", recordId: "x")?.syncStatus == .refused)
        }
    }

    @Test("a conflict marks the record rejected, as a conflict, and keeps the server's value for the app")
    func conflictKept() async throws {
        struct Conflicting: SyncTransport {
            func push(_ request: PushRequest) async throws -> PushResponse {
                PushResponse(
                    results: request.mutations.map {
                        MutationResult(
                            idempotencyKey: $0.idempotencyKey, status: .conflict, version: 7,
                            conflict: ConflictDetail(
                                conflictId: "c1", fields: ["travel_expense"], serverFields: ["travel_expense": 55], serverVersion: 6))
                    })
            }
            func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse { fatalError() }
            func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse { fatalError() }
            func health() async throws -> HealthResponse { HealthResponse(status: "ok", storage: "ok") }
        }
        try await withStore { store, _ in
            let engine = SyncEngine(
                store: store, transport: Conflicting(), configuration: .init(deviceId: "d", deliversAfterSave: false), clock: TestClock<Duration>())
            try await engine.save(LocalStore.Write(collection: "activities", recordId: "a1", fields: ["travel_expense": 70]))
            let summary = try await engine.sync()
            #expect(summary.refused == 1 && summary.failed == 0)
            let record = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(record.syncStatus == .refused)
            #expect(record.badge.symbol == "⚠ conflict")
            #expect(record.conflict?.serverFields == ["travel_expense": 55])
            #expect(record.version == 7)
            #expect(try await store.outbox.count() == 0)
        }
    }

    @Test("a response lost after the server applied a chunk is resent and answered as duplicates")
    func lostResponse() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let network = SimulatedNetwork(server: server, seed: 1, faults: .init(dropRequest: 0, dropResponse: 1, delay: 0))
            let engine = SyncEngine(
                store: store, transport: network, configuration: .init(deviceId: "d", deliversAfterSave: false), clock: YieldingClock())
            for i in 0..<60 { try await engine.save(note("r\(i)")) }
            let failed = try await engine.sync()
            #expect(failed.failed == 60)
            // The server applied the first chunk, but the device never heard: all 60 stay queued.
            #expect(await server.applied.count == 50)
            #expect(try await store.outbox.count() == 60)
            network.setFaults(.none)
            let healed = try await engine.sync()
            #expect(healed.synced == 60)
            #expect(await server.applicationCounts().values.allSatisfy { $0 == 1 })
            #expect(await server.applied.count == 60)
        }
    }

    @Test("status is published as an AsyncSequence")
    func statusStream() async throws {
        try await withEngine { h in
            let stream = await h.engine.statusUpdates()
            var iterator = stream.makeAsyncIterator()
            #expect(await iterator.next()?.isOnline == true)
            try await h.engine.save(note("r1"))
            let afterSave = await iterator.next()
            #expect(afterSave?.pendingCount == 1)
            _ = try await h.engine.sync()
            var sawSyncing = false
            var last: SyncStatus?
            while let status = await iterator.next() {
                if status.isSyncing { sawSyncing = true }
                last = status
                if !status.isSyncing && status.pendingCount == 0 && sawSyncing { break }
            }
            #expect(sawSyncing)
            #expect(last?.lastSyncAt != nil)
        }
    }

    @Test("a second sync while one runs is skipped, not run twice")
    func coalesced() async throws {
        try await withEngine { h in
            try await h.engine.save(note("r1"))
            h.transport.isOnline = false
            let first = Task { try await h.engine.sync() }
            var sleeps = h.clock.sleeps.makeAsyncIterator()
            let wait = try #require(await sleeps.next())
            let second = try await h.engine.sync()
            #expect(second.skipped)
            h.transport.isOnline = true
            h.clock.advance(by: wait)
            #expect(try await first.value(within: testWaitLimit, "the first sync").synced == 1)
        }
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    var value: Int { lock.withLock { count } }
    func increment() { lock.withLock { count += 1 } }
}
