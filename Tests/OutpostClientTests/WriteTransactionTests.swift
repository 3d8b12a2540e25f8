import Foundation
import GRDB
import GRDBSQLite
import NIOConcurrencyHelpers
import Testing

@testable import OutpostClient

/// Local writes run in `BEGIN IMMEDIATE` transactions through statements prepared once per connection.
@Suite("Local write transactions")
struct WriteTransactionTests {
    struct Refused: Error {}

    @Test("the write lock is held from the transaction's start, before anything is written")
    func immediate() async throws {
        try await withStore { store, url in
            let other = try DatabaseQueue(path: url.path)
            try await store.writeImmediate { _ in
                // Another connection cannot start writing, though this transaction has not written yet.
                #expect(throws: DatabaseError.self) {
                    try other.writeWithoutTransaction { db in
                        try db.execute(sql: "BEGIN IMMEDIATE")
                        try db.execute(sql: "ROLLBACK")
                    }
                }
            }
            try await other.writeWithoutTransaction { db in
                try db.execute(sql: "BEGIN IMMEDIATE")
                try db.execute(sql: "ROLLBACK")
            }
        }
    }

    @Test(
        "local writes waiting on another process's write lock hold no cooperative thread: other tasks run meanwhile, and the writes land once the lock is let go"
    )
    func waitingWritesSuspend() async throws {
        try await withStore { store, url in
            // Another connection to the file, as another process holding the store would be, takes the write lock.
            var configuration = Configuration()
            configuration.allowsUnsafeTransactions = true
            let other = try DatabaseQueue(path: url.path, configuration: configuration)
            try await other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
            let released = NIOLockedValueBox(false)
            @Sendable func release() throws {
                try released.withLockedValue { released in
                    guard !released else { return }
                    released = true
                    try other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }
                }
            }
            defer { try? release() }

            // More writes than Swift has cooperative threads, each waiting for the lock (for up to the store's
            // 10 s busy timeout: were they to block their threads, nothing below could run until they failed).
            let count = 4 * ProcessInfo.processInfo.activeProcessorCount + 2
            let landed = NIOLockedValueBox(0)
            let writes = (0..<count).map { index in
                Task {
                    _ = try await store.write(
                        .init(collection: "notes", recordId: "n\(index)", fields: ["title": "waited"]), deviceId: "d",
                        at: Date(), offline: true)
                    landed.withLockedValue { $0 += 1 }
                }
            }
            // As many other tasks run to their end while every write still waits.
            let ran = await withTaskGroup(of: Int.self) { group in
                for index in 0..<count {
                    group.addTask {
                        await Task.yield()
                        return index
                    }
                }
                return await group.reduce(into: 0) { total, _ in total += 1 }
            }
            #expect(ran == count)
            #expect(landed.withLockedValue { $0 } == 0, "a write landed while the lock was held")
            try release()
            for write in writes { try await write.value }
            #expect(landed.withLockedValue { $0 } == count)
            #expect(try await store.records().count == count)
        }
    }

    @Test("a failure inside, or in the commit itself, rolls everything back and the next writes go through")
    func rollback() async throws {
        try await withStore { store, _ in
            try await store.pool.write { db in
                try db.execute(sql: "CREATE TABLE parent (id INTEGER PRIMARY KEY)")
                try db.execute(sql: "CREATE TABLE child (parent_id INTEGER NOT NULL REFERENCES parent (id))")
            }
            for _ in 0..<3 {
                await #expect(throws: Refused.self) {
                    try await store.writeImmediate { db in
                        try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                        throw Refused()
                    }
                }
                // A foreign key checked at commit: the commit fails and leaves the transaction open.
                await #expect(throws: DatabaseError.self) {
                    try await store.writeImmediate { db in
                        try db.execute(sql: "PRAGMA defer_foreign_keys = ON")
                        try db.execute(sql: "INSERT INTO settings (name, value) VALUES ('probe', x'00')")
                        try db.execute(sql: "INSERT INTO child (parent_id) VALUES (42)")
                    }
                }
            }
            #expect(
                try await store.pool.read { db in
                    try Int.fetchOne(db, sql: "SELECT (SELECT count(*) FROM settings WHERE name = 'probe') + (SELECT count(*) FROM child)")
                } == 0)
            for index in 0..<3 {
                _ = try await store.write(
                    .init(collection: "notes", recordId: "n\(index)", fields: ["title": "kept"]), deviceId: "d", at: Date(),
                    offline: false)
            }
            #expect(try await store.records().count == 3)
        }
    }
}

