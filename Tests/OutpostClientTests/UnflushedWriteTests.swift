import Foundation
import GRDB
import Testing

@testable import OutpostClient

/// Push results commit without a flush of their own; every local write after them must flush again.
@Suite("Unflushed writes")
struct UnflushedWriteTests {
    struct Refused: Error {}

    @Test("after an unflushed write, committed or rolled back, commits flush again")
    func restoresFullSync() async throws {
        try await withStore { store, _ in
            // synchronous: 1 is NORMAL, 2 is FULL.
            let during = try await store.writeUnflushed { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
            #expect(during == 1)
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 2)
            await #expect(throws: Refused.self) {
                try await store.writeUnflushed { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                    throw Refused()
                }
            }
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 2)
            // and the failed one left nothing behind.
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM settings WHERE name = 'probe'") } == 0)
        }
    }

    @Test("a store opened for simulations keeps its commits unflushed")
    func simulationStoreUnchanged() async throws {
        try await withStore(durable: false) { store, _ in
            _ = try await store.writeUnflushed { _ in 0 }
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 0)
        }
    }
}
