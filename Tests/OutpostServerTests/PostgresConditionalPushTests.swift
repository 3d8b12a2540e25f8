import Foundation
import OutpostProtocol
import OutpostRecords
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

    @Test("a push of records nobody has stored yet is written without reading first")
    func newRecordsWritten() async throws {
        try await withStorage(.postgres) { storage in
            let storage = try #require(storage as? PostgresStorage)
            // Given two records a device created and never had from the server,
            let mutations = [Fixtures.upsert("n1", ["a": 1], at: 1), Fixtures.upsert("n2", ["a": 2], at: 2)]
            // when the push takes the path for new records,
            guard case .written(let results)? = try await Self.pushNew(mutations, in: storage) else {
                Issue.record("the push was not written")
                return
            }
            // then both are stored at version 1, in the push's order, each with its idempotency row.
            #expect(results.map(\.status) == [.applied, .applied])
            #expect(results.map(\.version) == [1, 1])
            let records = try await storage.pullAll().records
            #expect(records.map(\.recordId) == ["n1", "n2"])
            #expect(records.map(\.fields) == [["a": 1], ["a": 2]])
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "n2").count == 1)
            // A second push of the same records is answered as duplicates.
            #expect(try await storage.push(mutations).map(\.status) == [.duplicate, .duplicate])
        }
    }

    @Test(
        "a push of new records that meets a stored record or key writes nothing of itself, and goes on from what it read",
        arguments: ["record", "key"])
    func newRecordsMeetStored(_ stored: String) async throws {
        try await withStorage(.postgres) { storage in
            let storage = try #require(storage as? PostgresStorage)
            // Given a stored record, and a push of a new record with either a change to the stored one (created
            // offline, changed again in a later chunk) or the very mutation already stored (an answer lost),
            let first = Fixtures.upsert("old", ["a": 1], at: 1)
            _ = try await storage.push([first])
            let again = stored == "record" ? Fixtures.upsert("old", ["b": 2], at: 2) : first
            let mutations = [Fixtures.upsert("new", ["a": 3], at: 3), again]
            // when the push tries the path for new records,
            // then that path stores nothing, not even the new record, and answers what it found stored,
            guard case .found(let found)? = try await Self.pushNew(mutations, in: storage) else {
                Issue.record("the statement did not answer what it found")
                return
            }
            #expect(found.records.keys.map(\.recordId) == ["old"])
            #expect(found.records.values.first?.fields == ["a": 1])
            #expect(Set(found.processed.keys) == (stored == "record" ? [] : [first.idempotencyKey]))
            #expect(try await storage.pullAll().records.map(\.recordId) == ["old"])
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "new").isEmpty)
            // and the push as the server runs it stores the new record once and answers the other rightly.
            let results = try await storage.push(mutations)
            #expect(results.map(\.status) == [.applied, stored == "record" ? .applied : .duplicate])
            #expect(results.map(\.version) == [1, stored == "record" ? 2 : 1])
            let records = try await storage.pullAll().records
            #expect(Set(records.map(\.recordId)) == ["old", "new"])
            #expect(records.first { $0.recordId == "old" }?.fields == (stored == "record" ? ["a": 1, "b": 2] : ["a": 1]))
        }
    }

    @Test("only creations from the device, in collections whose rules read no other record, skip the read")
    func newRecordsOnlyWhenNothingToRead() async throws {
        try await withStorage(.postgres) { storage in
            let storage = try #require(storage as? PostgresStorage)
            let checkIn = Mutation(
                idempotencyKey: "door:g1", collection: CheckIn.collection, recordId: "g1", op: .upsert,
                fields: [CheckIn.Field.guestId: "g1"], clientTimestamp: Fixtures.time(1))
            let refused: [(String, Mutation)] = [
                ("a change to a record the device had from the server", Fixtures.upsert("r", ["a": 1], at: 1, base: 1)),
                ("a deletion", Fixtures.delete("r", at: 1)),
                ("a check-in, whose rule reads its guest", checkIn),
            ]
            for (what, mutation) in refused {
                let mutations = [Fixtures.upsert("plain", ["a": 1], at: 0), mutation]
                #expect(try await Self.pushNew(mutations, in: storage) == nil, "\(what)")
            }
            #expect(try await storage.pullAll().records.isEmpty)
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "plain").isEmpty)
        }
    }

    @Test("the lookup probes both tables by primary key, prepared as the server runs it")
    func lookupProbes() async throws {
        try await PostgresPlanTests.withUnanalyzedStorage { storage in
            try await PostgresPlanTests.run(
                [PostgresPlanTests.fill(tenant: "established", rows: 3000), "ANALYZE records, mutations"], in: storage)
            Self.expectPrimaryKeyProbes(
                try await Self.genericPlan(
                    of: PushLookup.sql, executing: "'newcomer', '{k1,k2}', '{notes,notes}', '{n1,n2}', '{\"\",\"\"}'",
                    in: storage))
        }
    }

    @Test("the statement for new records probes both tables by primary key, prepared as the server runs it")
    func newRecordsProbes() async throws {
        try await PostgresPlanTests.withUnanalyzedStorage { storage in
            try await PostgresPlanTests.run(
                [PostgresPlanTests.fill(tenant: "established", rows: 3000), "ANALYZE records, mutations"], in: storage)
            // One record and its key: text arrays but for the version, tombstone and time columns.
            let records = "'{notes}', '{n1}', '{\"\"}', '{1}', '{f}', '{\"{}\"}', '{\"{}\"}', '{0}', '{0}'"
            let keys = (0..<MutationsInsert.arrayCount).map { [9, 11, 13].contains($0) ? "'{0}'" : "'{k1}'" }
                .joined(separator: ", ")
            Self.expectPrimaryKeyProbes(
                try await Self.genericPlan(
                    of: NewRecordsWrite.sql, executing: "'newcomer', \(records), \(keys), '{ana}'", in: storage))
        }
    }

    /// The plan PostgreSQL settles on for `sql` after a prepared statement's first runs, one for any tenant,
    /// given the values `arguments`.
    static func genericPlan(
        of sql: String, executing arguments: String, in storage: PostgresStorage
    ) async throws
        -> String
    {
        try await storage.client.withConnection { connection in
            let logger = Fixtures.quietLogger
            try await connection.query(PostgresQuery(unsafeSQL: "PREPARE statement AS \(sql)"), logger: logger)
            try await connection.query("SET plan_cache_mode = force_generic_plan", logger: logger)
            var lines: [String] = []
            for try await line in try await connection.query(
                PostgresQuery(unsafeSQL: "EXPLAIN EXECUTE statement(\(arguments))"), logger: logger
            ).decode(String.self) {
                lines.append(line)
            }
            return lines.joined(separator: "\n")
        }
    }

    /// Both tables are read by their primary keys only: no scan, no other index.
    static func expectPrimaryKeyProbes(_ plan: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(plan.contains("using records_pkey on records"), "\(plan)", sourceLocation: sourceLocation)
        #expect(plan.contains("using mutations_pkey on mutations"), "\(plan)", sourceLocation: sourceLocation)
        #expect(!plan.contains("Seq Scan on records") && !plan.contains("records_by_"), "\(plan)", sourceLocation: sourceLocation)
        #expect(!plan.contains("Seq Scan on mutations") && !plan.contains("mutations_by_"), "\(plan)", sourceLocation: sourceLocation)
    }

    static func read(_ recordId: String, in storage: PostgresStorage) async throws -> StoredRecord? {
        try await storage.client.withConnection { connection in
            try await PostgresStorage.lookUp(
                tenant: "acme", keys: [], records: [RecordKey(collection: "notes", recordId: recordId)],
                connection: connection, logger: Fixtures.quietLogger
            ).records.values.first
        }
    }

    /// The path for new records alone: what it did, or nil when the push is not one for it.
    static func pushNew(
        _ mutations: [Mutation], in storage: PostgresStorage
    ) async throws
        -> PostgresStorage.NewRecordsOutcome?
    {
        let items = Fixtures.items(mutations)
        let recordKeys = PushPlanner.recordKeys(of: items, context: Fixtures.context()).sorted()
        return try await storage.guarded {
            try await storage.client.withConnection { connection in
                try await PostgresStorage.pushNew(
                    items, context: Fixtures.context(), recordKeys: recordKeys, collections: .standard,
                    connection: connection, logger: Fixtures.quietLogger, beforeCommit: nil)
            }
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
