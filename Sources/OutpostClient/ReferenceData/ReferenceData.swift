import Foundation
import GRDB
import OutpostProtocol

/// Reference data on the device, such as an event's guest roster: a resumable download, delta refresh with
/// tombstones, and lookups and search that work with no network.
///
/// Rows are sealed at rest like every payload; search goes through a blind index (``ReferenceIndex``).
public struct ReferenceData: Sendable {
    public let store: LocalStore
    let transport: any SyncTransport
    let now: @Sendable () -> Date
    let index: ReferenceIndex
    /// Rows per snapshot page.
    public var pageSize: Int

    public init(store: LocalStore, transport: any SyncTransport, pageSize: Int = 500, now: @escaping @Sendable () -> Date = { Date() }) {
        self.store = store
        self.transport = transport
        self.pageSize = pageSize
        self.now = now
        self.index = ReferenceIndex(storeKey: store.sealer.key)
    }

    // MARK: State

    public func state(collection: String, scope: String) async throws -> ReferenceState {
        try await store.perform {
            try await store.queue.read { db in try Self.state(db, collection: collection, scope: scope) }
        }
    }

    static func state(_ db: Database, collection: String, scope: String) throws -> ReferenceState {
        guard let row = try Row.fetchOne(
            db, sql: "SELECT * FROM reference_state WHERE collection = ? AND scope = ?", arguments: [collection, scope])
        else { return .notDownloaded }
        if let completed: Int64 = row["completed_at"] {
            return .ready(since: Timestamp(millisecondsSince1970: completed).date)
        }
        return .incomplete(stored: row["stored"], total: row["total"])
    }

    // MARK: Download

    /// Downloads the whole set in pages, storing each page and its continuation in one transaction before
    /// asking for the next. Called again after a failure, it resumes after the last stored page.
    ///
    /// - Throws: the transport's error when the network fails; what was stored stays stored.
    @discardableResult
    public func download(
        collection: String, scope: String, progress: (@Sendable (DownloadProgress) -> Void)? = nil
    ) async throws -> ReferenceState {
        let started = now()
        var resumedFrom: Int?
        while true {
            let (completed, continuation, alreadyStored) = try await store.perform {
                try await store.queue.read { db -> (Bool, String?, Int) in
                    let row = try Row.fetchOne(
                        db, sql: "SELECT * FROM reference_state WHERE collection = ? AND scope = ?",
                        arguments: [collection, scope])
                    return ((row?["completed_at"] as Int64?) != nil, row?["continuation"], row?["stored"] ?? 0)
                }
            }
            if completed { return try await state(collection: collection, scope: scope) }
            if resumedFrom == nil { resumedFrom = alreadyStored }
            let page = try await transport.snapshot(
                collection: collection, scope: scope, continuation: continuation, limit: pageSize)
            let stored = try await storePage(page, collection: collection, scope: scope, isFirst: continuation == nil)
            let elapsed = max(now().timeIntervalSince(started), 0.001)
            progress?(DownloadProgress(
                stored: stored, total: max(page.total, stored), rate: Double(stored - (resumedFrom ?? 0)) / elapsed))
        }
    }

