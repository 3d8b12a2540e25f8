import Foundation
import GRDB
import OutpostProtocol
import Testing

@testable import OutpostClient

/// The `records` table's row type: what it seals, what it leaves plain, and what it refuses to read.
@Suite("Record rows")
struct RecordRowTests {
    private static func record(_ id: String, scope: String = "", status: RecordSyncStatus = .pending) -> LocalRecord {
        LocalRecord(
            collection: "notes", scope: scope, recordId: id, fields: ["text": "gate 4 damaged"], tombstone: false,
            syncStatus: status, lastSyncAttempt: Date(timeIntervalSince1970: 1_800_000_000), syncError: nil,
            isOfflineEntry: true, createdAt: Timestamp(millisecondsSince1970: 1_000), updatedAt: Timestamp(millisecondsSince1970: 2_000),
            version: 7, conflict: nil)
    }

    @Test("a record saved and found again is the same record, its fields sealed and its sync state plain")
    func roundTrip() async throws {
        try await withStore { store, _ in
            let saved = Self.record("n1", scope: "e1")
            let sealer = store.sealer
            let (found, plain) = try await store.writeImmediate { db in
                try RecordRow(saved, sealer: sealer).insert(db)
                return (
                    try RecordRow.find(RecordKey("notes", "e1", "n1"), db)?.open(with: sealer),
                    try Row.fetchOne(db, sql: "SELECT sync_status, sealed_detail, instr(payload, 'gate') FROM records").map {
                        ($0[0] as String?, $0[1] as Bool?, $0[2] as Int?)
                    }
                )
            }
            #expect(found == saved)
            #expect(plain?.0 == "pending")
            #expect(plain?.1 == false)
            #expect(plain?.2 == 0, "the fields are not stored in the clear")
        }
    }

    @Test("a payload moved to another row does not open there")
    func payloadBoundToItsRow() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let error = await #expect(throws: ClientError.self) {
                try await store.writeImmediate { db in
                    try RecordRow(Self.record("n1"), sealer: sealer).insert(db)
                    try RecordRow(Self.record("n2"), sealer: sealer).insert(db)
                    try db.execute(sql: "UPDATE records SET payload = (SELECT payload FROM records WHERE record_id = 'n1') WHERE record_id = 'n2'")
                    _ = try RecordRow.find(RecordKey("notes", "", "n2"), db)?.open(with: sealer)
                }
            }
            #expect(error?.code == .cannotDecrypt)
        }
    }

    @Test("a row of an older version without a state reads as synced; a state this version does not know is refused")
    func storedStates() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let (legacy, unknown) = try await store.writeImmediate { db in
                try RecordRow(Self.record("old"), sealer: sealer).insert(db)
                try RecordRow(Self.record("new"), sealer: sealer).insert(db)
                try db.execute(sql: "UPDATE records SET sync_status = NULL WHERE record_id = 'old'")
                try db.execute(sql: "UPDATE records SET sync_status = 'archived' WHERE record_id = 'new'")
                return (
                    try RecordRow.find(RecordKey("notes", "", "old"), db)?.open(with: sealer).syncStatus,
                    Result { try RecordRow.find(RecordKey("notes", "", "new"), db)?.open(with: sealer) }
                )
            }
            #expect(legacy == .synced)
            #expect(throws: ClientError.self) { try unknown.get() }
            #expect((try? unknown.get()) == nil)
        }
    }

    @Test("saving a row again replaces it; a sync result's attempt changes plain columns only and never lowers the version")
    func replaceAndMarkAttempt() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let key = RecordKey("notes", "", "n1")
            let (count, marked, kept) = try await store.writeImmediate { db in
                var record = Self.record("n1")
                try RecordRow(record, sealer: sealer).insert(db)
                record.fields = ["text": "fixed"]
                try RecordRow(record, sealer: sealer).insert(db)
                try RecordRow.markAttempt(key, version: 9, at: 5_000, status: .synced, db)
                let marked = try RecordRow.find(key, db)?.open(with: sealer)
                try RecordRow.markAttempt(key, version: 3, at: 6_000, status: nil, db)
                return (
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM records") ?? -1, marked,
                    try RecordRow.find(key, db)?.open(with: sealer)
                )
            }
            #expect(count == 1)
            #expect(marked?.fields == ["text": "fixed"])
            #expect(marked?.syncStatus == .synced && marked?.version == 9)
            #expect(kept?.version == 9 && kept?.syncStatus == .synced)
            #expect(kept?.lastSyncAttempt == Timestamp(millisecondsSince1970: 6_000).date)
        }
    }

    @Test("a record of an older version, stored with no sync state, is renamed as a synced one is")
    func renameLegacySynced() async throws {
        try await withStore { store, _ in
            try await store.write(LocalStore.Write(collection: "notes", recordId: "old", fields: ["n": 1]), deviceId: "d", at: Date(), offline: false)
            try await store.writeImmediate { db in
                try db.execute(sql: "UPDATE records SET sync_status = NULL")
                try db.execute(sql: "DELETE FROM outbox")
            }
            #expect(try await store.renameRecords(collection: "notes", to: ["old": "new"]) == 1)
            #expect(try await store.containsRecord("new"))
            #expect(try await !store.containsRecord("old"))
        }
    }
}
