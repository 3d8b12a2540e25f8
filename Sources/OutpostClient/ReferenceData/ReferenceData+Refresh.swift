import Foundation
import GRDB
import NIOConcurrencyHelpers
import OutpostProtocol

extension ReferenceData {
    /// Changes asked for per pull of a refresh. Pulls travel in a pipeline like a download's pages, so that a
    /// refresh of a thousand changes has the server, the sealing and the store at work at once.
    static let refreshPageSize = 250

    /// Fetches only the changes since the last cursor: updates and walk-ins are stored, tombstones remove the
    /// row and remember its id as deleted since download.
    ///
    /// Pulls travel in a pipeline (``transfer(from:_:)``), each page stored with its cursor in one transaction.
    /// A page is stored only onto the cursor it was pulled from: when another refresh of the same set has moved
    /// the cursor meanwhile, this one stops there, asks for nothing more and returns what it stored; the other
    /// stores the rest.
    ///
    /// - Throws: ``ClientError`` `notFound` when the set was never fully downloaded; the transport's error when
    ///   the network fails, after storing the pages already received.
    @discardableResult
    public func refresh(collection: String, scope: String) async throws -> RefreshSummary {
        let cursor = try await store.perform {
            try await store.read { db -> String? in
                try Self.refreshCursor(db, collection: collection, scope: scope)
            }
        }
        guard let cursor else {
            throw ClientError(.notFound, ReferenceMessages.incomplete)
        }
        let transport = self.transport
        let sealer = store.sealer
        let index = self.index
        let search = store.schema.search[collection]
        let now = self.now
        let summary = NIOLockedValueBox(RefreshSummary(updated: 0, removed: 0))
        let pulls = PullStream<PullPage>(cursor: { $0.cursor }) { cursor in
            transport.bulkPullPageStream(
                collection: collection, scope: scope, cursor: cursor, limit: Self.refreshPageSize,
                pages: Self.refreshPagesPerStream)
        }
        defer { pulls.close() }
        try await Self.transfer(
            from: cursor,
            PageStages(
                fetch: { cursor in try await pulls.page(after: cursor) },
                next: { page in page.hasMore ? page.cursor : nil },
                prepare: { page in
                    // As in a download, each change's fields are sealed as the server sent them. In one piece, not
                    // in halves: the next pull and the store already share the cores with it.
                    let rows = try page.changes.map { change in
                        change.tombstone
                            ? nil
                            : try Self.prepare(
                                change, collection: collection, scope: scope, sealer: sealer, index: index,
                                search: search, withTokens: false)
                    }
                    return (page, rows)
                },
                store: { prepared, pulledFrom in
                    let time = Timestamp(now()).millisecondsSince1970
                    // Without a flush of its own: a refresh lost to a power cut is pulled again, and the next local
                    // write flushes it.
                    let counts = try await self.store.writeUnflushed { db in
                        try Self.apply(
                            prepared.0, rows: prepared.1, pulledFrom: pulledFrom, collection: collection, scope: scope,
                            index: index, at: time, db: db)
                    }
                    guard let counts else { return false }
                    summary.withLockedValue {
                        $0.updated += counts.0
                        $0.removed += counts.1
                    }
                    return true
                }))
        return summary.withLockedValue { $0 }
    }

    /// Pages one stream of pulls may carry; a longer refresh opens another from its cursor.
    static let refreshPagesPerStream = 40

    /// The cursor a refresh of a set continues from; nil until the set's download completed.
    private static func refreshCursor(_ db: Database, collection: String, scope: String) throws -> String? {
        try ReferenceStateRow.find(collection: collection, scope: scope, db).flatMap { $0.completedAt == nil ? nil : $0.cursor }
    }

