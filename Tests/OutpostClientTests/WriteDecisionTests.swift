import Foundation
import OutpostProtocol
import Testing

@testable import OutpostClient

/// What a local write decides to store, apart from storing it.
@Suite("Local write decisions")
struct WriteDecisionTests {
    let stamp = Timestamp(millisecondsSince1970: 1_700_000_000_000)

    func found(_ fields: [String: JSONValue], status: RecordSyncStatus) -> LocalRecord {
        LocalRecord(
            collection: "notes", scope: "", recordId: "n1", fields: fields, tombstone: false, syncStatus: status,
            lastSyncAttempt: nil, syncError: status == .refused ? "refused" : nil, isOfflineEntry: false,
            createdAt: Timestamp(millisecondsSince1970: 1), updatedAt: Timestamp(millisecondsSince1970: 1), version: 3, conflict: nil)
    }

    @Test("a new record made offline is flagged, and its entry carries its fields and the stamped time")
    func newOffline() throws {
        let write = LocalStore.Write(collection: "notes", recordId: "n1", fields: ["a": .integer(1)], timestampField: "at")
        let decision = try LocalStore.decide(write, found: nil, scope: "", at: stamp, offline: true)
        #expect(decision.record.isOfflineEntry)
        #expect(decision.record.fields[LocalRecord.offlineEntryField] == .bool(true))
        #expect(decision.record.fields["at"] == .string(stamp.iso8601))
        #expect(decision.outboxFields == decision.record.fields)
        #expect(!decision.resends)
    }

    @Test("an edit merges into the record and sends only what changed; an edit of a refused record resends it whole")
    func edits() throws {
        let write = LocalStore.Write(collection: "notes", recordId: "n1", fields: ["b": .integer(2)])
        let synced = try LocalStore.decide(write, found: found(["a": .integer(1)], status: .synced), scope: "", at: stamp, offline: true)
        #expect(synced.record.fields == ["a": .integer(1), "b": .integer(2)])
        #expect(!synced.record.isOfflineEntry, "only a record made offline is flagged")
        #expect(synced.outboxFields == ["b": .integer(2)])
        #expect(synced.record.syncStatus == .pending && synced.record.version == 3)

        let refused = try LocalStore.decide(write, found: found(["a": .integer(1)], status: .refused), scope: "", at: stamp, offline: false)
        #expect(refused.resends)
        #expect(refused.outboxFields == ["a": .integer(1), "b": .integer(2)])
        #expect(refused.record.syncError == nil)
    }

    @Test("a delete leaves a tombstone with no fields, and its entry carries none")
    func delete() throws {
        let write = LocalStore.Write(collection: "notes", recordId: "n1", op: .delete, fields: ["ignored": .integer(1)])
        let decision = try LocalStore.decide(write, found: found(["a": .integer(1)], status: .synced), scope: "", at: stamp, offline: false)
        #expect(decision.record.tombstone && decision.record.fields.isEmpty)
        #expect(decision.outboxFields.isEmpty)
    }

    @Test("a record the server would refuse for size is refused before anything is stored")
    func tooLarge() throws {
        let big = String(repeating: "x", count: Mutation.maxFieldsBytes)
        let write = LocalStore.Write(collection: "notes", recordId: "n1", fields: ["big": .string(big)])
        #expect(throws: ClientError.self) { try LocalStore.decide(write, found: nil, scope: "", at: stamp, offline: false) }
    }
}
