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

    /// Downloads the whole set in pages, storing each page and its continuation in one transaction; a page
    /// counts only once stored. Called again after a failure, it resumes after the last stored page.
    ///
    /// Pages travel in a pipeline: the next page is asked for as soon as this one's continuation is known, and
    /// this one is read and sealed while the one before it is written, so that the server, the network, the
    /// CPU work and the store overlap. A page fetched but not stored when something fails is fetched again.
    ///
    /// - Throws: the transport's error when the network fails; what was stored stays stored.
    @discardableResult
    public func download(
        collection: String, scope: String, progress: (@Sendable (DownloadProgress) -> Void)? = nil
    ) async throws -> ReferenceState {
        let started = now()
        let (completed, continuation, resumedFrom) = try await store.perform {
            try await store.queue.read { db -> (Bool, String?, Int) in
                let row = try Row.fetchOne(
                    db, sql: "SELECT * FROM reference_state WHERE collection = ? AND scope = ?",
                    arguments: [collection, scope])
                return ((row?["completed_at"] as Int64?) != nil, row?["continuation"], row?["stored"] ?? 0)
            }
        }
        if completed { return try await state(collection: collection, scope: scope) }

        // Each page is named by the continuation that asks for it (nil: the first page). Its fetch, its
        // preparation and its store are tasks: a page's preparation starts once it arrives, its store once it
        // is prepared and the page before it stored, and the next page is asked for as soon as this one's
        // continuation is known, up to `lookahead` pages ahead of the store.
        var fetching: Task<SnapshotPage, any Error>? = fetchTask(collection: collection, scope: scope, continuation: continuation)
        var requested = continuation
        var storing: [Task<Void, any Error>] = []
        defer {
            fetching?.cancel()
            for task in storing { task.cancel() }
        }
        while let current = fetching {
            let raw: SnapshotPage
            do {
                raw = try await current.value
            } catch {
                // The network failed: the pages already here are stored first, so that the next attempt resumes
                // after them.
                fetching = nil
                while !storing.isEmpty { try await storing.removeFirst().value }
                throw error
            }
            let isFirst = requested == nil
            requested = raw.continuation
            fetching = raw.continuation.map { fetchTask(collection: collection, scope: scope, continuation: $0) }
            let prepared = prepareTask(raw, collection: collection, scope: scope)
            let previous = storing.last
            storing.append(Task {
                try await previous?.value
                let page = try await prepared.value
                let stored = try await storePage(page, collection: collection, scope: scope, isFirst: isFirst)
                let elapsed = max(now().timeIntervalSince(started), 0.001)
                progress?(DownloadProgress(
                    stored: stored, total: max(page.page.total, stored), rate: Double(stored - resumedFrom) / elapsed))
            })
            while storing.count > Self.lookahead {
                try await storing.removeFirst().value
            }
        }
        while !storing.isEmpty {
            try await storing.removeFirst().value
        }
        return try await state(collection: collection, scope: scope)
    }

    /// Pages a download holds fetched or prepared ahead of the one being stored.
    static let lookahead = 3

    /// A page as received, its rows sealed and tokenised: everything but the database work.
    struct PreparedPage: Sendable {
        var page: SnapshotPage
        var rows: [PreparedRow]
    }

    private func fetchTask(collection: String, scope: String, continuation: String?) -> Task<SnapshotPage, any Error> {
        let transport = self.transport
        let pageSize = self.pageSize
        return Task {
            try await transport.snapshotPage(collection: collection, scope: scope, continuation: continuation, limit: pageSize)
        }
    }

    private func prepareTask(_ page: SnapshotPage, collection: String, scope: String) -> Task<PreparedPage, any Error> {
        let sealer = store.sealer
        let index = self.index
        return Task {
            // Each record's fields are sealed as the server sent them; only the members indexed are read.
            let rows = try await Self.inHalves(page.records) { record in
                try Self.prepare(record, collection: collection, scope: scope, sealer: sealer, index: index)
            }
            return PreparedPage(page: page, rows: rows)
        }
    }

    /// Runs `prepare` over `items` in two halves at once: sealing and tokens are most of a page's CPU time on
    /// the device.
    static func inHalves<Item: Sendable, Output: Sendable>(
        _ items: [Item], _ prepare: @escaping @Sendable (Item) throws -> Output
    ) async throws -> [Output] {
        let middle = items.count / 2
        async let first = items[..<middle].map(prepare)
        let second = try items[middle...].map(prepare)
        return try await first + second
    }

    private func storePage(_ prepared: PreparedPage, collection: String, scope: String, isFirst: Bool) async throws -> Int {
        let page = prepared.page
        let rows = prepared.rows
        let completedAt = page.continuation == nil ? Timestamp(now()).millisecondsSince1970 : nil
        // Pages are stored without a flush of their own, but for the last: a page lost to a power cut is fetched
        // again, while "Ready for offline" must survive one.
        let write: @Sendable (Database) throws -> Int = { db in
                if isFirst {
                    // A fresh download replaces whatever an earlier, abandoned one left.
                    try Self.unindex(db, collection: collection, scope: scope)
                    for table in ["reference_records", "reference_tombstones"] {
                        try db.execute(
                            sql: "DELETE FROM \(table) WHERE collection = ? AND scope = ?", arguments: [collection, scope])
                    }
                }
                // Pages of one download hold distinct, new ids: nothing to replace. Rows take the next ordinals,
                // and the page goes into the search index as one more small FTS5 segment.
                let lastOrdinal = try Self.lastOrdinal(db)
                try Self.insertRecords(rows, collection: collection, scope: scope, db: db)
                try db.cachedStatement(
                    sql: """
                        INSERT INTO reference_index (rowid, tokens)
                        SELECT ordinal, tokens FROM reference_records WHERE ordinal > ? AND tokens IS NOT NULL
                        """
                ).execute(arguments: [lastOrdinal])
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
        if page.continuation == nil {
            return try await store.perform { try await store.queue.write(write) }
        }
        return try await store.writeUnflushedOnQueue(write)
    }

    /// A record ready to store: sealed, with its search tokens.
    struct PreparedRow: Sendable {
        var recordId: String
        var payload: Data
        var version: Int64
        var tokens: [Int64]
        /// `tokens` as the row and the search index keep them (``ReferenceIndex/text(_:)``), written here on the
        /// preparing tasks.
        var tokenText: String?

        init(recordId: String, payload: Data, version: Int64, tokens: [Int64]) {
            self.recordId = recordId
            self.payload = payload
            self.version = version
            self.tokens = tokens
            self.tokenText = ReferenceIndex.text(tokens)
        }
    }

    static func prepare(
        _ record: SnapshotPage.Record, collection: String, scope: String, sealer: Sealer, index: ReferenceIndex
    ) throws -> PreparedRow {
        let fields = record.fieldsJSON
        let indexed = try JSONValue.members(["name", "email"], ofObject: fields)
        let name = indexed[0]?.stringValue
        let email = indexed[1]?.stringValue
        return PreparedRow(
            recordId: record.recordId,
            payload: try sealer.seal(fields, context: "reference:\(collection)/\(scope)/\(record.recordId)"),
            version: record.version,
            tokens: index.tokens(name: name, email: email))
    }

    /// Rows per multi-row `INSERT`: one statement per row cost more than the B-tree work it does.
    static let insertBatch = 50

    private static let replacingClause = """
         ON CONFLICT (collection, scope, record_id) DO UPDATE SET
          payload = excluded.payload, version = excluded.version, tokens = excluded.tokens
        """

    /// The statements that insert 1 to ``insertBatch`` rows: the set's collection and scope are bound once, as
    /// ?1 and ?2, for every row of the statement.
    private static let inserts = (1...insertBatch).map { insertSQL(rows: $0) }
    /// The same, where a row replaced is updated in place; `INSERT OR REPLACE` would delete it and insert it again.
    private static let replacingInserts = (1...insertBatch).map { insertSQL(rows: $0) + replacingClause }

    private static func insertSQL(rows: Int) -> String {
        let tuples = (0..<rows).map { row in
            let first = 3 + 4 * row
            return "(?1, ?2, ?\(first), ?\(first + 1), ?\(first + 2), ?\(first + 3))"
        }
        return "INSERT INTO reference_records (collection, scope, record_id, payload, version, tokens) VALUES "
            + tuples.joined(separator: ", ")
    }

    static func insertRecords(
        _ rows: [PreparedRow], collection: String, scope: String, replacing: Bool = false, db: Database
    ) throws {
        var start = 0
        while start < rows.count {
            let count = min(insertBatch, rows.count - start)
            let statement = RawStatement(
                try db.cachedStatement(sql: (replacing ? Self.replacingInserts : Self.inserts)[count - 1]), db: db)
            try statement.bind(collection, at: 1)
            try statement.bind(scope, at: 2)
            for (offset, row) in rows[start..<(start + count)].enumerated() {
                let first = Int32(3 + 4 * offset)
                try statement.bind(row.recordId, at: first)
                try statement.bind(row.payload, at: first + 1)
                try statement.bind(row.version, at: first + 2)
                try statement.bind(row.tokenText, at: first + 3)
            }
            try statement.execute()
            start += count
        }
    }

    /// The highest ordinal given to a reference row so far; rows stored next take the ones after it.
    static func lastOrdinal(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT coalesce(max(ordinal), 0) FROM reference_records")) ?? 0
    }

    /// Takes a set's rows out of the search index, with the tokens each row keeps (what a contentless FTS5
    /// index needs to remove a document).
    static func unindex(_ db: Database, collection: String, scope: String) throws {
        try db.execute(
            sql: """
                INSERT INTO reference_index (reference_index, rowid, tokens)
                SELECT 'delete', ordinal, tokens FROM reference_records
                WHERE collection = ? AND scope = ? AND tokens IS NOT NULL
                """,
            arguments: [collection, scope])
    }

    // MARK: Refresh

    /// Rows asked for per pull of a refresh.
    static let refreshPageSize = 2000

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
            let page = try await transport.pullPage(
                collection: collection, scope: scope, cursor: cursor, limit: Self.refreshPageSize)
            let time = Timestamp(now()).millisecondsSince1970
            let sealer = store.sealer
            let index = self.index
            // As in a download, each change's fields are sealed as the server sent them.
            let rows = try await Self.inHalves(page.changes) { change in
                change.tombstone
                    ? nil : try Self.prepare(change, collection: collection, scope: scope, sealer: sealer, index: index)
            }
            // Without a flush of its own: a refresh lost to a power cut is pulled again, and the next local write
            // flushes it.
            let counts = try await store.writeUnflushedOnQueue { db in
                try Self.apply(page, rows: rows, collection: collection, scope: scope, at: time, db: db)
            }
            summary.updated += counts.0
            summary.removed += counts.1
            if !page.hasMore { return summary }
        }
    }

    /// Stores one pulled page in a few statements for the whole page rather than several per change: updates
    /// and walk-ins replace their rows, and go into the search index again only when their tokens changed (a
    /// changed note leaves the name's alone); tombstones remove the row and its index entry and remember the
    /// id; the cursor moves on.
    static func apply(
        _ page: PullPage, rows: [PreparedRow?], collection: String, scope: String, at time: Int64, db: Database
    ) throws -> (Int, Int) {
        // A pull lists a record once, as it is now: the ids of a page are distinct.
        var existing: [String: (ordinal: Int64, tokens: String?)] = [:]
        let rowsOfPage = try Row.fetchCursor(
            db,
            sql: """
                SELECT record_id, ordinal, tokens FROM reference_records
                WHERE collection = ?1 AND scope = ?2 AND record_id IN (SELECT value FROM json_each(?3))
                """,
            arguments: [collection, scope, try idList(page.changes.map(\.recordId))])
        while let row = try rowsOfPage.next() {
            existing[row[0]] = (row[1], row[2])
        }

        var upserts: [PreparedRow] = []
        var removedIds: [String] = []
        var tombstoneIds: [String] = []
        // Index entries to take out (ordinal and the tokens it was indexed with), and rows to index again.
        var unindexed: [(ordinal: Int64, tokens: String)] = []
        var reindexed: [String] = []
        var stored = try Int.fetchOne(
            db, sql: "SELECT stored FROM reference_state WHERE collection = ? AND scope = ?",
            arguments: [collection, scope]) ?? 0
        for (change, row) in zip(page.changes, rows) {
            let old = existing[change.recordId]
            if let row {
                upserts.append(row)
                if old == nil { stored += 1 }
                // Most changes leave the name and e-mail alone, and so the tokens' text.
                guard old?.tokens != row.tokenText else { continue }
                if let old, let tokens = old.tokens { unindexed.append((old.ordinal, tokens)) }
                if row.tokenText != nil { reindexed.append(change.recordId) }
            } else {
                tombstoneIds.append(change.recordId)
                guard let old else { continue }
                stored -= 1
                removedIds.append(change.recordId)
                if let tokens = old.tokens { unindexed.append((old.ordinal, tokens)) }
            }
        }

        if !unindexed.isEmpty {
            let pairs = JSONValue.array(unindexed.map { .array([.integer($0.ordinal), .string($0.tokens)]) })
            try db.execute(
                sql: """
                    INSERT INTO reference_index (reference_index, rowid, tokens)
                    SELECT 'delete', json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?)
                    """,
                arguments: [String(decoding: try pairs.jsonBytes(), as: UTF8.self)])
        }
        // A walk-in takes the next ordinal; a row replaced keeps its own.
        try insertRecords(upserts, collection: collection, scope: scope, replacing: true, db: db)
        if !reindexed.isEmpty {
            try db.execute(
                sql: """
                    INSERT INTO reference_index (rowid, tokens)
                    SELECT ordinal, tokens FROM reference_records
                    WHERE collection = ?1 AND scope = ?2 AND record_id IN (SELECT value FROM json_each(?3))
                    """,
                arguments: [collection, scope, try idList(reindexed)])
        }
        if !removedIds.isEmpty {
            try db.execute(
                sql: """
                    DELETE FROM reference_records
                    WHERE collection = ?1 AND scope = ?2 AND record_id IN (SELECT value FROM json_each(?3))
                    """,
                arguments: [collection, scope, try idList(removedIds)])
        }
        // A walk-in added again after a cancellation is no longer cancelled.
        if !upserts.isEmpty {
            try db.execute(
                sql: """
                    DELETE FROM reference_tombstones
                    WHERE collection = ?1 AND scope = ?2 AND record_id IN (SELECT value FROM json_each(?3))
                    """,
                arguments: [collection, scope, try idList(upserts.map(\.recordId))])
        }
        if !tombstoneIds.isEmpty {
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO reference_tombstones (collection, scope, record_id, deleted_at)
                    SELECT ?1, ?2, value, ?4 FROM json_each(?3)
                    """,
                arguments: [collection, scope, try idList(tombstoneIds), time])
        }
        try db.execute(
            sql: "UPDATE reference_state SET cursor = ?, stored = ?, total = ?, refreshed_at = ? WHERE collection = ? AND scope = ?",
            arguments: [page.cursor, stored, stored, time, collection, scope])
        return (upserts.count, tombstoneIds.count)
    }

    /// Ids as a JSON array, for `json_each`: one statement for a whole page's ids.
    private static func idList(_ ids: [String]) throws -> String {
        String(decoding: try JSONValue.array(ids.map { .string($0) }).jsonBytes(), as: UTF8.self)
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
    /// - Throws: ``ClientError`` `invalidInput` for a query of one character, `notFound` while the set is not
    ///   fully downloaded.
    public func search(collection: String, scope: String, query: String, limit: Int = 20) async throws -> [ReferenceRecord] {
        guard let tokens = index.tokens(forQuery: query) else {
            throw ClientError(.invalidInput, "type at least two characters of a name, or a whole e-mail")
        }
        let sealer = store.sealer
        return try await store.perform {
            try await store.queue.read { db in
                // Until the last page is stored, a search would answer from part of the set.
                guard try Self.state(db, collection: collection, scope: scope).isReady else {
                    throw ClientError(.notFound, ReferenceMessages.incomplete)
                }
                // A record must hold every word's token: the index narrows by all the words at once. Candidates
                // come in ordinal order (as the rows arrived, by id within a download). CROSS JOIN keeps the
                // index the outer loop: SQLite could otherwise walk the whole set and probe the index per row.
                let sql = """
                    SELECT r.record_id, r.payload, r.version FROM reference_index f
                    CROSS JOIN reference_records r ON r.ordinal = f.rowid
                    WHERE reference_index MATCH ? AND r.collection = ? AND r.scope = ?
                    """
                let arguments: [any DatabaseValueConvertible] = [ReferenceIndex.matchExpression(tokens), collection, scope]
                let candidates = try Row.fetchCursor(db, sql: sql, arguments: StatementArguments(arguments))
                // Open candidates only until `limit` match: a two-letter prefix may have thousands.
                var found: [ReferenceRecord] = []
                let byName = !ReferenceIndex.isEmail(query)
                let index = self.index
                let queryWords = ReferenceIndex.queryWords(query)
                while found.count < limit, let row = try candidates.next() {
                    let id: String = row["record_id"]
                    let context = "reference:\(collection)/\(scope)/\(id)"
                    let opened = try sealer.open(row["payload"], context: context)
                    if byName {
                        // Most candidates of a short prefix do not match: their name alone is read to see.
                        let name = try? JSONValue.member("name", ofObject: opened)
                        guard index.matches(name: name?.stringValue, queryWords: queryWords) else { continue }
                    }
                    let fields: [String: JSONValue]
                    do {
                        fields = try [String: JSONValue](parsingObject: opened)
                    } catch {
                        throw ClientError(.cannotDecrypt, "a sealed payload does not decode")
                    }
                    if index.matches(fields, query: query, queryWords: queryWords) {
                        found.append(ReferenceRecord(recordId: id, fields: fields, version: row["version"]))
                    }
                }
                found.sort { ($0.fields["name"]?.stringValue ?? "", $0.recordId) < ($1.fields["name"]?.stringValue ?? "", $1.recordId) }
                return found
            }
        }
    }
}
