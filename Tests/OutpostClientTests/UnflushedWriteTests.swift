import Foundation
import GRDB
import Testing

@testable import OutpostClient

/// Push results commit without a flush of their own; every local write after them must flush again.
@Suite("Unflushed writes")
struct UnflushedWriteTests {
    struct Refused: Error {}

    /// The writer connection's `PRAGMA synchronous`: 0 is OFF, 1 NORMAL, 2 FULL.
    static func writerSynchronous(_ store: LocalStore) throws -> Int? {
        try store.pool.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
    }

    @Test("after an unflushed write, committed or rolled back, commits flush again")
    func restoresFullSync() async throws {
        try await withStore { store, _ in
            // synchronous: 1 is NORMAL, 2 is FULL.
            let during = try await store.writeUnflushed { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
            #expect(during == 1)
            #expect(try Self.writerSynchronous(store) == 2)
            await #expect(throws: ClientError.self) {
                try await store.writeUnflushed { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                    throw Refused()
                }
            }
            #expect(try Self.writerSynchronous(store) == 2)
            // and the failed one left nothing behind.
            #expect(try await store.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM settings WHERE name = 'probe'") } == 0)
        }
    }

    @Test("a cancelled task still records the results and leaves commits flushing")
    func cancelled() async throws {
        try await withStore { store, _ in
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                try await store.writeUnflushed { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                }
                return Task.isCancelled
            }
            let sawCancellation = try await task.value
            let synchronous = try Self.writerSynchronous(store)
            let written = try await store.pool.read { db in
                try Int.fetchOne(db, sql: "SELECT count(*) FROM settings WHERE name = 'probe'")
            }
            #expect(sawCancellation)
            #expect(synchronous == 2)
            #expect(written == 1)
        }
    }

    @Test("queued on the store's connection, an unflushed write runs to its end for a cancelled task, and commits flush again")
    func queuedCancelled() async throws {
        try await withStore { store, _ in
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await store.writeUnflushed { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                    return try Int.fetchOne(db, sql: "PRAGMA synchronous")
                }
            }
            let during = try await task.value
            #expect(during == 1)
            #expect(try Self.writerSynchronous(store) == 2)
            #expect(
                try await store.pool.read { db in
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM settings WHERE name = 'probe'")
                } == 1)
            // A failure inside rolls back, and commits flush again after it too.
            await #expect(throws: ClientError.self) {
                try await store.writeUnflushed { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe2', x'00')")
                    try db.execute(sql: "INSERT INTO no_such_table VALUES (1)")
                }
            }
            #expect(try Self.writerSynchronous(store) == 2)
            #expect(
                try await store.pool.read { db in
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM settings WHERE name = 'probe2'")
                } == 0)
        }
    }

    @Test("a store flushes every commit from its opening; one opened for simulations keeps its commits unflushed")
    func simulationStoreUnchanged() async throws {
        try await withStore { store, _ in try #expect(Self.writerSynchronous(store) == 2) }
        try await withStore(durable: false) { store, _ in
            #expect(try Self.writerSynchronous(store) == 0)
            _ = try await store.writeUnflushed { _ in 0 }
            #expect(try Self.writerSynchronous(store) == 0)
        }
    }
}
