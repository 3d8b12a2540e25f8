import Foundation
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

/// The behaviour every storage engine must have. Each test runs once on SQLite and once on a real PostgreSQL.
@Suite("Storage behaviour")
struct StorageBehaviourTests {
    @Test("a push applies in order and returns one result per mutation", arguments: StorageKind.allCases)
    func appliesInOrder(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let results = try await storage.push([
                Fixtures.upsert("r1", ["title": "first"], at: 1),
                Fixtures.upsert("r2", ["title": "second"], at: 2),
                Fixtures.upsert("r1", ["body": "more"], at: 3),
            ])
            #expect(results.map(\.status) == [.applied, .applied, .applied])
            #expect(results.map(\.version) == [1, 1, 2])
            let pulled = try await storage.pullAll()
            #expect(pulled.records.map(\.recordId) == ["r2", "r1"])
            #expect(pulled.records.last?.fields == ["title": "first", "body": "more"])
        }
    }

    @Test(
        "a push larger than one statement's rows, over two collections, applies every mutation once, in order",
        arguments: StorageKind.allCases)
    func largePush(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let guests = (0..<7).map {
                Fixtures.upsert("g\($0)", ["event_id": "ev-1", "name": .string("Guest \($0)")], at: 0, collection: "guests")
            }
            let notes = (0..<120).map { Fixtures.upsert("r\($0)", ["n": .integer(Int64($0))], at: Double($0)) }
            let first = try await storage.push(notes + guests)
            #expect(first.map(\.status) == Array(repeating: .applied, count: 127))
            // Half of them again with new content, among the first push sent again whole.
            let changed = (0..<60).map { Fixtures.upsert("r\($0 * 2)", ["n": .integer(-1)], at: Double(200 + $0)) }
            let second = try await storage.push(notes + changed + guests)
            #expect(second.prefix(120).allSatisfy { $0.status == .duplicate })
            #expect(second.dropFirst(120).prefix(60).map(\.version) == Array(repeating: 2, count: 60))
            #expect(second.suffix(7).allSatisfy { $0.status == .duplicate })
            let pulled = try await storage.pullAll()
            // In commit order: the untouched odd ones as first written, then the changed even ones.
            let odd = (0..<60).map { "r\($0 * 2 + 1)" }
            let even = (0..<60).map { "r\($0 * 2)" }
            #expect(pulled.records.map(\.recordId) == odd + even)
            #expect(pulled.records.suffix(60).allSatisfy { $0.fields == ["n": -1] && $0.version == 2 })
            #expect(try await storage.pullAll(collection: "guests").records.map(\.recordId) == guests.map(\.recordId))
        }
    }

    @Test(
        "a key sent again is a duplicate: nothing is written again, and the original result comes back",
        arguments: StorageKind.allCases)
    func duplicate(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let mutation = Fixtures.upsert("r1", ["title": "once"], at: 1)
            let first = try await storage.push([mutation])
            let (_, cursor) = try await storage.pullAll()
            let again = try await storage.push([mutation])
            #expect(first[0].status == .applied)
            #expect(again[0].status == .duplicate)
            #expect(again[0].originalStatus == .applied)
            #expect(again[0].version == first[0].version)
            // Nothing new to pull, and the audit holds one entry.
            #expect(try await storage.pullAll(from: cursor).records.isEmpty)
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "r1").count == 1)
        }
    }

    @Test("a key sent again with different content is refused, not taken", arguments: StorageKind.allCases)
    func keyReuse(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let original = Fixtures.upsert("r1", ["amount": 10], at: 1, key: "same-key")
            let forged = Fixtures.upsert("r1", ["amount": 99], at: 1, key: "same-key")
            _ = try await storage.push([original])
            let results = try await storage.push([forged])
            #expect(results[0].status == .rejected)
            #expect(results[0].error?.code == .idempotencyKeyReused)
            let record = try await storage.pullAll().records.first
            #expect(record?.fields["amount"] == 10)
        }
    }

    @Test("the same key twice in one batch is applied once", arguments: StorageKind.allCases)
    func duplicateInBatch(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let mutation = Fixtures.upsert("r1", ["n": 1], at: 1)
            let results = try await storage.push([mutation, mutation])
            #expect(results.map(\.status) == [.applied, .duplicate])
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "r1").count == 1)
        }
    }

    @Test("one rejected mutation does not fail the others", arguments: StorageKind.allCases)
    func rejectionIsolated(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let good1 = Fixtures.upsert("r1", ["n": 1], at: 1)
            let good2 = Fixtures.upsert("r2", ["n": 2], at: 2)
            let items: [PushItem] = [
                .valid(good1, contentHash: MutationValidator.contentHash(of: good1)),
                .rejected(.rejected("bad", .unknownCollection, "unknown collection")),
                .valid(good2, contentHash: MutationValidator.contentHash(of: good2)),
            ]
            let results = try await storage.push(items, context: Fixtures.context(), collections: .standard)
            #expect(results.map(\.status) == [.applied, .rejected, .applied])
            #expect(try await storage.pullAll().records.count == 2)
        }
    }

    @Test(
        "pull pages in commit order with tombstones, and a cursor never repeats or skips",
        arguments: StorageKind.allCases)
    func pullPaging(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            for batch in 0..<5 {
                _ = try await storage.push(
                    (0..<10).map { Fixtures.upsert("r\(batch * 10 + $0)", ["n": .integer(Int64($0))], at: Double(batch)) })
            }
            _ = try await storage.push([Fixtures.delete("r3", at: 100)])
            let all = try await storage.pullAll(limit: 7)
            #expect(all.records.count == 50)
            #expect(Set(all.records.map(\.recordId)).count == 50)
            #expect(all.records.last?.recordId == "r3")
            #expect(all.records.last?.tombstone == true)
            let nothing = try await storage.pull(
                tenant: "acme", collection: "notes", scope: nil, after: all.cursor, limit: 10)
            #expect(nothing.changes.isEmpty)
            #expect(!nothing.hasMore)
            #expect(nothing.cursor == all.cursor)
            // A later change comes after the cursor.
            _ = try await storage.push([Fixtures.upsert("r0", ["n": 42], at: 200)])
            let later = try await storage.pullAll(from: all.cursor)
            #expect(later.records.map(\.recordId) == ["r0"])
        }
    }

    @Test("a pulled row carries each stored column in its own place", arguments: StorageKind.allCases)
    func pulledColumns(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            _ = try await storage.push([Fixtures.upsert("g1", ["event_id": "ev-1", "name": "Ana"], at: 10, collection: "guests")])
            _ = try await storage.push([Fixtures.upsert("g1", ["note": "late"], at: 20, collection: "guests", scope: "ev-1")])
            try await storage.settle()
            let page = try await storage.pull(
                tenant: "acme", collection: "guests", scope: "ev-1", after: .start, limit: 10)
            let row = try #require(page.changes.first)
            #expect(page.changes.count == 1 && !page.hasMore)
            #expect(row.collection == "guests" && row.recordId == "g1" && row.scope == "ev-1")
            #expect(row.version == 2 && !row.tombstone)
            #expect(try row.change().fields == ["event_id": "ev-1", "name": "Ana", "note": "late"])
            #expect(row.createdAt == Fixtures.time(10).millisecondsSince1970)
            #expect(row.updatedAt == Fixtures.time(20).millisecondsSince1970)
            #expect(page.cursor != .start)
        }
    }

    @Test("pull and snapshot narrow to one scope", arguments: StorageKind.allCases)
    func scopes(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let guests = (0..<6).map { i in
                Fixtures.upsert(
                    "g\(i)", ["event_id": .string(i % 2 == 0 ? "ev-even" : "ev-odd"), "name": "Guest \(i)"],
                    at: Double(i), collection: "guests")
            }
            _ = try await storage.push(guests)
            let even = try await storage.pullAll(collection: "guests", scope: "ev-even")
            #expect(even.records.map(\.recordId) == ["g0", "g2", "g4"])
            let start = try await storage.snapshotStart(tenant: "acme", collection: "guests", scope: "ev-odd")
            #expect(start.total == 3)
            let page = try await storage.snapshotPage(
                tenant: "acme", collection: "guests", scope: "ev-odd",
                after: RecordPosition(recordId: "g1", scope: "ev-odd"), limit: 10)
            #expect(page.map(\.recordId) == ["g3", "g5"])
        }
    }

    @Test(
        "a page of a pull or a snapshot ends by size, and following it still gives every record once",
        arguments: StorageKind.allCases)
    func pagesBySize(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            // Each record's stored fields take a little over 300 bytes: a page of 1,000 bytes holds four.
            let filler = String(repeating: "x", count: 280)
            _ = try await storage.push(
                (0..<10).map {
                    Fixtures.upsert(
                        String(format: "g%02d", $0), ["event_id": "ev", "note": .string(filler)],
                        at: Double($0), collection: "guests")
                })
            try await storage.settle()
            let first = try await storage.pull(
                tenant: "acme", collection: "guests", scope: nil, after: .start, limit: 100, maxBytes: 1000)
            #expect(first.changes.count == 4 && first.hasMore)
            let all = try await storage.pullAll(collection: "guests", limit: 100, maxBytes: 1000)
            #expect(all.records.map(\.recordId) == (0..<10).map { String(format: "g%02d", $0) })
            // One record larger than a page still goes, alone.
            let single = try await storage.pull(
                tenant: "acme", collection: "guests", scope: nil, after: .start, limit: 100, maxBytes: 10)
            #expect(single.changes.count == 1 && single.hasMore)

            var snapshot: [String] = []
            var after: RecordPosition?
            var pages = 0
            repeat {
                let rows = try await storage.snapshotPage(
                    tenant: "acme", collection: "guests", scope: "ev", after: after, limit: 100, maxBytes: 1000)
                #expect(rows.count <= 4)
                snapshot += rows.map(\.recordId)
                after = rows.last.map { RecordPosition(recordId: $0.recordId, scope: $0.scope) }
                pages += 1
            } while after != nil && pages < 10
            #expect(snapshot == all.records.map(\.recordId))
            #expect(pages == 4)
        }
    }

    @Test(
        "a record that a mutation would take past 256 fields or 256 KiB keeps what it had",
        arguments: StorageKind.allCases)
    func recordGrowth(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let many = Dictionary(uniqueKeysWithValues: (0..<200).map { ("a\($0)", JSONValue.integer(1)) })
            let more = Dictionary(uniqueKeysWithValues: (0..<100).map { ("b\($0)", JSONValue.integer(2)) })
            let large = String(repeating: "x", count: 200 * 1024)
            let results = try await storage.push([
                Fixtures.upsert("wide", many, at: 1),
                Fixtures.upsert("wide", more, at: 2),
                Fixtures.upsert("heavy", ["a": .string(large)], at: 3),
                Fixtures.upsert("heavy", ["b": .string(large)], at: 4),
                // Replacing the large value by a small one leaves room for the second.
                Fixtures.upsert("heavy", ["a": "small", "b": .string(large)], at: 5),
            ])
            #expect(results.map(\.status) == [.applied, .rejected, .applied, .rejected, .applied])
            #expect(results[1].error?.code == .invalidFields && results[3].error?.code == .invalidFields)
            #expect(results[1].error?.message.contains("256 fields") == true)
            let wide = try #require(try await storage.record(tenant: "acme", collection: "notes", recordId: "wide"))
            #expect(wide.fields.count == 200 && wide.version == 1)
            let heavy = try #require(try await storage.record(tenant: "acme", collection: "notes", recordId: "heavy"))
            #expect(heavy.fields["a"] == "small" && heavy.version == 2)
            // Refused mutations leave no audit entry, as any refusal.
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "wide").count == 1)

            // A record stored past the limits before they existed (the storage suite skips the validator) still
            // takes changes that do not make it larger, and deletes.
            let legacy = Dictionary(uniqueKeysWithValues: (0..<300).map { ("c\($0)", JSONValue.integer(1)) })
            let changes = try await storage.push([
                Fixtures.upsert("legacy", legacy, at: 10),
                Fixtures.upsert("legacy", ["c0": 2], at: 11),
                Fixtures.upsert("legacy", ["new_field": 1], at: 12),
                Fixtures.delete("legacy", at: 13),
            ])
            #expect(changes.map(\.status) == [.applied, .applied, .rejected, .applied])
        }
    }

    @Test("a snapshot's start cursor catches every change made during the download", arguments: StorageKind.allCases)
    func snapshotCursor(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            _ = try await storage.push(
                (0..<10).map {
                    Fixtures.upsert(
                        String(format: "g%02d", $0), ["event_id": "ev", "n": .integer(Int64($0))],
                        at: Double($0), collection: "guests")
                })
            let start = try await storage.snapshotStart(tenant: "acme", collection: "guests", scope: "ev")
            let first = try await storage.snapshotPage(
                tenant: "acme", collection: "guests", scope: "ev", after: nil, limit: 5)
            // While the download is half way: one row already sent changes, one is deleted, one is added.
            _ = try await storage.push([
                Fixtures.upsert("g01", ["n": 100], at: 50, collection: "guests", scope: "ev"),
                Fixtures.delete("g07", at: 51, collection: "guests", scope: "ev"),
                Fixtures.upsert("g99", ["event_id": "ev", "n": 99], at: 52, collection: "guests"),
            ])
            let second = try await storage.snapshotPage(
                tenant: "acme", collection: "guests", scope: "ev",
                after: first.last.map { RecordPosition(recordId: $0.recordId, scope: $0.scope) }, limit: 50)
            var device: [String: [String: JSONValue]] = [:]
            for row in first + second { device[row.recordId] = try row.change().fields }
            for record in try await storage.pullAll(collection: "guests", scope: "ev", from: start.cursor).records {
                device[record.recordId] = record.tombstone ? nil : record.fields
            }
            #expect(device["g01"]?["n"] == 100)
            #expect(device["g07"] == nil)
            #expect(device["g99"] != nil)
            #expect(device.count == 10)
        }
    }

    @Test("a snapshot row sends its stored fields as they are, and they read back as the pull's", arguments: StorageKind.allCases)
    func snapshotRowsAsStored(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let fields: [String: JSONValue] = [
                "event_id": "ev", "name": "Zoë \"Q\" Ångström\n漢😀", "n": .integer(-42), "x": .number(0.25),
                "alert": .object(["level": "info", "list": .array([.null, .bool(true), "a/b\\c"])]),
            ]
            _ = try await storage.push([Fixtures.upsert("g1", fields, at: 1, collection: "guests")])
            let rows = try await storage.snapshotPage(tenant: "acme", collection: "guests", scope: "ev", after: nil, limit: 5)
            let pulled = try await storage.pullAll(collection: "guests", scope: "ev").records
            #expect(rows.count == 1)
            var bytes: [UInt8] = []
            try rows[0].writeJSON(to: &bytes)
            let change = try JSONDecoder().decode(Change.self, from: Data(bytes))
            #expect(change == pulled.first)
            #expect(change.fields == fields)
        }
    }

    @Test("one tenant can never read or change another's data", arguments: StorageKind.allCases)
    func tenantIsolation(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let mutation = Fixtures.upsert("shared-id", ["secret": "acme-only"], at: 1, key: "same-key")
            _ = try await storage.push([mutation], tenant: "acme")
            // The same key and record id at another tenant is that tenant's own, independent write.
            let other = Fixtures.upsert("shared-id", ["secret": "globex"], at: 1, key: "same-key")
            let results = try await storage.push([other], tenant: "globex")
            #expect(results[0].status == .applied)
            #expect(results[0].version == 1)
            #expect(try await storage.pullAll(tenant: "acme").records.first?.fields["secret"] == "acme-only")
            #expect(try await storage.pullAll(tenant: "globex").records.first?.fields["secret"] == "globex")
            #expect(try await storage.pullAll(tenant: "initech").records.isEmpty)
            #expect(try await storage.audit(tenant: "initech", collection: "notes", recordId: "shared-id").isEmpty)
            #expect(try await storage.snapshotStart(tenant: "initech", collection: "notes", scope: nil).total == 0)
        }
    }

    @Test("the audit keeps device, user and client time, in client-time order", arguments: StorageKind.allCases)
    func audit(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            // Replayed out of order, long after they happened.
            _ = try await storage.push([Fixtures.upsert("r1", ["s": "b"], at: 20, device: "dev-b")], device: "dev-b")
            _ = try await storage.push([Fixtures.upsert("r1", ["s": "a"], at: 10)], device: "dev-a")
            let entries = try await storage.audit(tenant: "acme", collection: "notes", recordId: "r1")
            #expect(entries.map(\.deviceId) == ["dev-a", "dev-b"])
            #expect(entries.map(\.clientTimestamp) == [Fixtures.time(10), Fixtures.time(20)])
            #expect(entries.allSatisfy { $0.receivedAt == Fixtures.time(3600) && $0.userId == "ana" })
            // The record's own times are the client's, never the time of replay.
            let record = try #require(try await storage.pullAll().records.first)
            #expect(record.createdAt == Fixtures.time(10))
            #expect(record.updatedAt == Fixtures.time(20))
        }
    }

    @Test(
        "a protected-field conflict is answered, kept for review and replayed as a duplicate",
        arguments: StorageKind.allCases)
    func conflicts(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let activity: [String: JSONValue] = ["type": "visit", "date": "2026-11-20", "duration_minutes": 60]
            _ = try await storage.push([
                Fixtures.upsert("a1", activity.merging(["amount": "100.00"]) { $1 }, at: 0, collection: "activities")
            ])
            _ = try await storage.push([
                Fixtures.upsert("a1", ["amount": "150.00"], at: 5, collection: "activities", device: "dev-b", base: 1)
            ])
            let stale = Fixtures.upsert("a1", ["amount": "90.00", "notes": "x"], at: 9, collection: "activities", base: 1)
            let results = try await storage.push([stale])
            #expect(results[0].status == .conflict)
            #expect(results[0].conflict?.serverFields == ["amount": "150.00"])
            let again = try await storage.push([stale])
            #expect(again[0].status == .duplicate)
            #expect(again[0].originalStatus == .conflict)
            #expect(again[0].conflict == results[0].conflict)
            let kept = try await storage.conflicts(tenant: "acme", collection: "activities", limit: 10)
            #expect(kept.count == 1)
            #expect(kept.first?.attemptedFields == ["amount": "90.00"])
            #expect(kept.first?.conflictId == results[0].conflict?.conflictId)
            let record = try await storage.pullAll(collection: "activities").records.first
            #expect(record?.fields == activity.merging(["amount": "150.00", "notes": "x"]) { $1 })
            #expect(try await storage.conflicts(tenant: "globex", collection: nil, limit: 10).isEmpty)
        }
    }

    @Test("the same push sent by many tasks at once is applied exactly once", arguments: StorageKind.allCases)
    func concurrentReplays(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let batch = (0..<20).map { Fixtures.upsert("r\($0)", ["n": .integer(Int64($0))], at: Double($0)) }
            let outcomes = try await withThrowingTaskGroup(of: [MutationResult].self) { group in
                for _ in 0..<8 { group.addTask { try await storage.push(batch) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            for index in 0..<20 {
                let applied = outcomes.filter { $0[index].status == .applied }.count
                #expect(applied == 1, "mutation \(index) applied \(applied) times")
            }
            #expect(try await storage.pullAll().records.allSatisfy { $0.version == 1 })
            for index in 0..<20 {
                #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "r\(index)").count == 1)
            }
        }
    }

    @Test(
        "concurrent writers and pullers: every puller ends with exactly the final state",
        arguments: StorageKind.allCases)
    func concurrentWritersAndPullers(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let writers = 6
            let batches = 15
            let recordsPerWriter = 12
            // Every write carries a new value with a later time, so a record's final version is its write count.
            var expected: [String: Int64] = [:]
            for writer in 0..<writers {
                for n in 0..<(batches * 5) { expected["w\(writer)-r\(n % recordsPerWriter)", default: 0] += 1 }
            }
            let target = expected
            let states = try await withThrowingTaskGroup(of: [String: Int64]?.self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        for batch in 0..<batches {
                            let mutations = (0..<5).map { i in
                                Fixtures.upsert(
                                    "w\(writer)-r\((batch * 5 + i) % recordsPerWriter)",
                                    ["v": .integer(Int64(batch * 5 + i))], at: Double(batch * 5 + i),
                                    device: "dev-\(writer)")
                            }
                            _ = try await storage.push(mutations, device: "dev-\(writer)")
                        }
                        return nil
                    }
                }
                for _ in 0..<3 {
                    group.addTask {
                        var state: [String: Int64] = [:]
                        var cursor = PullCursor.start
                        // Only a hang reaches this bound: a transaction another test holds open on the shared
                        // PostgreSQL holds back what every pull may return.
                        let deadline = ContinuousClock.now.advanced(by: testWaitLimit)
                        while state != target && ContinuousClock.now < deadline {
                            let page = try await storage.pull(
                                tenant: "acme", collection: "notes", scope: nil, after: cursor, limit: 13)
                            for record in page.changes {
                                #expect(record.version >= (state[record.recordId] ?? 0))
                                state[record.recordId] = record.version
                            }
                            #expect(page.cursor >= cursor)
                            cursor = page.cursor
                            await Task.yield()
                        }
                        return state
                    }
                }
                return try await group.reduce(into: [[String: Int64]]()) { if let state = $1 { $0.append(state) } }
            }
            let final = Dictionary(
                uniqueKeysWithValues: try await storage.pullAll().records.map { ($0.recordId, $0.version) })
            #expect(final == expected)
            #expect(states.count == 3)
            for state in states {
                #expect(state == expected)
            }
        }
    }

    @Test("migrations are versioned and can run again", arguments: StorageKind.allCases)
    func migrateTwice(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            try await storage.migrate()
            _ = try await storage.push([Fixtures.upsert("r1", ["n": 1])])
            try await storage.migrate()
            #expect(try await storage.pullAll().records.count == 1)
        }
    }

    @Test("the signing secret is created once and then kept", arguments: StorageKind.allCases)
    func secretKept(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let first = try await storage.signingSecret(creatingWith: { TokenAuthority.generateSecret() })
            let second = try await storage.signingSecret(creatingWith: { TokenAuthority.generateSecret() })
            #expect(first == second)
            #expect(first.count == 32)
        }
    }
}
