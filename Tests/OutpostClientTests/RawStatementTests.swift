import Foundation
import GRDB
import Testing

@testable import OutpostClient

/// Statements bound through SQLite's C API (reference rows): every kind of value, and errors that leave the
/// statement usable.
@Suite("Raw statements")
struct RawStatementTests {
    @Test("empty text and blobs stay empty, nil text is NULL, and values survive a reused statement")
    func values() async throws {
        try await withStore { store, _ in
            let rows = try await store.pool.write { db -> [Row] in
                try db.execute(sql: "CREATE TABLE probe (t TEXT, b BLOB, i INTEGER, n TEXT)")
                let sql = "INSERT INTO probe (t, b, i, n) VALUES (?, ?, ?, ?)"
                for (text, blob, integer, optional) in [("", Data(), Int64(0), String?.none), ("é x", Data([0, 1, 2]), Int64.min, "kept")] {
                    let statement = RawStatement(try db.cachedStatement(sql: sql), db: db)
                    try statement.bind(text, at: 1)
                    try statement.bind(blob, at: 2)
                    try statement.bind(integer, at: 3)
                    try statement.bind(optional, at: 4)
                    try statement.execute()
                }
                return try Row.fetchAll(db, sql: "SELECT t, typeof(t), b, typeof(b), i, n FROM probe ORDER BY rowid")
            }
            #expect(rows.count == 2)
            #expect(rows[0][0] as String? == "" && rows[0][1] as String == "text")
            #expect(rows[0][2] as Data? == Data() && rows[0][3] as String == "blob")
            #expect(rows[0][4] as Int64 == 0 && rows[0][5] as String? == nil)
            #expect(rows[1][0] as String? == "é x" && rows[1][2] as Data? == Data([0, 1, 2]))
            #expect(rows[1][4] as Int64 == Int64.min && rows[1][5] as String? == "kept")
        }
    }

    @Test("a constraint that fails throws, writes nothing, and the statement runs again afterwards")
    func failure() async throws {
        try await withStore { store, _ in
            let count = try await store.pool.write { db -> Int in
                try db.execute(sql: "CREATE TABLE probe (k TEXT PRIMARY KEY)")
                let sql = "INSERT INTO probe (k) VALUES (?), (?)"
                func insert(_ first: String, _ second: String) throws {
                    let statement = RawStatement(try db.cachedStatement(sql: sql), db: db)
                    try statement.bind(first, at: 1)
                    try statement.bind(second, at: 2)
                    try statement.execute()
                }
                #expect(throws: DatabaseError.self) { try insert("a", "a") }
                try insert("a", "b")
                return try Int.fetchOne(db, sql: "SELECT count(*) FROM probe") ?? -1
            }
            #expect(count == 2)
        }
    }
}
