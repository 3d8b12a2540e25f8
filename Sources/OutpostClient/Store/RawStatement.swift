import Foundation
import GRDB
import GRDBSQLite

/// A statement GRDB prepared and caches, bound and run through SQLite's C API: for the statements that run
/// hundreds of times a second with many values (a page of reference rows), where GRDB's general binding of
/// `StatementArguments` cost more than the inserts themselves.
///
/// GRDB does not see these executions: transaction observers and `ValueObservation` get no event for them,
/// and an interrupted step throws a `DatabaseError` rather than a `CancellationError`. So it serves only
/// tables that nothing observes (the store exposes no GRDB observation; status goes through ``SyncEngine``).
///
/// Values are copied by SQLite as they are bound (`SQLITE_TRANSIENT`), and the copies released once the
/// statement has run. Valid only inside the database access that made `statement`, like the statement itself.
struct RawStatement {
    private let statement: Statement
    private let db: Database
    private var handle: SQLiteStatement { statement.sqliteStatement }

    /// Makes ready to bind: earlier bindings are cleared.
    init(_ statement: Statement, db: Database) {
        self.statement = statement
        self.db = db
        sqlite3_reset(statement.sqliteStatement)
        sqlite3_clear_bindings(statement.sqliteStatement)
    }

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// Binds `value` to the 1-based parameter `index`.
    func bind(_ value: String, at index: Int32) throws {
        var value = value
        try check(
            value.withUTF8 { bytes in
                // An empty string still needs a pointer: SQLite binds NULL for none. It copies what it is given.
                guard let base = bytes.baseAddress else { return sqlite3_bind_text(handle, index, "", 0, Self.transient) }
                return sqlite3_bind_text(
                    handle, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self), Int32(bytes.count), Self.transient)
            })
    }

    func bind(_ value: String?, at index: Int32) throws {
        guard let value else { return try check(sqlite3_bind_null(handle, index)) }
        try bind(value, at: index)
    }

    func bind(_ value: Data, at index: Int32) throws {
        try check(
            value.withUnsafeBytes { bytes in
                // A zero-length blob still needs a pointer: SQLite binds NULL for none.
                sqlite3_bind_blob(handle, index, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(bytes.count), Self.transient)
            })
    }

    func bind(_ value: Int64, at index: Int32) throws {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    func bind(_ value: Int64?, at index: Int32) throws {
        guard let value else { return try check(sqlite3_bind_null(handle, index)) }
        try bind(value, at: index)
    }

    func bind(_ value: Bool, at index: Int32) throws {
        try bind(value ? 1 : 0, at: index)
    }

    /// Runs the statement for its first row: whether there is one, and its first column as an integer (nil
    /// when there is no row or the value is NULL). The statement is reset and its values released.
    func firstInteger() throws -> (hasRow: Bool, value: Int64?) {
        let code = sqlite3_step(handle)
        let value = code == SQLITE_ROW && sqlite3_column_type(handle, 0) != SQLITE_NULL ? sqlite3_column_int64(handle, 0) : nil
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        guard code == SQLITE_ROW else {
            try check(code, done: true)
            return (false, nil)
        }
        return (true, value)
    }

    /// The columns of the row a statement stands on, read by position: valid only inside ``firstRow(_:)``.
    struct Columns {
        fileprivate let handle: SQLiteStatement

        /// The column at `index` (0-based) as an integer, or nil when it is NULL.
        func integer(_ index: Int32) -> Int64? {
            sqlite3_column_type(handle, index) == SQLITE_NULL ? nil : sqlite3_column_int64(handle, index)
        }
    }

    /// Runs the statement for its first row and reads it with `read`; nil when there is no row. The statement is
    /// reset and its values released.
    func firstRow<T>(_ read: (Columns) -> T) throws -> T? {
        let code = sqlite3_step(handle)
        let value = code == SQLITE_ROW ? read(Columns(handle: handle)) : nil
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        guard code == SQLITE_ROW else {
            try check(code, done: true)
            return nil
        }
        return value
    }

    /// Runs the statement to its end, and releases the values bound.
    func execute() throws {
        var code = sqlite3_step(handle)
        while code == SQLITE_ROW { code = sqlite3_step(handle) }
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        try check(code, done: true)
    }

    private func check(_ code: Int32, done: Bool = false) throws {
        guard code != (done ? SQLITE_DONE : SQLITE_OK) else { return }
        throw DatabaseError(
            resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)))
    }
}
