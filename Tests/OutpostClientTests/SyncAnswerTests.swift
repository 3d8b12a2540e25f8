import Clocks
import Foundation
import GRDB
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// How a push's answers are stored: most change only a record's plain columns; one that clears a sync error
/// or a conflict opens and seals the record again.
@Suite("Storing push answers")
struct SyncAnswerTests {
    /// Answers a conflict for a travel expense of 70, else applies, numbering versions from 7.
    final class Answering: SyncTransport, @unchecked Sendable {
        private var version: Int64 = 6
        /// What a pull answers: the record as the server holds it.
        var changes: [Change] = []
        /// Answers for another mutation's key in the first place: an answer the device must not take.
        var misplaced = false
        func push(_ request: PushRequest) async throws -> PushResponse {
            PushResponse(
                results: request.mutations.map { mutation in
                    version += 1
                    if mutation.fields["travel_expense"] == 70 {
                        return MutationResult(
                            idempotencyKey: mutation.idempotencyKey, status: .conflict, version: version,
                            conflict: ConflictDetail(
                                conflictId: "c1", fields: ["travel_expense"], serverFields: ["travel_expense": 55],
                                serverVersion: version - 1))
                    }
                    return MutationResult(
                        idempotencyKey: misplaced ? "someone-else" : mutation.idempotencyKey, status: .applied, version: version)
                })
        }
        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            PullResponse(changes: cursor == "c9" ? [] : changes, cursor: "c9", hasMore: false)
        }
        func snapshot(
            collection: String, scope: String?, continuation: String?, limit: Int?
        ) async throws
            -> SnapshotResponse
        { throw TransportError(kind: .network, message: "not served here") }
        func health() async throws -> HealthResponse { HealthResponse(status: "ok", storage: "ok") }
    }

    func withEngine(_ body: (LocalStore, SyncEngine) async throws -> Void) async throws {
        try await withEngine { store, engine, _ in try await body(store, engine) }
    }

    func withEngine(_ body: (LocalStore, SyncEngine, Answering) async throws -> Void) async throws {
        try await withStore { store, _ in
            let server = Answering()
            let engine = SyncEngine(
                store: store, transport: server, configuration: .init(deviceId: "d", deliversAfterSave: false), clock: TestClock<Duration>())
            try await body(store, engine, server)
        }
    }

    /// The activity as the server holds it after the conflict: its value, and a note another device added.
    static func serverRecord(_ amount: Int64, version: Int64) -> Change {
        Change(
            collection: "activities", recordId: "a1", version: version, tombstone: false,
            fields: ["travel_expense": .integer(amount), "notes": "from the office"],
            createdAt: Timestamp(millisecondsSince1970: 1_000), updatedAt: Timestamp(millisecondsSince1970: 2_000))
    }

    func expense(_ amount: Int64) -> LocalStore.Write {
        LocalStore.Write(collection: "activities", recordId: "a1", fields: ["travel_expense": .integer(amount)])
    }

    func row(_ store: LocalStore) async throws -> (payload: Data, sealedDetail: Bool?) {
        try await store.pool.read { db in
            let row = try #require(
                try Row.fetchOne(db, sql: "SELECT payload, sealed_detail FROM records WHERE record_id = 'a1'"))
            return (row["payload"], row["sealed_detail"])
        }
    }

    @Test("a confirmation with nothing sealed to clear leaves the sealed payload as it was")
    func plainConfirmation() async throws {
        try await withEngine { store, engine in
            try await engine.save(expense(12))
            // The save's probe settles the record made online first: it seals the record again.
            try await bounded("the save's probe") { await engine.awaitConnection(upTo: .seconds(60)) }
            let before = try await row(store)
            #expect(before.sealedDetail == false)
            #expect(try await engine.sync().synced == 1)
            #expect(try await row(store).payload == before.payload)
            let record = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(record.syncStatus == .synced)
            #expect(record.version == 7)
            #expect(record.lastSyncAttempt != nil)
            #expect(record.fields["travel_expense"] == 12)
        }
    }

    @Test("a record in conflict, written again and delivered, ends synced with its error and conflict gone")
    func conflictCleared() async throws {
        try await withEngine { store, engine in
            try await engine.save(expense(70))
            #expect(try await engine.sync().refused == 1)
            #expect(try await row(store).sealedDetail == true)
            // Written again: resent, pending, the conflict settled by the new value.
            try await engine.save(expense(60))
            let pending = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(pending.syncStatus == .pending)
            #expect(pending.conflict == nil)
            #expect(try await engine.sync().synced == 1)
            let synced = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(synced.syncStatus == .synced)
            #expect(synced.syncError == nil)
            #expect(synced.conflict == nil)
            #expect(synced.version == 8)
            #expect(synced.fields["travel_expense"] == 60)
            #expect(try await row(store).sealedDetail == false)
        }
    }

    @Test("a row written before its sealed payload was described takes the full path: its conflict is cleared too")
    func rowFromBeforeTheColumn() async throws {
        try await withEngine { store, engine in
            try await engine.save(expense(70))
            #expect(try await engine.sync().refused == 1)
            try await engine.save(expense(60))
            try await store.pool.write { db in try db.execute(sql: "UPDATE records SET sealed_detail = NULL") }
            #expect(try await engine.sync().synced == 1)
            let synced = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(synced.syncStatus == .synced)
            #expect(synced.syncError == nil)
            #expect(synced.conflict == nil)
            #expect(try await row(store).sealedDetail == false)
        }
    }

    @Test("a conflict stays the record's state through a pull: refused, the device's value shown, nothing waiting")
    func conflictThroughPull() async throws {
        try await withEngine { store, engine, server in
            // Given a conflict on the travel expense: the device wrote 70, the server kept 55.
            try await engine.save(expense(70))
            #expect(try await engine.sync().refused == 1)

            // When the record comes back in a pull, with the server's value changed again and another field.
            server.changes = [Self.serverRecord(50, version: 9)]
            #expect(try await engine.pull(collection: "activities") == 1)

            // Then it is still refused, as a conflict: the device's value on top, the server's in the detail.
            let record = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(record.syncStatus == .refused)
            #expect(record.fields["travel_expense"] == 70)
            #expect(record.fields["notes"] == "from the office")
            #expect(record.conflict?.serverFields == ["travel_expense": 50])
            #expect(record.conflict?.serverVersion == 9)
            #expect(record.syncErrorCode == "conflict")
            #expect(try await store.counts() == RecordCounts(refused: 1))
            #expect(try await store.records(.refused).map(\.recordId) == ["a1"])

            // And keeping the server's value settles it with the value the server has now.
            let kept = try await engine.keepServerValue(collection: "activities", recordId: "a1")
            #expect(kept.syncStatus == .synced && kept.conflict == nil)
            #expect(kept.fields["travel_expense"] == 50)
            #expect(try await store.counts() == RecordCounts())
        }
    }

    @Test("a failed delivery leaves a conflict as it is; a confirmed write settles it only with the conflicting fields")
    func conflictThroughFailedDelivery() async throws {
        try await withEngine { store, engine, _ in
            // Given a conflict, and an entry of that record still queued (as a store from before the rule holds).
            try await engine.save(expense(70))
            #expect(try await engine.sync().refused == 1)
            try await store.pool.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO outbox (idempotency_key, collection, scope, record_id, op, client_ts, payload)
                        VALUES ('d:a1:later', 'activities', '', 'a1', 'upsert', 3000, x'00')
                        """)
            }

            // When the network gives up, the record stays refused with its conflict, not failed.
            try await store.outbox.markUndelivered(error: "The server could not be reached", at: Date())
            let record = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(record.syncStatus == .refused)
            #expect(record.conflict != nil)
            #expect(record.syncErrorCode == "conflict")
        }
    }

    @Test("a conflict is settled by a confirmed write of every conflicting field, or a delete; not by another field")
    func settling() {
        let conflict = ConflictDetail(conflictId: "c1", fields: ["a", "b"], serverFields: [:], serverVersion: 3)
        var outcome = Outbox.Outcome()
        outcome.written = ["notes", "a"]
        #expect(!outcome.settles(conflict))
        outcome.written.insert("b")
        #expect(outcome.settles(conflict))
        var deleted = Outbox.Outcome()
        deleted.deleted = true
        #expect(deleted.settles(conflict))
    }

    @Test("an answer about another mutation than the one in its place confirms nothing: the records stay queued")
    func misplacedAnswer() async throws {
        try await withEngine { store, engine, server in
            server.misplaced = true
            try await engine.save(LocalStore.Write(collection: "notes", recordId: "n1", fields: ["n": 1]))
            let error = await #expect(throws: TransportError.self) { try await engine.sync(retrying: false) }
            #expect(error?.message == "the server answered for other records than it was sent")
            #expect(try await store.outbox.count() == 1)
            #expect(try await store.record(collection: "notes", recordId: "n1")?.syncStatus != .synced)
            server.misplaced = false
            #expect(try await engine.sync().synced == 1)
        }
    }
}
