import Foundation
import GRDB
import OutpostProtocol

extension ReferenceData {
    /// Downloads the whole set in pages, storing each page and its continuation in one transaction; a page
    /// counts only once stored. Called again after a failure, it resumes after the last stored page.
    ///
    /// Pages travel in a pipeline: the next page is asked for as soon as this one's continuation is known, and
    /// this one is read and sealed while the one before it is written, so that the server, the network, the
    /// CPU work and the store overlap (at most ``lookahead`` pages ahead of the store). A page fetched but not
    /// stored when the download stops is fetched again.
    ///
    /// Cancelling the calling task stops the download: no page is asked for after it, a page being written
    /// finishes, and the call throws `CancellationError` once every task of the pipeline has ended.
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

        let pipeline = Pipeline()
        do {
            try await withTaskCancellationHandler {
                try await runPipeline(
                    pipeline, collection: collection, scope: scope, from: continuation
                ) { stored, total in
                    let elapsed = max(now().timeIntervalSince(started), 0.001)
                    progress?(DownloadProgress(
                        stored: stored, total: max(total, stored), rate: Double(stored - resumedFrom) / elapsed))
                }
            } onCancel: {
                pipeline.cancel()
            }
        } catch {
            // Nothing of the pipeline outlives the call.
            pipeline.cancel()
            await pipeline.finish()
            throw error
        }
        return try await state(collection: collection, scope: scope)
    }

    /// Pages a download holds fetched or prepared ahead of the one being stored.
    static let lookahead = 3

    /// Each page is named by the continuation that asks for it (nil: the first page). Its fetch, its
    /// preparation and its store are tasks: a page's preparation starts once it arrives, its store once it is
    /// prepared and the page before it stored, and the next page is asked for as soon as this one's
    /// continuation is known.
    private func runPipeline(
        _ pipeline: Pipeline, collection: String, scope: String, from continuation: String?,
        stored: @escaping @Sendable (_ stored: Int, _ total: Int) -> Void
    ) async throws {
        var fetching: Task<SnapshotPage, any Error>? = pipeline.add(
            fetchTask(collection: collection, scope: scope, continuation: continuation))
        var requested = continuation
        var storing: [Task<Void, any Error>] = []
        while let current = fetching {
            let raw: SnapshotPage
            do {
                raw = try await current.value
            } catch {
                // The network failed: the pages already here are stored first, so that the next attempt resumes
                // after them.
                while !storing.isEmpty { try await storing.removeFirst().value }
                throw error
            }
            try Task.checkCancellation()
            let isFirst = requested == nil
            requested = raw.continuation
            fetching = raw.continuation.map {
                pipeline.add(fetchTask(collection: collection, scope: scope, continuation: $0))
            }
            let prepared = pipeline.add(prepareTask(raw, collection: collection, scope: scope))
            let previous = storing.last
            storing.append(pipeline.add(Task {
                try await previous?.value
                let page = try await prepared.value
                // A page not yet written when the download is cancelled is left for the next attempt.
                try Task.checkCancellation()
                stored(try await storePage(page, collection: collection, scope: scope, isFirst: isFirst), page.page.total)
            }))
            while storing.count > Self.lookahead {
                try await storing.removeFirst().value
            }
        }
        while !storing.isEmpty {
            try await storing.removeFirst().value
        }
    }

    /// The tasks of one download, so that cancelling the download reaches them all, and it returns only once
    /// they have ended.
    final class Pipeline: @unchecked Sendable {
        private let lock = NSLock()
        private var cancellations: [@Sendable () -> Void] = []
        private var ends: [@Sendable () async -> Void] = []
        private var cancelled = false

        /// Keeps `task` until the download ends; cancelled at once if the download already was.
        func add<T: Sendable>(_ task: Task<T, any Error>) -> Task<T, any Error> {
            let cancelNow = lock.withLock {
                cancellations.append { task.cancel() }
                ends.append { _ = try? await task.value }
                return cancelled
            }
            if cancelNow { task.cancel() }
            return task
        }

        func cancel() {
            let cancellations = lock.withLock {
                cancelled = true
                return self.cancellations
            }
            for cancel in cancellations { cancel() }
        }

        /// Waits for every task added, whatever their outcome.
        func finish() async {
            for end in lock.withLock({ ends }) { await end() }
        }
    }

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
