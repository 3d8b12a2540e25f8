import Clocks
import Foundation
import GRDB
import OutpostProtocol
import Testing

@testable import OutpostClient

/// How a push's answers are stored: most change only a record's plain columns; one that clears a sync error
/// or a conflict opens and seals the record again.
@Suite("Storing push answers")
struct SyncAnswerTests {
    /// Answers a conflict for a travel expense of 70, else applies, numbering versions from 7.
    final class Answering: SyncTransport, @unchecked Sendable {
        private var version: Int64 = 6
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
                    return MutationResult(idempotencyKey: mutation.idempotencyKey, status: .applied, version: version)
                })
        }
        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            PullResponse(changes: [], cursor: cursor ?? "", hasMore: false)
        }
        func snapshot(
            collection: String, scope: String?, continuation: String?, limit: Int?
        ) async throws
            -> SnapshotResponse
        { throw TransportError(kind: .network, message: "not served here") }
        func health() async throws -> HealthResponse { HealthResponse(status: "ok", storage: "ok") }
    }

    func withEngine(_ body: (LocalStore, SyncEngine) async throws -> Void) async throws {
        try await withStore { store, _ in
            let engine = SyncEngine(
                store: store, transport: Answering(), configuration: .init(deviceId: "d", deliversAfterSave: false), clock: TestClock<Duration>())
            try await body(store, engine)
        }
    }

    func expense(_ amount: Int64) -> LocalStore.Write {
        LocalStore.Write(collection: "activities", recordId: "a1", fields: ["travel_expense": .integer(amount)])
    }

    func row(_ store: LocalStore) async throws -> (payload: Data, sealedDetail: Bool?) {
        try await store.queue.read { db in
            let row = try #require(
                try Row.fetchOne(db, sql: "SELECT payload, sealed_detail FROM records WHERE record_id = 'a1'"))
            return (row["payload"], row["sealed_detail"])
        }
    }

    @Test("a confirmation with nothing sealed to clear leaves the sealed payload as it was")
    func plainConfirmation() async throws {
        try await withEngine { store, engine in
            try await engine.save(expense(12))
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
            #expect(try await engine.sync().rejected == 1)
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
            #expect(try await engine.sync().rejected == 1)
            try await engine.save(expense(60))
            try await store.queue.write { db in try db.execute(sql: "UPDATE records SET sealed_detail = NULL") }
            #expect(try await engine.sync().synced == 1)
            let synced = try #require(try await store.record(collection: "activities", recordId: "a1"))
            #expect(synced.syncStatus == .synced)
            #expect(synced.syncError == nil)
            #expect(synced.conflict == nil)
            #expect(try await row(store).sealedDetail == false)
        }
    }
}
