import Clocks
import Foundation
import OutpostProtocol
import Testing

@testable import OutpostClient

/// What a device makes of a venue relay's answers: a write the relay holds is never called synced, stays queued,
/// and takes the server's answer when the relay has it.
@Suite("Answers from a venue relay")
struct RelayAnswerTests {
    /// A relay: holds every write until `upstream` is set, then answers what the server answered.
    final class Relay: SyncTransport, @unchecked Sendable {
        var upstream: [String: MutationResult] = [:]
        var pushes = 0
        func push(_ request: PushRequest) async throws -> PushResponse {
            pushes += 1
            return PushResponse(
                results: request.mutations.map { mutation in
                    upstream[mutation.idempotencyKey]
                        ?? .rejected(
                            mutation.idempotencyKey, .heldAtRelay, "saved at the venue relay; it reaches the server when the venue's line is up")
                })
        }
        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            PullResponse(changes: [], cursor: "c1", hasMore: false)
        }
        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            throw TransportError(kind: .network, message: "not served here")
        }
        func health() async throws -> HealthResponse { HealthResponse(status: "ok", storage: "ok") }
    }

    /// Door 1's engine, syncing through `relay`.
    func engine(_ store: LocalStore, _ relay: Relay) -> SyncEngine {
        SyncEngine(
            store: store, transport: relay, configuration: .init(deviceId: "door-1", deliversAfterSave: false),
            clock: TestClock<Duration>())
    }

    func note(_ id: String) -> LocalStore.Write {
        LocalStore.Write(collection: "notes", recordId: id, fields: ["text": "seen at door 1"])
    }

    @Test("held at the relay: pending, at the relay, queued; the server's answer later settles it")
    func heldThenAnswered() async throws {
        try await withStore { store, _ in
            let relay = Relay()
            let engine = engine(store, relay)
            try await engine.save(note("n1"))
            try await engine.save(note("n2"))

            let held = try await engine.sync()
            #expect(held.synced == 0 && held.failed == 0 && held.refused == 0 && held.atRelay == 2)
            #expect(!held.isComplete)
            #expect(held.description == "0 synced, 0 failed; 2 at the venue relay, waiting for the server")
            let record = try #require(try await store.record(collection: "notes", recordId: "n1"))
            #expect(record.syncStatus == .pending && record.isAtRelay)
            #expect(record.badge.symbol == "⏳ at the venue relay")
            #expect(record.badge.accessibilityLabel == "Saved at the venue relay, waiting for the server")
            #expect(try await store.outbox.count() == 2)
            #expect(await engine.status.pendingCount == 2)

            // The server took one and refused the other: the device hears both through the relay.
            let entries = try await store.outbox.chunk(limit: 10, only: nil)
            relay.upstream[entries[0].mutation.idempotencyKey] = MutationResult(
                idempotencyKey: entries[0].mutation.idempotencyKey, status: .applied, version: 1)
            relay.upstream[entries[1].mutation.idempotencyKey] = .rejected(
                entries[1].mutation.idempotencyKey, .forbidden, "notes are closed for this event")
            let answered = try await engine.sync()
            #expect(answered.synced == 1 && answered.refused == 1 && answered.atRelay == 0)
            let synced = try #require(try await store.record(collection: "notes", recordId: "n1"))
            #expect(synced.syncStatus == .synced && !synced.isAtRelay && synced.syncError == nil)
            let refused = try #require(try await store.record(collection: "notes", recordId: "n2"))
            #expect(refused.syncStatus == .refused && refused.syncError == "notes are closed for this event")
            #expect(await engine.status.pendingCount == 0)
        }
    }

    @Test("what the relay does not carry stays queued for the server; a new edit of a held record waits on the device")
    func notCarriedAndEditedAgain() async throws {
        try await withStore { store, _ in
            let relay = Relay()
            let engine = engine(store, relay)
            try await engine.save(note("n1"))
            let held = try await engine.sync()
            #expect(held.atRelay == 1)
            // Edited again on the device: the relay holds the first write, not this one.
            try await engine.save(LocalStore.Write(collection: "notes", recordId: "n1", fields: ["text": "edited"]))
            let edited = try #require(try await store.record(collection: "notes", recordId: "n1"))
            #expect(edited.syncStatus == .pending && !edited.isAtRelay && edited.syncError == nil)

            // A relay that does not carry a write: it stays queued, failed with the relay's reason, not refused.
            try await engine.save(note("n2"))
            let entries = try await store.outbox.chunk(limit: 10, only: nil)
            let n2 = try #require(entries.first { $0.mutation.recordId == "n2" })
            relay.upstream[n2.mutation.idempotencyKey] = .rejected(
                n2.mutation.idempotencyKey, .notCarriedByRelay, "this venue relay carries gala only; it goes when the server can be reached")
            let summary = try await engine.sync()
            #expect(summary.failed == 1 && summary.refused == 0)
            #expect(summary.reasons.contains("this venue relay carries gala only; it goes when the server can be reached"))
            let waiting = try #require(try await store.record(collection: "notes", recordId: "n2"))
            #expect(waiting.syncStatus == .failed && waiting.isWaitingToSync)
            #expect(try await store.outbox.chunk(limit: 10, only: nil).contains { $0.mutation.recordId == "n2" })
        }
    }
}
