import Foundation
import GRDB
import OutpostProtocol
import Testing

@testable import OutpostClient

/// The `outbox` table's row type: the order entries go out in, what a chunk holds, and what becomes of an
/// answered entry.
@Suite("Outbox rows")
struct OutboxRowTests {
    private static func row(_ n: Int, record: String, scope: String = "", sealer: Sealer) throws -> OutboxRow {
        let key = "d1:\(n)"
        return OutboxRow(
            idempotencyKey: key, record: RecordKey("notes", scope, record), op: .upsert, clientTime: Int64(1_000 + n),
            baseVersion: nil, payload: try sealer.seal(Array(#"{"n":\#(n)}"#.utf8), context: OutboxRow.payloadContext(key)),
            timestampField: nil)
    }

    @Test("entries go out in the order they were queued, opened into the mutations that were written")
    func pendingInOrder() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let entries = try await store.writeImmediate { db in
                for n in 1...5 { try Self.row(n, record: "r\(n % 2)", scope: n == 3 ? "e1" : "", sealer: sealer).insert(db) }
                return try OutboxRow.pending(after: 1, limit: 3, of: nil, db).map { try $0.entry(opening: sealer) }
            }
            #expect(entries.map(\.seq) == [2, 3, 4])
            #expect(entries.map(\.mutation.idempotencyKey) == ["d1:2", "d1:3", "d1:4"])
            #expect(entries[1].mutation.scope == "e1" && entries[0].mutation.scope == nil)
            #expect(entries[0].mutation.fields == ["n": 2])
            #expect(entries[0].mutation.clientTimestamp == Timestamp(millisecondsSince1970: 1_002))
        }
    }

    @Test("a chunk of some records holds their entries alone, the same id in another scope left out")
    func pendingOfRecords() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let seqs = try await store.writeImmediate { db in
                for n in 1...6 { try Self.row(n, record: "r\(n % 3)", scope: n == 4 ? "e2" : "", sealer: sealer).insert(db) }
                return try OutboxRow.pending(after: 0, limit: 10, of: [RecordKey("notes", "", "r1")], db).compactMap(\.seq)
            }
            #expect(seqs == [1], "r1 is entries 1 and 4, and entry 4 is r1 of scope e2")
        }
    }

    @Test("a confirmed entry leaves; a refused one is set aside, counted and out of the chunks")
    func answered() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let (left, count, attempts) = try await store.writeImmediate { db in
                for n in 1...4 { try Self.row(n, record: "r\(n)", sealer: sealer).insert(db) }
                try OutboxRow.remove([1, 3], db)
                try OutboxRow.markAttempt(2, state: .rejected, at: 9_000, db)
                try OutboxRow.markAttempt(4, state: .pending, at: 9_000, db)
                return (
                    try OutboxRow.pending(after: 0, limit: 10, of: nil, db).compactMap(\.seq), try OutboxRow.pendingCount(db),
                    try Int.fetchAll(db, sql: "SELECT attempts FROM outbox ORDER BY seq")
                )
            }
            #expect(left == [4])
            #expect(count == 1)
            #expect(attempts == [1, 1])
        }
    }

    @Test("an entry of an operation or a state this version does not know is kept as it is and never sent as another")
    func unknownValues() async throws {
        try await withStore { store, _ in
            let sealer = store.sealer
            let (unknownOp, sent, unknownState, pending, kept) = try await store.writeImmediate { db in
                try Self.row(1, record: "r1", sealer: sealer).insert(db)
                try Self.row(2, record: "r2", sealer: sealer).insert(db)
                try db.execute(sql: "UPDATE outbox SET op = 'merge' WHERE seq = 1")
                try db.execute(sql: "UPDATE outbox SET state = 'held' WHERE seq = 2")
                let rows = try OutboxRow.fetchAll(db)
                // A row read and written back keeps what this version does not know.
                var first = try #require(rows.first)
                try first.seal(["n": 9], with: sealer)
                try first.update(db, columns: ["payload"])
                return (
                    rows.first?.op, Result { try OutboxRow.pending(after: 0, limit: 10, of: nil, db).map { try $0.entry(opening: sealer) } },
                    rows.last?.state, try OutboxRow.pendingCount(db),
                    try Row.fetchOne(db, sql: "SELECT op, state FROM outbox WHERE seq = 1").map { ($0[0] as String, $0[1] as String) }
                )
            }
            #expect(unknownOp == nil && unknownState == nil)
            #expect(throws: ClientError.self) { try sent.get() }
            #expect(pending == 1, "the entry in an unknown state is not counted as waiting")
            #expect(kept?.0 == "merge" && kept?.1 == "pending")
        }
    }
}
