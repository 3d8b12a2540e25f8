import Foundation
import GRDB
import OutpostProtocol

extension ReferenceData {
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
        // A pull lists a record once, as it is now. Were an id listed twice, only its last change would count:
        // taking a row out of a contentless FTS5 index twice would damage the index.
        var last: [String: Int] = [:]
        for (position, change) in page.changes.enumerated() { last[change.recordId] = position }
        let kept = page.changes.indices.filter { last[page.changes[$0].recordId] == $0 }
        let changes = kept.map { page.changes[$0] }
        let rows = kept.map { rows[$0] }
        var existing: [String: (ordinal: Int64, tokens: String?)] = [:]
        let rowsOfPage = try Row.fetchCursor(
            db,
            sql: """
                SELECT record_id, ordinal, tokens FROM reference_records
                WHERE collection = ?1 AND scope = ?2 AND record_id IN (SELECT value FROM json_each(?3))
                """,
            arguments: [collection, scope, try idList(changes.map(\.recordId))])
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
        for (change, row) in zip(changes, rows) {
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
        // Statements on the set's rows among some ids, one statement for a whole page's.
        func onRows(_ statement: String, among ids: [String]) throws {
            guard !ids.isEmpty else { return }
            try db.execute(
                sql: statement + " WHERE collection = ?1 AND scope = ?2 AND record_id IN (SELECT value FROM json_each(?3))",
                arguments: [collection, scope, try idList(ids)])
        }
        try onRows("INSERT INTO reference_index (rowid, tokens) SELECT ordinal, tokens FROM reference_records", among: reindexed)
        try onRows("DELETE FROM reference_records", among: removedIds)
        // A walk-in added again after a cancellation is no longer cancelled.
        try onRows("DELETE FROM reference_tombstones", among: upserts.map(\.recordId))
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
}
