import Foundation
import OutpostProtocol
import OutpostTesting
import PostgresNIO
import Testing

@testable import OutpostServer

/// The case sequence numbers alone get wrong on PostgreSQL: a slow writer that commits after a faster one.
@Suite("PostgreSQL pull is gap-free")
struct PostgresGapFreeTests {
    @Test("a change committed late by a slow transaction is not skipped by a reader that moved past it")
    func lateCommitNotSkipped() async throws {
        // Given a slow writer that has written and holds its transaction open,
        try await Self.withHeldWriter { gate, slow, fast in
            let slowPush = Task { try await slow.push([Fixtures.upsert("slow", ["n": 1], at: 1)]) }
            await gate.waitForArrival()
            // when a faster writer commits after it,
            _ = try await fast.push([Fixtures.upsert("fast", ["n": 2], at: 2)], device: "dev-b")
            // then a reader sees neither yet: the fast change waits behind the open transaction,
            let during = try await fast.pull(
                tenant: "acme", collection: "notes", scope: nil, after: .start, limit: 100)
            #expect(during.changes.isEmpty)
            // and once the slow writer commits, the reader, continuing from its cursor, gets both.
            await gate.open()
            _ = try await slowPush.value
            let after = try await fast.pullAll(from: during.cursor)
            #expect(Set(after.records.map(\.recordId)) == ["slow", "fast"])
        }
    }

    @Test("a push interrupted just before commit leaves nothing behind, and sent again applies once")
    func interruptedPush() async throws {
        try await withPostgresDatabase { url in
            let location = try PostgresLocation(url: url)
            struct Crash: Error {}
            let crashing = PostgresStorage(
                location: location, logger: Fixtures.quietLogger, beforeCommit: { throw Crash() })
            let healthy = PostgresStorage(location: location, logger: Fixtures.quietLogger, startupTimeout: Fixtures.postgresStartup)
            let batch = (0..<5).map { Fixtures.upsert("r\($0)", ["n": .integer(Int64($0))], at: Double($0)) }
            try await crashing.withRunning { crashing in
                try await healthy.withRunning { healthy in
                    try await healthy.migrate()
                    await #expect(throws: (any Error).self) { _ = try await crashing.push(batch) }
                    #expect(try await healthy.pullAll().records.isEmpty)
                    #expect(try await healthy.audit(tenant: "acme", collection: "notes", recordId: "r0").isEmpty)
                    let results = try await healthy.push(batch)
                    #expect(results.allSatisfy { $0.status == .applied })
                    let again = try await healthy.push(batch)
                    #expect(again.allSatisfy { $0.status == .duplicate })
                    #expect(try await healthy.pullAll().records.allSatisfy { $0.version == 1 })
                }
            }
        }
    }

    @Test("a key another process claims while this one works is answered as a duplicate, applied once")
    func keyClaimedConcurrently() async throws {
        // Given one process that has written a key and holds its transaction open,
        try await Self.withHeldWriter { gate, first, second in
            let mutation = Fixtures.upsert("r1", ["n": 1])
            let firstPush = Task { try await first.push([mutation]) }
            await gate.waitForArrival()
            // when another process is sent the same key (it finds no claim yet, then waits on the
            // first's uncommitted record) and the first commits,
            let secondPush = Task { try await second.push([mutation], device: "dev-b") }
            try await Self.waitForLockWaiter(second)
            await gate.open()
            // then the first applies it, the second answers a duplicate, and the record is written once.
            #expect(try await firstPush.value[0].status == .applied)
            #expect(try await secondPush.value[0].status == .duplicate)
            #expect(try await second.pullAll().records.map(\.version) == [1])
            #expect(try await second.audit(tenant: "acme", collection: "notes", recordId: "r1").count == 1)
        }
    }

    @Test("several server processes share one database as one server")
    func twoProcessesOneDatabase() async throws {
        try await withPostgresDatabase { url in
            let location = try PostgresLocation(url: url)
            let a = PostgresStorage(location: location, logger: Fixtures.quietLogger, startupTimeout: Fixtures.postgresStartup)
            let b = PostgresStorage(location: location, logger: Fixtures.quietLogger, startupTimeout: Fixtures.postgresStartup)
            try await a.withRunning { a in
                try await b.withRunning { b in
                    // Both migrate at once, as two processes starting together would.
                    async let migrateA: Void = a.migrate()
                    async let migrateB: Void = b.migrate()
                    _ = try await (migrateA, migrateB)
                    let secretA = try await a.signingSecret(creatingWith: { TokenAuthority.generateSecret() })
                    let secretB = try await b.signingSecret(creatingWith: { TokenAuthority.generateSecret() })
                    #expect(secretA == secretB)
                    let mutation = Fixtures.upsert("r1", ["n": 1])
                    #expect(try await a.push([mutation])[0].status == .applied)
                    #expect(try await b.push([mutation])[0].status == .duplicate)
                    #expect(try await b.pullAll().records.map(\.recordId) == ["r1"])
                }
            }
        }
    }