/// Reads run in deferred transactions that leave the connection's prepared statements alone.
@Suite("Store reads")
struct StoreReadTests {
    typealias Refused = WriteTransactionTests.Refused

    @Test("reads leave the statements a local write and a push prepared as they were")
    func statementsKept() async throws {
        try await withStore { store, _ in
            let write = LocalStore.Write(collection: "notes", recordId: "n0", fields: ["title": "first"])
            _ = try await store.write(write, deviceId: "d", at: Date(), offline: true)
            _ = try await store.outbox.nextChunk(limit: 50)
            // How often the statement a local write begins with was prepared again, as it is cached; read on the
            // store's connection, with the handle it has then.
            let begin = try await store.pool.writeWithoutTransaction { db in
                UInt(bitPattern: try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").sqliteStatement)
            }
            let reprepared = {
                try store.pool.writeWithoutTransaction { db in
                    let statement = try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").sqliteStatement
                    #expect(UInt(bitPattern: statement) == begin, "the cached statement was replaced")
                    return sqlite3_stmt_status(statement, SQLITE_STMTSTATUS_REPREPARE, 0)
                }
            }
            let before = try reprepared()
            // Given the reads a syncing device makes between its writes,
            _ = try await store.counts()
            _ = try await store.outbox.nextChunk(limit: 50)
            _ = try await store.records()
            _ = try await store.outbox.count()
            // when it writes again, its statements run as they were prepared: none compiled again.
            _ = try await store.write(
                .init(collection: "notes", recordId: "n1", fields: ["title": "second"]), deviceId: "d", at: Date(), offline: true)
            #expect(try reprepared() == before)
            #expect(try await store.outbox.count() == 2)
        }
    }

    @Test("a read cancelled while it runs ends its transaction, and reads and writes go on")
    func cancelledRead() async throws {
        try await withStore { store, _ in
            let (entered, signal) = AsyncStream<Void>.makeStream()
            // Given a read that runs statements until its task's cancellation stops one,
            let reading = Task {
                try await store.read { db in
                    signal.yield()
                    while true { _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM records") }
                }
            }
            var started = entered.makeAsyncIterator()
            await started.next()
            // when its task is cancelled,
            reading.cancel()
            let outcome = await reading.result
            #expect(throws: (any Error).self) { try outcome.get() }
            // its transaction is over, and the store reads and writes as before.
            #expect(try await store.pool.unsafeRead { db in db.isInsideTransaction } == false)
            _ = try await store.write(
                .init(collection: "notes", recordId: "n0", fields: ["title": "kept"]), deviceId: "d", at: Date(), offline: false)
            #expect(try await store.records().count == 1)
        }
    }

    @Test("a read that fails leaves no transaction open, and writes go on")
    func failedRead() async throws {
        try await withStore { store, _ in
            await #expect(throws: Refused.self) {
                try await store.read { db in
                    _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM records")
                    throw Refused()
                }
            }
            #expect(try await store.pool.unsafeRead { db in db.isInsideTransaction } == false)
            _ = try await store.write(
                .init(collection: "notes", recordId: "n0", fields: ["title": "kept"]), deviceId: "d", at: Date(), offline: false)
            #expect(try await store.records().count == 1)
        }
    }
}
