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
            let during = try store.writeUnflushed { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
            #expect(during == 1)
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 2)
            #expect(throws: Refused.self) {
                try store.writeUnflushed { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                    throw Refused()
                }
            }
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 2)
            // and the failed one left nothing behind.
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM settings WHERE name = 'probe'") } == 0)
        }
    }

    @Test("a cancelled task still records the results and leaves commits flushing")
    func cancelled() async throws {
        try await withStore { store, _ in
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try store.writeUnflushed { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                    return Task.isCancelled
                }
            }
            let sawCancellation = try await task.value
            let synchronous = try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
            let written = try await store.queue.read { db in
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
                return try await store.writeUnflushedOnQueue { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                    return try Int.fetchOne(db, sql: "PRAGMA synchronous")
                }
            }
            let during = try await task.value
            #expect(during == 1)
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 2)
            #expect(
                try await store.queue.read { db in
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM settings WHERE name = 'probe'")
                } == 1)
            // A failure inside rolls back, and commits flush again after it too.
            await #expect(throws: ClientError.self) {
                try await store.writeUnflushedOnQueue { db in
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe2', x'00')")
                    try db.execute(sql: "INSERT INTO no_such_table VALUES (1)")
                }
            }
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 2)
            #expect(
                try await store.queue.read { db in
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM settings WHERE name = 'probe2'")
                } == 0)
        }
    }

    @Test("a store opened for simulations keeps its commits unflushed")
    func simulationStoreUnchanged() async throws {
        try await withStore(durable: false) { store, _ in
            _ = try store.writeUnflushed { _ in 0 }
            #expect(try await store.queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 0)
        }
    }
}
