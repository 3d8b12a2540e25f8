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
    /// One download of a set runs at a time: a second call through the same store waits for the first to end (or
    /// for its own cancellation), then finds the set ready or resumes where the first stopped. Across processes
    /// (two stores opened on one file), a page is stored only onto the continuation it was asked with: a download
    /// that finds another one ahead of it stops, storing nothing more, and returns the set if that one completed
    /// it.
    ///
    /// - Throws: the transport's error when the network fails, after storing the pages already received; what
    ///   was stored stays stored. ``ClientError`` `busy` when another process's download of the set stored pages
    ///   past this one and has not completed it (it may still be running, or have stopped): calling again
    ///   resumes from those pages.
    @discardableResult
    public func download(
        collection: String, scope: String, progress: (@Sendable (DownloadProgress) -> Void)? = nil
    ) async throws -> ReferenceState {
        try await store.downloads.run("\(collection)\u{0}\(scope)") {
            try await downloadAlone(collection: collection, scope: scope, progress: progress)
        }
    }

    /// A download, with no other of the same set running in this process.
    private func downloadAlone(
        collection: String, scope: String, progress: (@Sendable (DownloadProgress) -> Void)?
    ) async throws -> ReferenceState {
        let started = now()
        let (completed, continuation, resumedFrom) = try await store.perform {
            try await store.read { db -> (Bool, String?, Int) in
                let state = try ReferenceStateRow.find(collection: collection, scope: scope, db)
                return (state?.completedAt != nil, state?.continuation, state?.stored ?? 0)
            }
        }
        if completed { return try await state(collection: collection, scope: scope) }

        let transport = self.transport
        let pageSize = self.pageSize
        let sealer = store.sealer
        let index = self.index
        let search = store.schema.search[collection]
        // Keys are continuations; nil asks for the first page.
        try await Self.transfer(
            from: continuation,
            PageStages(
                fetch: { continuation in
                    try await transport.bulkSnapshotPage(
                        collection: collection, scope: scope, continuation: continuation, limit: pageSize)
                },
                next: { page in page.continuation.map { .some($0) } },
                prepare: { page in
                    // Each record's fields are sealed as the server sent them; only the members indexed are read.
                    let rows = try await Self.inHalves(page.records) { record in
                        try Self.prepare(
                            record, collection: collection, scope: scope, sealer: sealer, index: index,
                            search: search, withTokens: true)
                    }
                    return PreparedPage(page: page, rows: rows)
                },
                store: { page, continuation in
                    guard
                        let stored = try await storePage(
                            page, collection: collection, scope: scope, askedWith: continuation)
                    else { return false }
                    let elapsed = max(now().timeIntervalSince(started), 0.001)
                    progress?(
                        DownloadProgress(
                            stored: stored, total: max(page.page.total, stored), rate: Double(stored - resumedFrom) / elapsed))
                    return true
                }))
        let state = try await state(collection: collection, scope: scope)
        // The last page stored completes the set: short of it, another process's download moved past this one.
        guard state.isReady else {
            throw ClientError(
                .busy,
                "another download of \(collection)/\(scope) on this device stored pages past this one; download again to resume from them")
        }
        return state
    }

    /// A page as received, its rows sealed and tokenised: everything but the database work.
    struct PreparedPage: Sendable {
        var page: SnapshotPage
        var rows: [PreparedRow]
    }

    /// Stores a page and its continuation, and returns the rows stored so far; nil, storing nothing, when the set
    /// is no longer where the page was asked from (`askedWith`, nil for the first page): another download stored
    /// that page or completed the set.
    private func storePage(
        _ prepared: PreparedPage, collection: String, scope: String, askedWith continuation: String?
    ) async throws -> Int? {
        let page = prepared.page
        let rows = prepared.rows
        let isFirst = continuation == nil
        let completedAt = page.continuation == nil ? Timestamp(now()).millisecondsSince1970 : nil
        let write: @Sendable (Database) throws -> Int? = { db in
            let state = try ReferenceStateRow.find(collection: collection, scope: scope, db)
            // A page goes only onto the continuation it was asked with; the first, only where no download began.
            if isFirst {
                guard state == nil else { return nil }
                // A fresh download replaces whatever an earlier, abandoned one left.
                try Self.unindex(db, collection: collection, scope: scope)
                for table in ["reference_records", "reference_tombstones"] {
                    try db.execute(
                        sql: "DELETE FROM \(table) WHERE collection = ? AND scope = ?", arguments: [collection, scope])
                }
            } else {
                guard let state, state.completedAt == nil, state.continuation == continuation else { return nil }
            }
            // Pages of one download hold distinct, new ids: nothing to replace. Rows take the next ordinals, and
            // the page goes into the search index as one more small FTS5 segment.
            let lastOrdinal = try Self.lastOrdinal(db)
            try Self.insertRecords(rows, collection: collection, scope: scope, index: index, db: db)
            try Self.indexRows(db, after: lastOrdinal)
            // Counted as it goes: a COUNT(*) per page would make the download quadratic.
            let stored = (state?.stored ?? 0) + page.records.count
            try ReferenceStateRow(
                collection: collection, scope: scope, continuation: page.continuation, cursor: page.cursor, total: page.total,
                stored: stored, completedAt: completedAt, refreshedAt: completedAt
            ).insert(db)
            return stored
        }
        // Pages are stored without a flush of their own, but for the last: a page lost to a power cut is fetched
        // again, while "Ready for offline" must survive one.
        if page.continuation == nil {
            return try await store.perform { try await store.writeImmediate(write) }
        }
        return try await store.writeUnflushed(write)
    }
}
