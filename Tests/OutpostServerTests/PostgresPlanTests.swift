import Foundation
import OutpostProtocol
import PostgresNIO
import Testing

@testable import OutpostServer

/// A push's lookups must stay primary-key probes for a tenant the statistics have not seen yet: the case a
/// join on the tenant's value got wrong, scanning all of the tenant's rows for every key.
@Suite("PostgreSQL push lookups")
struct PostgresPlanTests {
    @Test("records and idempotency keys are probed by primary key for a tenant missing from the statistics")
    func probesForNewTenant() async throws {
        try await Self.withUnanalyzedStorage { storage in
            // Given statistics that know one tenant, and many rows of a second that they do not know,
            try await Self.run(
                [
                    Self.fill(tenant: "established", rows: 3000),
                    "ANALYZE records, mutations",
                    Self.fill(tenant: "newcomer", rows: 6000),
                ], in: storage)
            let keys = (0..<50).map { RecordKey(collection: "notes", recordId: "n\($0 * 97)") }
            // when a push of the newcomer looks its rows up,
            let records = try await Self.plan(
                of: PostgresStorage.recordLookup(tenant: "newcomer", keys: keys), in: storage)
            let mutations = try await Self.plan(
                of: PostgresStorage.processedLookup(tenant: "newcomer", keys: keys.map { "k-\($0.recordId)" }),
                in: storage)
            // then each key is one probe of the primary key, bound on every one of its columns.
            #expect(records.contains("using records_pkey on records"), "\(records)")
            #expect(!records.contains("Seq Scan on records") && !records.contains("records_by_"), "\(records)")
            #expect(Self.indexConditions(records).allSatisfy { $0.contains("record_id = ") }, "\(records)")
            #expect(mutations.contains("using mutations_pkey on mutations"), "\(mutations)")
            #expect(!mutations.contains("Seq Scan on mutations") && !mutations.contains("mutations_by_"), "\(mutations)")
            #expect(Self.indexConditions(mutations).allSatisfy { $0.contains("idempotency_key = ") }, "\(mutations)")
            // And the lookups find what is there.
            let found = try await storage.client.query(
                PostgresStorage.recordLookup(tenant: "newcomer", keys: keys), logger: Fixtures.quietLogger)
            var count = 0
            for try await _ in found { count += 1 }
            #expect(count == keys.count)
        }
    }

    /// A migrated storage on a database of its own, with autovacuum off on the push's tables: only the
    /// analyses a test runs, or the server does, give them statistics.
    static func withUnanalyzedStorage(_ body: @escaping @Sendable (PostgresStorage) async throws -> Void) async throws {
        try await withStorage(.postgres) { storage in
            let storage = try #require(storage as? PostgresStorage)
            try await run(
                ["ALTER TABLE records SET (autovacuum_enabled = false)", "ALTER TABLE mutations SET (autovacuum_enabled = false)"],
                in: storage)
            try await body(storage)
        }
    }

    static func run(_ statements: [String], in storage: PostgresStorage) async throws {
        for statement in statements {
            try await storage.client.query(PostgresQuery(unsafeSQL: statement), logger: Fixtures.quietLogger)
        }
    }

    /// `rows` records of `tenant` with their idempotency rows; record `nK` has key `k-nK`.
    static func fill(tenant: String, rows: Int) -> String {
        """
        WITH g AS (SELECT n FROM generate_series(0, \(rows - 1)) AS n),
        r AS (INSERT INTO records (tenant, collection, record_id, scope, version, tombstone, fields, meta,
                                   created_at, updated_at, change_xid, change_seq)
              SELECT '\(tenant)', 'notes', 'n' || n, '', 1, false, '{}', '{}', 0, 0, 1, nextval('change_seq') FROM g)
        INSERT INTO mutations (tenant, idempotency_key, content_hash, device_id, user_id, user_name, collection,
                               record_id, op, fields, client_ts, received_at, status, version)
        SELECT '\(tenant)', 'k-n' || n, 'h', 'dev', 'u', 'U', 'notes', 'n' || n, 'upsert', '{}', n, n, 'applied', 1 FROM g
        """
    }

    /// The plan's index conditions, one per index scan; never empty when the plan has one.
    static func indexConditions(_ plan: String) -> [String] {
        plan.split(separator: "\n").filter { $0.contains("Index Cond:") }.map(String.init)
    }

    /// The text of the plan PostgreSQL chooses for `query`, with its values bound.
    static func plan(of query: PostgresQuery, in storage: PostgresStorage) async throws -> String {
        let explain = PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds)
        var lines: [String] = []
        for try await line in try await storage.client.query(explain, logger: Fixtures.quietLogger).decode(String.self) {
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }
}

/// A new database: PostgreSQL has no statistics until autovacuum's first analysis, and plans a push's record
/// lookup from guesses that can walk a whole collection per key.
@Suite("PostgreSQL first analysis")
struct PostgresFirstAnalysisTests {
    @Test("after its first 1,000 pushed rows a server analyzes the tables no one has, and lookups probe the primary key")
    func analyzesNewTables() async throws {
        // Autovacuum stays out of it: any analysis seen below is the server's.
        try await PostgresPlanTests.withUnanalyzedStorage { storage in
            func push(_ range: Range<Int>) async throws {
                _ = try await storage.push(range.map { Fixtures.upsert("n\($0)", ["text": .string("note \($0)")], at: Double($0)) })
            }
            try await push(0..<500)
            await storage.firstAnalysisFinished()
            #expect(try await Self.analyzed(storage).isEmpty, "analyzed before 1,000 rows")
            try await push(500..<1000)
            await storage.firstAnalysisFinished()
            #expect(try await Self.analyzed(storage) == ["mutations", "records"])
            let keys = (0..<50).map { RecordKey(collection: "notes", recordId: "n\($0 * 13)") }
            let plan = try await PostgresPlanTests.plan(
                of: PostgresStorage.recordLookup(tenant: "acme", keys: keys), in: storage)
            #expect(plan.contains("using records_pkey on records"), "\(plan)")
        }
    }

    /// The tables analyzed by hand (not by autovacuum), by name.
    static func analyzed(_ storage: PostgresStorage) async throws -> [String] {
        var names: [String] = []
        let rows = try await storage.client.query(
            "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL ORDER BY relname",
            logger: Fixtures.quietLogger)
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }
}