    private func storePage(_ page: SnapshotResponse, collection: String, scope: String, isFirst: Bool) async throws -> Int {
        let sealer = store.sealer
        let index = self.index
        let completedAt = page.continuation == nil ? Timestamp(now()).millisecondsSince1970 : nil
        return try await store.perform {
            try await store.queue.write { db in
                if isFirst {
                    // A fresh download replaces whatever an earlier, abandoned one left.
                    for table in ["reference_records", "reference_search", "reference_tombstones"] {
                        try db.execute(
                            sql: "DELETE FROM \(table) WHERE collection = ? AND scope = ?", arguments: [collection, scope])
                    }
                }
                for record in page.records {
                    // Pages of one download hold distinct, new ids: nothing to replace.
                    try Self.upsert(
                        record, collection: collection, scope: scope, db: db, sealer: sealer, index: index, isNew: true)
                }
                // Counted as it goes: a COUNT(*) per page would make the download quadratic.
                let before = isFirst ? 0 : try Int.fetchOne(
                    db, sql: "SELECT stored FROM reference_state WHERE collection = ? AND scope = ?",
                    arguments: [collection, scope]) ?? 0
                let stored = before + page.records.count
                try db.execute(
                    sql: """
                        INSERT OR REPLACE INTO reference_state (collection, scope, continuation, cursor, total, stored,
                                                                completed_at, refreshed_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [collection, scope, page.continuation, page.cursor, page.total, stored, completedAt, completedAt])
                return stored
            }
        }
    }

    static func upsert(
        _ change: Change, collection: String, scope: String, db: Database, sealer: Sealer, index: ReferenceIndex,
        isNew: Bool = false
    ) throws {
        let context = "reference:\(collection)/\(scope)/\(change.recordId)"
        try db.cachedStatement(
            sql: "INSERT OR REPLACE INTO reference_records (collection, scope, record_id, payload, version) VALUES (?, ?, ?, ?, ?)"
        ).execute(arguments: [collection, scope, change.recordId, try sealer.seal(json: change.fields, context: context), change.version])
        if !isNew {
            try db.cachedStatement(sql: "DELETE FROM reference_search WHERE collection = ? AND scope = ? AND record_id = ?")
                .execute(arguments: [collection, scope, change.recordId])
            try db.cachedStatement(sql: "DELETE FROM reference_tombstones WHERE collection = ? AND scope = ? AND record_id = ?")
                .execute(arguments: [collection, scope, change.recordId])
        }
        let insert = try db.cachedStatement(
            sql: "INSERT OR IGNORE INTO reference_search (collection, scope, token, record_id) VALUES (?, ?, ?, ?)")
        for token in index.tokens(for: change.fields) {
            try insert.execute(arguments: [collection, scope, token, change.recordId])
        }
    }

    // MARK: Refresh

    /// Fetches only the changes since the last cursor: updates and walk-ins are stored, tombstones remove the
    /// row and remember its id as deleted since download.
    ///
    /// - Throws: ``ClientError`` `notFound` when the set was never fully downloaded.
    @discardableResult
    public func refresh(collection: String, scope: String) async throws -> RefreshSummary {
        var summary = RefreshSummary(updated: 0, removed: 0)
        while true {
            let cursor = try await store.perform {
                try await store.queue.read { db -> String? in
                    try String.fetchOne(
                        db, sql: "SELECT cursor FROM reference_state WHERE collection = ? AND scope = ? AND completed_at IS NOT NULL",
                        arguments: [collection, scope])
                }
            }
            guard let cursor else {
                throw ClientError(.notFound, ReferenceMessages.incomplete)
            }
            let page = try await transport.pull(collection: collection, scope: scope, cursor: cursor, limit: 1000)
            let sealer = store.sealer
            let index = self.index
            let time = Timestamp(now()).millisecondsSince1970
            let counts = try await store.perform {
                try await store.queue.write { db -> (Int, Int) in
                    var updated = 0
                    var removed = 0
                    var stored = try Int.fetchOne(
                        db, sql: "SELECT stored FROM reference_state WHERE collection = ? AND scope = ?",
                        arguments: [collection, scope]) ?? 0
                    let exists = try db.cachedStatement(
                        sql: "SELECT 1 FROM reference_records WHERE collection = ? AND scope = ? AND record_id = ?")
                    for change in page.changes {
                        let existed = try Bool.fetchOne(exists, arguments: [collection, scope, change.recordId]) ?? false
                        if change.tombstone {
                            if existed { stored -= 1 }
                            for table in ["reference_records", "reference_search"] {
                                try db.execute(
                                    sql: "DELETE FROM \(table) WHERE collection = ? AND scope = ? AND record_id = ?",
                                    arguments: [collection, scope, change.recordId])
                            }
                            try db.execute(
                                sql: "INSERT OR REPLACE INTO reference_tombstones (collection, scope, record_id, deleted_at) VALUES (?, ?, ?, ?)",
                                arguments: [collection, scope, change.recordId, time])
                            removed += 1
                        } else {
                            try Self.upsert(change, collection: collection, scope: scope, db: db, sealer: sealer, index: index)
                            if !existed { stored += 1 }
                            updated += 1
                        }
                    }
                    try db.execute(
                        sql: "UPDATE reference_state SET cursor = ?, stored = ?, total = ?, refreshed_at = ? WHERE collection = ? AND scope = ?",
                        arguments: [page.cursor, stored, stored, time, collection, scope])
                    return (updated, removed)
                }
            }
            summary.updated += counts.0
            summary.removed += counts.1
            if !page.hasMore { return summary }
        }
    }

    // MARK: Lookup and search

    /// One id: found, cancelled since download, not in the set, or undecidable while incomplete.
    public func lookup(collection: String, scope: String, recordId: String) async throws -> ReferenceLookup {
        let sealer = store.sealer
        return try await store.perform {
            try await store.queue.read { db in
                guard try Self.state(db, collection: collection, scope: scope).isReady else { return .incomplete }
                if let row = try Row.fetchOne(
                    db, sql: "SELECT payload, version FROM reference_records WHERE collection = ? AND scope = ? AND record_id = ?",
                    arguments: [collection, scope, recordId])
                {
                    let fields = try sealer.open(
                        json: [String: JSONValue].self, from: row["payload"],
                        context: "reference:\(collection)/\(scope)/\(recordId)")
                    return .found(ReferenceRecord(recordId: recordId, fields: fields, version: row["version"]))
                }
                let cancelled = try Bool.fetchOne(
                    db, sql: "SELECT 1 FROM reference_tombstones WHERE collection = ? AND scope = ? AND record_id = ?",
                    arguments: [collection, scope, recordId]) ?? false
                return cancelled ? .cancelled : .notFound
            }
        }
    }

    /// Records whose name words start with the query's words, or whose e-mail is the query: the first `limit`
    /// found, sorted by name (type more letters to narrow a common prefix).
    ///
    /// - Throws: ``ClientError`` `invalidInput` for a query of one character.
    public func search(collection: String, scope: String, query: String, limit: Int = 20) async throws -> [ReferenceRecord] {
        guard let token = index.token(forQuery: query) else {
            throw ClientError(.invalidInput, "type at least two characters of a name, or a whole e-mail")
        }
        let sealer = store.sealer
        return try await store.perform {
            try await store.queue.read { db in
                let candidates = try Row.fetchCursor(
                    db,
                    sql: """
                        SELECT r.record_id, r.payload, r.version FROM reference_search s
                        JOIN reference_records r ON r.collection = s.collection AND r.scope = s.scope AND r.record_id = s.record_id
                        WHERE s.collection = ? AND s.scope = ? AND s.token = ?
                        """,
                    arguments: [collection, scope, token])
                // Open candidates only until `limit` match: a two-letter prefix may have thousands.
                var found: [ReferenceRecord] = []
                while found.count < limit, let row = try candidates.next() {
                    let id: String = row["record_id"]
                    let fields = try sealer.open(
                        json: [String: JSONValue].self, from: row["payload"], context: "reference:\(collection)/\(scope)/\(id)")
                    if ReferenceIndex.matches(fields, query: query) {
                        found.append(ReferenceRecord(recordId: id, fields: fields, version: row["version"]))
                    }
                }
                found.sort { ($0.fields["name"]?.stringValue ?? "", $0.recordId) < ($1.fields["name"]?.stringValue ?? "", $1.recordId) }
                return found
            }
        }
    }
}
