import Foundation
import OutpostProtocol
import PostgresNIO
import Testing

@testable import OutpostServer

/// A push first reads without locks and writes only if nothing it read has changed since; these are the
/// cases where something has.
@Suite("PostgreSQL conditional push")
struct PostgresConditionalPushTests {
    @Test("a record another writer changes while this one works is merged with that change, not written over")
    func recordChangedConcurrently() async throws {
        try await PostgresGapFreeTests.withHeldWriter { gate, first, second in
            // Given a stored record, and a first writer that has changed it and holds its change open,
            _ = try await second.push([Fixtures.upsert("r1", ["a": 1], at: 1)])
            let firstPush = Task { try await first.push([Fixtures.upsert("r1", ["a": 2], at: 2)]) }
            await gate.waitForArrival()
            // when a second writer, which read the record before that change, changes another field of it,
            let secondPush = Task { try await second.push([Fixtures.upsert("r1", ["b": 3], at: 3)], device: "dev-b") }
            try await PostgresGapFreeTests.waitForLockWaiter(second)
            await gate.open()
            // then both changes are kept, one version after the other.
            #expect(try await firstPush.value.map(\.version) == [2])
            #expect(try await secondPush.value.map(\.version) == [3])
            let record = try #require(try await second.pullAll().records.first)
            #expect(record.version == 3)
            #expect(record.fields == ["a": 2, "b": 3])
        }
    }

    @Test("a record another writer creates while this one works is merged with it, not written over")
    func recordCreatedConcurrently() async throws {
        try await PostgresGapFreeTests.withHeldWriter { gate, first, second in
            // Given a first writer that has created a record and holds it uncommitted,
            let firstPush = Task { try await first.push([Fixtures.upsert("r1", ["a": 1], at: 1)]) }
            await gate.waitForArrival()
            // when a second writer, which found no such record, creates it too with another field,
            let secondPush = Task { try await second.push([Fixtures.upsert("r1", ["b": 2], at: 2)], device: "dev-b") }
            try await PostgresGapFreeTests.waitForLockWaiter(second)
            await gate.open()
            // then the second's change lands on the first's record.
            #expect(try await firstPush.value.map(\.version) == [1])
            #expect(try await secondPush.value.map(\.version) == [2])
            let record = try #require(try await second.pullAll().records.first)
            #expect(record.fields == ["a": 1, "b": 2])
            #expect(try await second.audit(tenant: "acme", collection: "notes", recordId: "r1").count == 2)
        }
    }

    @Test("a write whose related record changed after it was read applies nothing of itself")
    func relatedRecordChanged() async throws {
        try await withStorage(.postgres) { storage in
            let storage = try #require(storage as? PostgresStorage)
            // Given a related record as a push read it, which then changes,
            _ = try await storage.push([Fixtures.upsert("guest", ["n": 1], at: 1)])
            let stale = try #require(try await Self.read("guest", in: storage))
            _ = try await storage.push([Fixtures.upsert("guest", ["n": 2], at: 2)])
            let items = Fixtures.items([Fixtures.upsert("note", ["n": 3], at: 3)])
            let plan = PushPlanner.plan(
                items, context: Fixtures.context(), processed: [:], records: [:], collections: .standard)
            // when the push's write counts on the version it read,
            let write = try ConditionalWrite(tenant: "acme", plan: plan, read: [:], held: [stale])
            // then the write is refused as a concurrent change, and nothing of it is stored,
            let error = await #expect(throws: StorageError.self) { try await Self.run(write, in: storage) }
            #expect(error?.code == .concurrentClaim)
            #expect(try await storage.pullAll().records.map(\.recordId) == ["guest"])
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "note").isEmpty)
            // while with the version now stored it applies.
            let fresh = try #require(try await Self.read("guest", in: storage))
            try await Self.run(
                try ConditionalWrite(tenant: "acme", plan: plan, read: [:], held: [fresh]), in: storage)
            #expect(try await storage.pullAll().records.map(\.recordId) == ["guest", "note"])
        }
    }

    @Test("the lookup probes both tables by primary key, prepared as the server runs it")
    func lookupProbes() async throws {
        try await PostgresPlanTests.withUnanalyzedStorage { storage in
            try await PostgresPlanTests.run(
                [PostgresPlanTests.fill(tenant: "established", rows: 3000), "ANALYZE records, mutations"], in: storage)
            let plan = try await storage.client.withConnection { connection in
                let logger = Fixtures.quietLogger
                try await connection.query(
                    PostgresQuery(unsafeSQL: "PREPARE lookup(text, text[], text[], text[]) AS \(PushLookup.sql)"),
                    logger: logger)
                // The plan a prepared statement settles on after its first runs: one for any tenant.
                try await connection.query("SET plan_cache_mode = force_generic_plan", logger: logger)
                var lines: [String] = []
                for try await line in try await connection.query(
                    "EXPLAIN EXECUTE lookup('newcomer', '{k1,k2}', '{notes,notes}', '{n1,n2}')", logger: logger
                ).decode(String.self) {
                    lines.append(line)
                }
                return lines.joined(separator: "\n")
            }
            #expect(plan.contains("using records_pkey on records"), "\(plan)")
            #expect(plan.contains("using mutations_pkey on mutations"), "\(plan)")
            #expect(!plan.contains("Seq Scan on records") && !plan.contains("records_by_"), "\(plan)")
            #expect(!plan.contains("Seq Scan on mutations") && !plan.contains("mutations_by_"), "\(plan)")
        }
    }

    static func read(_ recordId: String, in storage: PostgresStorage) async throws -> StoredRecord? {
        try await storage.client.withConnection { connection in
            try await PostgresStorage.lookUp(
                tenant: "acme", keys: [], records: [RecordKey(collection: "notes", recordId: recordId)],
                connection: connection, logger: Fixtures.quietLogger
            ).records.values.first
        }
    }

    static func run(_ write: ConditionalWrite, in storage: PostgresStorage) async throws {
        try await storage.guarded {
            try await storage.client.withConnection { connection in
                for try await _ in try await connection.execute(write, logger: Fixtures.quietLogger) {}
            }
        }
    }
}
