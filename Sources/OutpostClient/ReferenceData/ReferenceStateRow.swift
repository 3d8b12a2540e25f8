import Foundation
import GRDB
import OutpostProtocol

/// A row of the `reference_state` table: how far the download of one reference set (a collection within a scope,
/// such as an event's roster) has come, and the cursor its refreshes continue from.
///
/// A download in progress has a `continuation` and no `completedAt`; a complete one has `completedAt` and the
/// `cursor` of the server's changes since. Nothing in it is sealed: it holds counts, times and opaque cursors.
///
/// The table's statements are this type's: ``ReferenceData`` calls them.
struct ReferenceStateRow: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "reference_state"
    /// A state saved again replaces the one of the same set.
    static let persistenceConflictPolicy = PersistenceConflictPolicy(insert: .replace, update: .replace)

    var collection: String
    var scope: String
    /// What the next page of a download in progress is asked with; nil before the first page and once complete.
    var continuation: String?
    /// Where the server's changes since the download (or the last refresh) begin.
    var cursor: String?
    var total: Int
    /// How many rows the set holds.
    var stored: Int
    var completedAt: Int64?
    var refreshedAt: Int64?

    init(
        collection: String, scope: String, continuation: String?, cursor: String?, total: Int, stored: Int,
        completedAt: Int64?, refreshedAt: Int64?
    ) {
        self.collection = collection
        self.scope = scope
        self.continuation = continuation
        self.cursor = cursor
        self.total = total
        self.stored = stored
        self.completedAt = completedAt
        self.refreshedAt = refreshedAt
    }

    init(row: Row) throws {
        collection = row["collection"]
        scope = row["scope"]
        continuation = row["continuation"]
        cursor = row["cursor"]
        total = row["total"]
        stored = row["stored"]
        completedAt = row["completed_at"]
        refreshedAt = row["refreshed_at"]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["collection"] = collection
        container["scope"] = scope
        container["continuation"] = continuation
        container["cursor"] = cursor
        container["total"] = total
        container["stored"] = stored
        container["completed_at"] = completedAt
        container["refreshed_at"] = refreshedAt
    }

    /// What the set's state says to an app.
    var referenceState: ReferenceState {
        if let completedAt { return .ready(since: Timestamp(millisecondsSince1970: completedAt).date) }
        return .incomplete(stored: stored, total: total)
    }

    // MARK: Statements

    /// The state of the set, or nil before its download began.
    static func find(collection: String, scope: String, _ db: Database) throws -> ReferenceStateRow? {
        // Cached: every lookup and search asks first.
        try fetchOne(
            db.cachedStatement(sql: "SELECT * FROM reference_state WHERE collection = ? AND scope = ?"),
            arguments: [collection, scope])
    }

    /// Moves a complete set's cursor on after a refresh that leaves it `stored` rows, at `time`.
    static func refreshed(
        collection: String, scope: String, cursor: String, stored: Int, at time: Int64, _ db: Database
    ) throws {
        try db.cachedStatement(
            sql: "UPDATE reference_state SET cursor = ?, stored = ?, total = ?, refreshed_at = ? WHERE collection = ? AND scope = ?"
        ).execute(arguments: [cursor, stored, stored, time, collection, scope])
    }

    /// When any set was last downloaded or refreshed, in milliseconds; nil if never.
    static func lastFetch(_ db: Database) throws -> Int64? {
        try Int64.fetchOne(db, sql: "SELECT max(max(coalesce(completed_at, 0), coalesce(refreshed_at, 0))) FROM reference_state")
            .flatMap { $0 > 0 ? $0 : nil }
    }
}
