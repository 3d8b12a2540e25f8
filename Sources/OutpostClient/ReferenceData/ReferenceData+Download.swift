import Foundation
import GRDB
import OutpostProtocol

extension ReferenceData {
    /// Downloads the whole set in pages, storing each page and its continuation in one transaction; a page
    /// counts only once stored. Called again after a failure, it resumes after the last stored page.
    ///
    /// Pages travel in a pipeline (``transfer(from:_:)``): the next page is asked for as soon as this one's
    /// continuation is known, and this one is read and sealed while the one before it is written. Cancelling the
    /// calling task stops the download, and the call throws `CancellationError` once every task of it has ended.
    ///
    /// - Throws: the transport's error when the network fails, after storing the pages already received; what
    ///   was stored stays stored.
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

        let transport = self.transport
        let pageSize = self.pageSize
        let sealer = store.sealer
        let index = self.index
        // Keys are continuations; nil asks for the first page.
        try await Self.transfer(
            from: continuation,
            PageStages(
                fetch: { continuation in
                    try await transport.snapshotPage(
                        collection: collection, scope: scope, continuation: continuation, limit: pageSize)
                },
                next: { page in page.continuation.map { .some($0) } },
                prepare: { page in
                    // Each record's fields are sealed as the server sent them; only the members indexed are read.
                    let nonces = try sealer.nonces(page.records.count)
                    let rows = try await Self.inHalves(Array(zip(page.records, nonces))) { record, nonce in
                        try Self.prepare(
                            record, nonce: nonce, collection: collection, scope: scope, sealer: sealer, index: index)
                    }
                    return PreparedPage(page: page, rows: rows)
                },
                store: { page, continuation in
                    let stored = try await storePage(
                        page, collection: collection, scope: scope, isFirst: continuation == nil)
                    let elapsed = max(now().timeIntervalSince(started), 0.001)
                    progress?(DownloadProgress(
                        stored: stored, total: max(page.page.total, stored), rate: Double(stored - resumedFrom) / elapsed))
                    return true
                }))
        return try await state(collection: collection, scope: scope)
    }

    /// A page as received, its rows sealed and tokenised: everything but the database work.
    struct PreparedPage: Sendable {
        var page: SnapshotPage
        var rows: [PreparedRow]
    }

    private func storePage(_ prepared: PreparedPage, collection: String, scope: String, isFirst: Bool) async throws -> Int {
        let page = prepared.page
        let rows = prepared.rows
        let completedAt = page.continuation == nil ? Timestamp(now()).millisecondsSince1970 : nil
        let write: @Sendable (Database) throws -> Int = { db in
            if isFirst {
                // A fresh download replaces whatever an earlier, abandoned one left.
                try Self.unindex(db, collection: collection, scope: scope)
                for table in ["reference_records", "reference_tombstones"] {
                    try db.execute(
                        sql: "DELETE FROM \(table) WHERE collection = ? AND scope = ?", arguments: [collection, scope])
                }
            }
            // Pages of one download hold distinct, new ids: nothing to replace. Rows take the next ordinals, and
            // the page goes into the search index as one more small FTS5 segment.
            let lastOrdinal = try Self.lastOrdinal(db)
            try Self.insertRecords(rows, collection: collection, scope: scope, db: db)
            try Self.indexRows(db, after: lastOrdinal)
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
        // Pages are stored without a flush of their own, but for the last: a page lost to a power cut is fetched
        // again, while "Ready for offline" must survive one.
        if page.continuation == nil {
            return try await store.perform { try await store.queue.write(write) }
        }
        return try await store.writeUnflushedOnQueue(write)
    }
}
