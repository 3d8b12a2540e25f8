import Foundation
import GRDB
import OutpostProtocol
import Testing

@testable import OutpostClient

/// The row types of the settings, discarded-copy and reference-state tables.
@Suite("Setting, discarded and reference-state rows")
struct StoreTableRowTests {
    @Test("a setting is sealed under its own name: stored, read back, moved to another name it does not open, removed")
    func settings() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let (value, clear, moved, removed) = try await store.writeImmediate { db in
                try SettingRow.save("token", "secret-token", sealer: sealer, db)
                let value = try SettingRow.value("token", sealer: sealer, db)
                let clear = try Int.fetchOne(db, sql: "SELECT instr(value, 'secret') FROM settings WHERE name = 'token'")
                try db.execute(sql: "INSERT INTO settings (name, value) SELECT 'server', value FROM settings WHERE name = 'token'")
                let moved = Result { try SettingRow.value("server", sealer: sealer, db) }
                try SettingRow.save("token", nil, sealer: sealer, db)
                return (value, clear, moved, try SettingRow.exists("token", db))
            }
            #expect(value == "secret-token")
            #expect(clear == 0)
            #expect(throws: ClientError.self) { try moved.get() }
            #expect(removed == false)
        }
    }

    @Test("a discarded copy renamed is sealed again under its new id and opens only there")
    func discardedRename() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let old = RecordKey("attendance", "", "provisional-1")
            let (opened, underOld) = try await store.writeImmediate { db in
                try DiscardedRow(
                    record: old, discardedAt: 5_000,
                    payload: try sealer.seal(Data("copy".utf8), context: DiscardedRow.payloadContext(old, at: 5_000))
                ).insert(db)
                for var copy in try DiscardedRow.copies(of: old, db) { try copy.rename(to: "att-1", sealer: sealer, db) }
                let renamed = RecordKey("attendance", "", "att-1")
                let copy = try DiscardedRow.copies(of: renamed, db).first
                return (
                    try copy.map { try sealer.open($0.payload, context: DiscardedRow.payloadContext(renamed, at: 5_000)) },
                    copy.map { row in Result { try sealer.open(row.payload, context: DiscardedRow.payloadContext(old, at: 5_000)) } }
                )
            }
            #expect(opened == Data("copy".utf8))
            #expect(throws: (any Error).self) { try underOld?.get() }
        }
    }

    @Test("a set's state reads as not downloaded, incomplete, then ready; a refresh moves its cursor and counts")
    func referenceState() async throws {
        try await withStore { store, _ in
            let states = try await store.writeImmediate { db -> [ReferenceState] in
                let none = try ReferenceStateRow.find(collection: "guests", scope: "e1", db)?.referenceState ?? .notDownloaded
                try ReferenceStateRow(
                    collection: "guests", scope: "e1", continuation: "p2", cursor: nil, total: 1_000, stored: 500,
                    completedAt: nil, refreshedAt: nil
                ).insert(db)
                let partial = try ReferenceStateRow.find(collection: "guests", scope: "e1", db)?.referenceState
                try ReferenceStateRow(
                    collection: "guests", scope: "e1", continuation: nil, cursor: "c1", total: 1_000, stored: 1_000,
                    completedAt: 7_000, refreshedAt: 7_000
                ).insert(db)
                let ready = try ReferenceStateRow.find(collection: "guests", scope: "e1", db)?.referenceState
                try ReferenceStateRow.refreshed(collection: "guests", scope: "e1", cursor: "c2", stored: 990, at: 9_000, db)
                let refreshed = try ReferenceStateRow.find(collection: "guests", scope: "e1", db)
                #expect(refreshed?.cursor == "c2" && refreshed?.stored == 990 && refreshed?.total == 990)
                #expect(try ReferenceStateRow.lastFetch(db) == 9_000)
                return [none, partial, ready].compactMap { $0 }
            }
            #expect(
                states == [
                    .notDownloaded, .incomplete(stored: 500, total: 1_000),
                    .ready(since: Timestamp(millisecondsSince1970: 7_000).date),
                ])
        }
    }
}
