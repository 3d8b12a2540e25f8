import Foundation

extension ReferenceData {
    /// Pages a transfer holds fetched or prepared ahead of the one being stored.
    static let lookahead = 3

    /// The stages of a paged transfer (a download's snapshot pages, a refresh's pulls). Each page is named by a
    /// key the page before it gives.
    struct PageStages<Key: Sendable, Page: Sendable, Prepared: Sendable>: Sendable {
        /// Asks the server for the page `key` names.
        var fetch: @Sendable (Key) async throws -> Page
        /// The key of the page after `page`; nil when `page` is the last.
        var next: @Sendable (Page) -> Key?
        /// Everything but the database work: reading, sealing, tokens.
        var prepare: @Sendable (Page) async throws -> Prepared
        /// Stores a prepared page, fetched with `key`, with what names the page after it. Returns false when the
        /// page was not stored because the set moved on without it: the transfer then stops.
        var store: @Sendable (_ page: Prepared, _ key: Key) async throws -> Bool
    }

    /// Runs a transfer from the page `first` names to the last, in a pipeline: the next page is asked for as soon
    /// as this one's key is known, and this one is prepared while the one before it is stored, so that the
    /// server, the network, the CPU work and the store overlap (at most ``lookahead`` pages ahead of the store).
    /// Pages are stored one at a time, in order; a page fetched but not stored when the transfer stops is
    /// fetched again by the next one.
    ///
    /// Cancelling the calling task stops the transfer: no page is asked for after it, a page being stored
    /// finishes, and the call throws `CancellationError` once every task of the pipeline has ended. When the
    /// network fails, the pages already received are stored before its error is thrown.
    static func transfer<Key: Sendable, Page: Sendable, Prepared: Sendable>(
        from first: Key, _ stages: PageStages<Key, Page, Prepared>
    ) async throws {
        let pipeline = Pipeline()
        do {
            try await withTaskCancellationHandler {
                try await run(pipeline, from: first, stages)
            } onCancel: {
                pipeline.cancel()
            }
        } catch {
            // Nothing of the pipeline outlives the call.
            pipeline.cancel()
            await pipeline.finish()
            throw error
        }
    }

    /// Each page's fetch, preparation and store are tasks: a page's preparation starts once it arrives, its store
    /// once it is prepared and the page before it stored.
    private static func run<Key: Sendable, Page: Sendable, Prepared: Sendable>(
        _ pipeline: Pipeline, from first: Key, _ stages: PageStages<Key, Page, Prepared>
    ) async throws {
        var fetching: Task<Page, any Error>? = pipeline.add(Task { try await stages.fetch(first) })
        var key = first
        var storing: [Task<Bool, any Error>] = []
        // Waits for the oldest store; false when the transfer is to stop there.
        func storeEnded() async throws -> Bool {
            guard try await storing.removeFirst().value else {
                pipeline.cancel()
                await pipeline.finish()
                return false
            }
            return true
        }
        while let current = fetching {
            let page: Page
            do {
                page = try await current.value
            } catch {
                // The network failed: the pages already here are stored first, so that the next attempt resumes
                // after them.
                while !storing.isEmpty { guard try await storeEnded() else { break } }
                throw error
            }
            try Task.checkCancellation()
            let pageKey = key
            let next = stages.next(page)
            fetching = next.map { next in pipeline.add(Task { try await stages.fetch(next) }) }
            if let next { key = next }
            let prepared = pipeline.add(Task { try await stages.prepare(page) })
            let previous = storing.last
            storing.append(pipeline.add(Task {
                guard try await previous?.value ?? true else { return false }
                let page = try await prepared.value
                // A page not yet stored when the transfer is cancelled is left for the next one.
                try Task.checkCancellation()
                return try await stages.store(page, pageKey)
            }))
            while storing.count > lookahead {
                guard try await storeEnded() else { return }
            }
        }
        while !storing.isEmpty {
            guard try await storeEnded() else { return }
        }
    }

    /// The tasks of one transfer, so that cancelling the transfer reaches them all, and it returns only once
    /// they have ended.
    final class Pipeline: @unchecked Sendable {
        private let lock = NSLock()
        private var cancellations: [@Sendable () -> Void] = []
        private var ends: [@Sendable () async -> Void] = []
        private var cancelled = false

        /// Keeps `task` until the transfer ends; cancelled at once if the transfer already was.
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
}