    /// Stores one pulled page: rows already stored are updated in place, walk-ins inserted, and either goes into
    /// the search index again only when its tokens changed: tokens are worked out only for rows whose fingerprint
    /// (their name and e-mail) changed, and most changes (a note, a table) leave it alone. Tombstones remove the
    /// row and its index entry and remember the id; the cursor moves on. The page's rows are looked up, and its
    /// removals and tombstones written, in one statement each for the whole page. Returns nil, and stores nothing,
    /// when the set's cursor is no longer the one the page was pulled from.
    static func apply(
        _ page: PullPage, rows: [PreparedRow?], pulledFrom: String, collection: String, scope: String,
        index: ReferenceIndex, at time: Int64, db: Database
    ) throws -> (Int, Int)? {
        // Statements of fixed text are compiled once per connection: a refresh applies several pages.
        guard let state = try ReferenceStateRow.find(collection: collection, scope: scope, db), state.completedAt != nil,
            state.cursor == pulledFrom
        else { return nil }
        let plan = try plan(
            page, rows: rows, storedBefore: state.stored, collection: collection, scope: scope, index: index, db: db)
        try store(plan, cursor: page.cursor, collection: collection, scope: scope, index: index, at: time, db: db)
        return (plan.updates.count + plan.retokenized.count + plan.walkIns.count, plan.tombstoneIds.count)
    }

    /// What a pulled page does to a set, decided from the page and the set's rows as stored.
    struct RefreshPlan {
        /// Rows updated in place: same fingerprint, same tokens.
        var updates: [(ordinal: Int64, row: PreparedRow)]
        /// Rows updated with their tokens worked out again, and the tokens they were indexed with.
        var retokenized: [(ordinal: Int64, row: PreparedRow, tokens: String?, old: String?)]
        /// Rows a tombstone removes, and the tokens they were indexed with.
        var removed: [(id: String, ordinal: Int64, tokens: String?)]
        /// Rows the set did not have.
        var walkIns: [PreparedRow]
        /// Ids of tombstones, kept whether or not the row was here.
        var tombstoneIds: [String]
        /// The set's row count once the page is stored.
        var stored: Int
        /// Index entries to take out: the ordinal and the tokens it was indexed with.
        var unindexed: [(ordinal: Int64, tokens: String)]
        /// Ids of rows to index again.
        var reindexed: [String]
    }

    /// Reads the page's rows as stored, and decides what becomes of each: nothing is written.
    private static func plan(
        _ page: PullPage, rows: [PreparedRow?], storedBefore: Int, collection: String, scope: String,
        index: ReferenceIndex, db: Database
    ) throws -> RefreshPlan {
        // A pull lists a record once, as it is now. Were an id listed twice, only its last change would count:
        // taking a row out of a contentless FTS5 index twice would damage the index.
        var last: [String: Int] = [:]
        for (position, change) in page.changes.enumerated() { last[change.recordId] = position }
        let kept = page.changes.indices.filter { last[page.changes[$0].recordId] == $0 }
        let changes = kept.map { page.changes[$0] }

        // Each stored row of the page, classified as it is read: updated in place when its fingerprint matches (its
        // tokens are neither worked out nor read), retokenized otherwise (or when it has none yet), removed for a
        // tombstone. The tokens it is indexed with are read only when it may leave the index.
        var updates: [(ordinal: Int64, row: PreparedRow)] = []
        var retokenized: [(ordinal: Int64, row: PreparedRow, tokens: String?, old: String?)] = []
        var removed: [(id: String, ordinal: Int64, tokens: String?)] = []
        var found: Set<String> = []
        let rowsOfPage = try Row.fetchCursor(
            db.cachedStatement(
                sql: """
                    SELECT record_id, ordinal, fingerprint, tokens FROM reference_records
                    WHERE collection = ?1 AND scope = ?2 AND record_id IN (SELECT value FROM json_each(?3))
                    """),
            arguments: [collection, scope, try idList(changes.map(\.recordId))])
        while let record = try rowsOfPage.next() {
            let id: String = record[0]
            guard let position = last[id] else { continue }
            found.insert(id)
            let ordinal: Int64 = record[1]
            guard let row = rows[position] else {
                removed.append((id, ordinal, record[3]))
                continue
            }
            if let fingerprint: Int64 = record[2], fingerprint == row.fingerprint {
                updates.append((ordinal, row))
            } else {
                retokenized.append((ordinal, row, row.tokenText(index), record[3]))
            }
        }
        // The page's other changes: walk-ins, and tombstones of rows this device never had.
        let walkIns = changes.indices.compactMap { found.contains(changes[$0].recordId) ? nil : rows[kept[$0]] }
        let tombstoneIds = changes.indices.filter { rows[kept[$0]] == nil }.map { changes[$0].recordId }
        let stored = storedBefore + walkIns.count - removed.count

        // Index entries to take out (ordinal and the tokens it was indexed with), and rows to index again.
        var unindexed: [(ordinal: Int64, tokens: String)] = removed.compactMap { removed in
            removed.tokens.map { (removed.ordinal, $0) }
        }
        var reindexed: [String] = walkIns.map(\.recordId)
        for (ordinal, row, tokens, old) in retokenized where old != tokens {
            if let old { unindexed.append((ordinal, old)) }
            if tokens != nil { reindexed.append(row.recordId) }
        }

        return RefreshPlan(
            updates: updates, retokenized: retokenized, removed: removed, walkIns: walkIns, tombstoneIds: tombstoneIds,
            stored: stored, unindexed: unindexed, reindexed: reindexed)
    }