    @Test("a server waiting longer than its operation bound for another process's migration migrates once that one ends")
    func migrationOutlastsOperationBound() async throws {
        try await withPostgresDatabase { url in
            // Given a server whose operations are bounded at 1 s, and another process migrating the database,
            let bounded = url.replacingOccurrences(
                of: "operation_timeout=\(TestPostgres.operationTimeout)", with: "operation_timeout=1")
            let location = try PostgresLocation(url: bounded)
            #expect(location.operationTimeout == .seconds(1))
            let storage = PostgresStorage(location: location, logger: Fixtures.quietLogger, startupTimeout: Fixtures.postgresStartup)
            let other = PostgresStorage(
                location: try PostgresLocation(url: url), logger: Fixtures.quietLogger, startupTimeout: Fixtures.postgresStartup)
            try await storage.withRunning { storage in
                try await other.withRunning { other in
                    let release = Gate()
                    let migrating = Task {
                        try await other.client.withTransaction(logger: Fixtures.quietLogger) { connection in
                            try await connection.query("SELECT pg_advisory_xact_lock(7081981001)", logger: Fixtures.quietLogger)
                            await release.arriveAndWait()
                        }
                    }
                    await release.waitForArrival()
                    // when this server's migration waits for it past that bound,
                    let migration = Task { try await storage.migrate() }
                    try await Self.waitForLockWaiter(other)
                    try await Task.sleep(for: .seconds(2))
                    await release.open()
                    try await migrating.value
                    // then it migrates.
                    try await migration.value
                    #expect(try await other.push([Fixtures.upsert("r1", ["n": 1])])[0].status == .applied)
                }
            }
        }
    }
}

extension PostgresGapFreeTests {
    /// Two storages on one fresh database, as two server processes: the first holds each push's transaction
    /// open before it commits, until the gate opens.
    static func withHeldWriter(
        _ body: @Sendable (Gate, PostgresStorage, PostgresStorage) async throws -> Void
    ) async throws {
        try await withPostgresDatabase { url in
            let location = try PostgresLocation(url: url)
            let gate = Gate()
            let held = PostgresStorage(
                location: location, logger: Fixtures.quietLogger, beforeCommit: { await gate.arriveAndWait() })
            let other = PostgresStorage(location: location, logger: Fixtures.quietLogger, startupTimeout: Fixtures.postgresStartup)
            try await held.withRunning { held in
                try await other.withRunning { other in
                    try await other.migrate()
                    try await body(gate, held, other)
                }
            }
        }
    }

    /// Returns once a statement waits for a lock: the second writer has read the claims and records, found
    /// nothing of the first's yet, and queued behind it (on a row or a key the first has written).
    ///
    /// Only this test's database counts: other tests share the cluster, and a row lock's `database` is null.
    static func waitForLockWaiter(_ storage: PostgresStorage) async throws {
        let deadline = ContinuousClock.now.advanced(by: testWaitLimit)
        while ContinuousClock.now < deadline {
            let rows = try await storage.client.query(
                """
                SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE NOT l.granted AND a.datname = current_database()
                """, logger: Fixtures.quietLogger)
            for try await waiting in rows.decode(Int64.self) where waiting > 0 { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("no transaction came to wait for the record's lock")
    }
}

/// Lets a test hold a transaction open at a known point and release it.
actor Gate {
    private var arrived = false
    private var isOpen = false
    private var arrivalWaiters: [CheckedContinuation<Void, Never>] = []
    private var openWaiters: [CheckedContinuation<Void, Never>] = []

    func arriveAndWait() async {
        arrived = true
        arrivalWaiters.forEach { $0.resume() }
        arrivalWaiters = []
        if isOpen { return }
        await withCheckedContinuation { openWaiters.append($0) }
    }

    func waitForArrival() async {
        if arrived { return }
        await withCheckedContinuation { arrivalWaiters.append($0) }
    }

    func open() {
        isOpen = true
        openWaiters.forEach { $0.resume() }
        openWaiters = []
    }
}
