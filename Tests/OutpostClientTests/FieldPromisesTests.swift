import Clocks
import Foundation
import OutpostClient
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

/// What the field apps promise the person holding the device: escalation counted from the day a record was
/// made, saves that never wait on the network, refused records set aside with a way out, and a clock that
/// jumped not poisoning later writes.
@Suite("Field promises")
struct FieldPromisesTests {
    /// A transport whose server accepts connections and never answers: every call waits until cancelled.
    struct Unanswering: SyncTransport {
        func push(_ request: PushRequest) async throws -> PushResponse { try await Self.hang() }
        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse { try await Self.hang() }
        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            try await Self.hang()
        }
        func health() async throws -> HealthResponse { try await Self.hang() }

        static func hang<T>() async throws -> T {
            // A stream nobody feeds, ended only when the waiting task is cancelled.
            let (never, continuation) = AsyncStream.makeStream(of: Void.self)
            await withTaskCancellationHandler {
                for await _ in never {}
            } onCancel: {
                continuation.finish()
            }
            throw CancellationError()
        }
    }

    func engine(
        _ store: LocalStore, _ transport: any SyncTransport, now: ManualNow = ManualNow(),
        clock: any Clock<Duration> = TestClock<Duration>(), delivers: Bool = false
    ) -> SyncEngine {
        SyncEngine(
            store: store, transport: transport,
            configuration: .init(deviceId: "d", retryDelays: [], deliversAfterSave: delivers), clock: clock, now: now.closure)
    }

    @Test("before the server was first tried the connection is unknown, not offline; a probe either way makes it known")
    func connectionUnknownUntilProbed() async throws {
        try await withStore { store, _ in
            let transport = InMemoryTransport(server: InMemoryServer())
            transport.isOnline = false
            let engine = engine(store, transport)
            var status = await engine.status
            #expect(!status.isConnectionKnown && !status.isOnline)
            #expect(status.connectionText == "Checking connection")
            #expect(status.offlineIndicatorText == "Nothing waiting to sync")
            #expect(await engine.probe(syncingPending: false) == false)
            status = await engine.status
            #expect(status.isConnectionKnown && status.connectionText == "Offline")
            #expect(status.offlineIndicatorText == "Offline — nothing waiting to sync")
            transport.isOnline = true
            #expect(await engine.probe())
            #expect(await engine.status.connectionText == "Online")
        }
    }

    @Test("a record made offline and aged past 24 hours brings the notice up on the next start, with no sync ever tried")
    func offlineRecordEscalates() async throws {
        try await withStore { store, _ in
            let now = ManualNow()
            let transport = InMemoryTransport(server: InMemoryServer())
            transport.isOnline = false
            try await engine(store, transport, now: now).save(note("a"))
            #expect(try await engine(store, transport, now: now).refreshPersistentFailureNotice().isEmpty)
            now.advance(seconds: 48 * 3600)
            // The next start: a new engine on the same store.
            let restarted = engine(store, transport, now: now)
            #expect(try await restarted.refreshPersistentFailureNotice().map(\.recordId) == ["a"])
            let notice = try #require(await restarted.status.persistentFailureNotice)
            #expect(notice.message == "1 record has not synced for over 24 hours")
            #expect(!notice.isDismissible)
            #expect(PersistentFailureNotice.guidance.count == 3)
            #expect(transport.pushCount == 0)
        }
    }

    @Test(
        "a save online returns once durable while the server never answers; the wait for its delivery is bounded and stopping it leaves the record queued"
    )
    func saveNeverWaits() async throws {
        try await withStore { store, _ in
            let clock = ManualClock()
            let engine = engine(store, Unanswering(), clock: clock, delivers: true)
            await engine.setOnline(true)
            let saved = try await bounded("a save while the server never answers") { try await engine.save(note("a")) }
            #expect(saved.syncStatus == .pending)
            let waiting = Task { await engine.awaitDelivery(upTo: .seconds(2)) }
            for await duration in clock.sleeps where duration == .seconds(2) { break }
            clock.advance(by: .seconds(2))
            #expect(try await waiting.value(within: testWaitLimit, "the bounded wait") == false)
            try await bounded("stopping the delivery") { await engine.stopDelivery() }
            #expect(try await store.outbox.count() == 1)
            #expect(try await store.record(collection: "notes", recordId: "a")?.syncStatus == .pending)
        }
    }

    @Test("a refused record is set aside: not waiting, named beside the notice; sync all leaves it; discarding keeps a sealed copy")
    func refusedRecords() async throws {
        try await withStore { store, _ in
            let now = ManualNow()
            let server = InMemoryServer(rejecting: { $0.recordId == "bad" ? .init(code: .forbidden, message: "not yours") : nil })
            let transport = InMemoryTransport(server: server)
            let engine = engine(store, transport, now: now)
            try await engine.save(note("bad"))
            try await engine.save(note("ok"))
            #expect(try await engine.sync().description == "1 synced, 0 failed, 1 refused: not yours")
            transport.isOnline = false
            try await engine.save(note("waiting"))
            now.advance(seconds: 25 * 3600)
            try await engine.refreshPersistentFailureNotice()
            let status = await engine.status
            #expect(status.pendingCount == 1 && status.refusedCount == 1)
            #expect(status.offlineIndicatorText == "1 record waiting to sync; 1 record refused by the server — review them")
            #expect(status.persistentFailureNotice?.message == "1 record has not synced for over 24 hours; 1 more was refused by the server")
            let bad = try #require(try await store.record(collection: "notes", recordId: "bad"))
            #expect(bad.badge.symbol == "⛔ refused")
            #expect(bad.badge.accessibilityLabel == "Refused by the server, needs your attention: not yours")

            transport.isOnline = true
            #expect(try await engine.retryAll().description == "1 synced, 0 failed")
            #expect(await server.applied.map(\.mutation.recordId) == ["ok", "waiting"])
            await #expect(throws: ClientError.self) { try await engine.discard(collection: "notes", recordId: "ok") }
            try await engine.discard(collection: "notes", recordId: "bad")
            #expect(try await store.record(collection: "notes", recordId: "bad") == nil)
            #expect(try await store.outbox.discardedCount() == 1)
            #expect(try await store.counts() == RecordCounts())
            #expect(await engine.status.persistentFailureNotice == nil)
            #expect(await engine.status.refusedCount == 0)
        }
    }

    @Test("a refused record edited is sent again whole, and syncs once the server takes it")
    func refusedRecordEdited() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer(rejecting: { $0.fields["n"] == -1 ? .init(code: .invalidFields, message: "n must be positive") : nil })
            let engine = engine(store, InMemoryTransport(server: server))
            try await engine.save(note("x", ["n": -1, "label": "kept"]))
            #expect(try await engine.sync().refused == 1)
            try await engine.save(note("x", ["n": 2]))
            #expect(try await engine.sync().synced == 1)
            let resent = try #require(await server.applied.last?.mutation.fields)
            #expect(resent["n"] == 2 && resent["label"] == "kept")
            #expect(try await store.record(collection: "notes", recordId: "x")?.syncStatus == .synced)
            #expect(try await store.outbox.discardedCount() == 1)
        }
    }

    /// Conflicts a first write of a protected field; takes one made on top of the server's version.
    struct Protected: SyncTransport {
        func push(_ request: PushRequest) async throws -> PushResponse {
            PushResponse(
                results: request.mutations.map { mutation in
                    mutation.baseVersion == nil
                        ? MutationResult(
                            idempotencyKey: mutation.idempotencyKey, status: .conflict, version: 7,
                            conflict: ConflictDetail(
                                conflictId: "c1", fields: ["travel_expense"], serverFields: ["travel_expense": 55], serverVersion: 7))
                        : MutationResult(idempotencyKey: mutation.idempotencyKey, status: .applied, version: 8)
                })
        }
        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse { fatalError() }
        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse { fatalError() }
        func health() async throws -> HealthResponse { HealthResponse(status: "ok", storage: "ok") }
    }

    @Test("a conflict shows both values; the user keeps the server's, or sends theirs on top of it")
    func conflictResolved() async throws {
        try await withStore { store, _ in
            let engine = engine(store, Protected())
            let expense = LocalStore.Write(collection: "activities", recordId: "a1", fields: ["travel_expense": 70])
            try await engine.save(expense)
            #expect(try await engine.sync().refused == 1)
            let conflicting = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(conflicting.badge.symbol == "⚠ conflict")
            #expect(conflicting.fields["travel_expense"] == 70)
            #expect(conflicting.conflict?.serverFields == ["travel_expense": 55])
            let kept = try await engine.keepServerValue(collection: "activities", recordId: "a1")
            #expect(kept.fields["travel_expense"] == 55 && kept.syncStatus == .synced && kept.conflict == nil)

            try await engine.save(LocalStore.Write(collection: "activities", recordId: "a2", fields: ["travel_expense": 70]))
            #expect(try await engine.sync().refused == 1)
            try await engine.resendOverServerValue(collection: "activities", recordId: "a2")
            #expect(try await engine.sync().synced == 1)
            let resent = try #require(try await store.record(collection: "activities", recordId: "a2"))
            #expect(resent.fields["travel_expense"] == 70 && resent.syncStatus == .synced && resent.version == 8)
            await #expect(throws: ClientError.self) { try await engine.keepServerValue(collection: "activities", recordId: "a2") }
        }
    }

    @Test(
        "a clock that jumped ahead and came back: writes after it are not stamped in the future, the write made during it is stamped again, and all sync"
    )
    func clockJump() async throws {
        try await withStore { store, _ in
            let now = ManualNow()
            // The server refuses client times more than a day ahead of its own clock, which is right.
            let real = ManualNow()
            let server = InMemoryServer(rejecting: { mutation in
                mutation.clientTimestamp.date > real.date.addingTimeInterval(24 * 3600)
                    ? .init(code: .invalidTimestamp, message: "clientTimestamp is too far in the future") : nil
            })
            let engine = engine(store, InMemoryTransport(server: server), now: now)
            now.advance(seconds: 25 * 3600)
            try await engine.save(
                LocalStore.Write(
                    collection: CheckIn.collection, scope: "gala", recordId: "g1",
                    fields: [CheckIn.Field.eventId: "gala", CheckIn.Field.guestId: "g1", CheckIn.Field.scannedBy: "d"],
                    timestampField: CheckIn.Field.scannedAt))
            // Sent while the clock is still ahead: refused for its time, which the device can outgrow, so it
            // stays queued as failed, not refused.
            let during = try await engine.sync()
            #expect(during.failed == 1 && during.refused == 0)
            let failed = try #require(try await store.record(collection: CheckIn.collection, scope: "gala", recordId: "g1"))
            #expect(failed.syncStatus == .failed)
            #expect(failed.syncError == "The device's clock is ahead of the server's: check the date and time settings")
            // The clock comes back; the next write is stamped near it, not after the jumped one.
            now.advance(seconds: -25 * 3600)
            try await engine.save(note("after"))
            let queued = try await store.outbox.nextChunk(limit: 10)
            #expect(queued.map(\.mutation.recordId) == ["g1", "after"])
            #expect(queued[1].mutation.clientTimestamp.date <= now.date.addingTimeInterval(600))
            // An hour later everything syncs, in order; the jumped write now carries a time before the device's
            // clock and before the write queued after it, and its scan time follows.
            now.advance(seconds: 3600)
            #expect(try await engine.sync().synced == 2)
            let applied = await server.applied.map(\.mutation)
            #expect(applied.map(\.recordId) == ["g1", "after"])
            #expect(applied[0].clientTimestamp.date <= now.date)
            #expect(applied[0].clientTimestamp < applied[1].clientTimestamp)
            #expect(applied[0].fields[CheckIn.Field.scannedAt] == .string(applied[0].clientTimestamp.iso8601))
        }
    }
}