    /// Writes a page's plan, and moves the set's cursor to `cursor`.
    private static func store(
        _ plan: RefreshPlan, cursor: String, collection: String, scope: String, index: ReferenceIndex, at time: Int64,
        db: Database
    ) throws {
        let (updates, retokenized, removed, walkIns) = (plan.updates, plan.retokenized, plan.removed, plan.walkIns)
        let (tombstoneIds, stored, unindexed, reindexed) = (plan.tombstoneIds, plan.stored, plan.unindexed, plan.reindexed)
        // A row replaced keeps its ordinal: one probe of the table by it, where an upsert first probed the
        // unique index of ids. A walk-in takes the next ordinal.
        if !updates.isEmpty {
            let update = try db.cachedStatement(sql: "UPDATE reference_records SET payload = ?, version = ? WHERE ordinal = ?")
            for (ordinal, row) in updates {
                try update.execute(arguments: [row.payload, row.version, ordinal])
            }
        }
        if !retokenized.isEmpty {
            let update = try db.cachedStatement(
                sql: "UPDATE reference_records SET payload = ?, version = ?, tokens = ?, fingerprint = ? WHERE ordinal = ?")
            for (ordinal, row, tokens, _) in retokenized {
                try update.execute(arguments: [row.payload, row.version, tokens, row.fingerprint, ordinal])
            }
        }
        try insertRecords(walkIns, collection: collection, scope: scope, index: index, db: db)
        // Statements on the set's rows among some ids, one statement for a whole page's.
        func onRows(_ statement: String, among ids: [String], where condition: String? = nil) throws {
            guard !ids.isEmpty else { return }
            try db.cachedStatement(
                sql: statement + " WHERE collection = ?1 AND scope = ?2 AND record_id IN (SELECT value FROM json_each(?3))"
                    + (condition.map { " AND " + $0 } ?? "")
            ).execute(arguments: [collection, scope, try idList(ids)])
        }
        try onRows("DELETE FROM reference_records", among: removed.map(\.id))
        // A walk-in added again after a cancellation is no longer cancelled. (A row stored has no tombstone: one
        // is written only where the row is gone.)
        try onRows("DELETE FROM reference_tombstones", among: walkIns.map(\.recordId))
        if !tombstoneIds.isEmpty {
            try db.cachedStatement(
                sql: """
                    INSERT OR REPLACE INTO reference_tombstones (collection, scope, record_id, deleted_at)
                    SELECT ?1, ?2, value, ?4 FROM json_each(?3)
                    """
            ).execute(arguments: [collection, scope, try idList(tombstoneIds), time])
        }
        try ReferenceStateRow.refreshed(collection: collection, scope: scope, cursor: cursor, stored: stored, at: time, db)
        // The search index last: once a transaction has written to a virtual table, SQLite opens a savepoint in
        // it for every writing statement after, and FTS5 flushes its pending terms at each.
        if !unindexed.isEmpty {
            let pairs = JSONValue.array(unindexed.map { .array([.integer($0.ordinal), .string($0.tokens)]) })
            try db.cachedStatement(
                sql: """
                    INSERT INTO reference_index (reference_index, rowid, tokens)
                    SELECT 'delete', json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?)
                    """
            ).execute(arguments: [String(decoding: try pairs.jsonBytes(), as: UTF8.self)])
        }
        try onRows(
            "INSERT INTO reference_index (rowid, tokens) SELECT ordinal, tokens FROM reference_records",
            among: reindexed, where: "tokens IS NOT NULL")
    }

    /// Ids as a JSON array, for `json_each`: one statement for a whole page's ids.
    private static func idList(_ ids: [String]) throws -> String {
        String(decoding: try JSONValue.array(ids.map { .string($0) }).jsonBytes(), as: UTF8.self)
    }
}
