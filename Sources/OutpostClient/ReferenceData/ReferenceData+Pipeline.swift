import Foundation

extension ReferenceData {
    /// Pages a transfer holds fetched but not yet stored, besides the one being asked for.
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
        /// page was not stored because the set moved on without it: the transfer then stops at once, asks for
        /// nothing more, stores nothing more, and returns normally.
        var store: @Sendable (_ page: Prepared, _ key: Key) async throws -> Bool
    }

    /// Runs a transfer from the page `first` names to the last, in a pipeline: the next page is asked for as soon
    /// as this one's key is known, and this one is prepared while the one before it is stored, so that the
    /// server, the network, the CPU work and the store overlap (at most ``lookahead`` pages fetched and not yet
    /// stored). Pages are stored one at a time, in order; a page fetched but not stored when the transfer stops
    /// is fetched again by the next one. A page is let go once stored: a transfer holds a few pages at a time,
    /// whatever its length.
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
        var fetching: (task: Task<Page, any Error>, id: Int)? = pipeline.add(Task { try await stages.fetch(first) })
        var key = first
        // Each page's store, with the ids of its three tasks, to let them go once it is stored.
        var storing: [(task: Task<Bool, any Error>, ids: [Int])] = []
        // Waits for the oldest store; false when the transfer has stopped there (a store returned false).
        func storeEnded() async throws -> Bool {
            let (task, ids) = storing.removeFirst()
            let stored: Bool
            do {
                stored = try await task.value
            } catch {
                // Cancelled by the stop: not an error of the transfer.
                if pipeline.isStopped { return false }
                throw error
            }
            pipeline.forget(ids)
            return stored
        }
        func stopped() async -> Bool {
            guard pipeline.isStopped else { return false }
            await pipeline.finish()
            return true
        }
        while let current = fetching {
            let page: Page
            do {
                page = try await current.task.value
            } catch {
                if await stopped() { return }
                // The network failed: the pages already here are stored first, so that the next attempt resumes
                // after them.
                while !storing.isEmpty {
                    guard try await storeEnded() else { return await pipeline.finish() }
                }
                throw error
            }
            if await stopped() { return }
            try Task.checkCancellation()
            let pageKey = key
            let next = stages.next(page)
            fetching = next.map { next in pipeline.add(Task { try await stages.fetch(next) }) }
            if let next { key = next }
            let prepared = pipeline.add(Task { try await stages.prepare(page) })
            let previous = storing.last?.task
            let store = pipeline.add(
                Task {
                    guard try await previous?.value ?? true else { return false }
                    let page = try await prepared.task.value
                    // A page not yet stored when the transfer is cancelled is left for the next one.
                    try Task.checkCancellation()
                    let stored = try await stages.store(page, pageKey)
                    if !stored { pipeline.stop() }
                    return stored
                })
            storing.append((store.task, [current.id, prepared.id, store.id]))
            while storing.count > lookahead {
                guard try await storeEnded() else { return await pipeline.finish() }
            }
        }
        while !storing.isEmpty {
            guard try await storeEnded() else { return await pipeline.finish() }
        }
    }

    /// The tasks of one transfer still of use, so that cancelling the transfer reaches them all, and it returns
    /// only once they have ended. A page's tasks are forgotten once it is stored, and with them the page.
    final class Pipeline: @unchecked Sendable {
        private struct Entry {
            var cancel: @Sendable () -> Void
            var end: @Sendable () async -> Void
        }

        private let lock = NSLock()
        private var tasks: [Int: Entry] = [:]
        private var nextId = 0
        private var cancelled = false
        private var stoppedEarly = false

        /// Keeps `task` until forgotten; cancelled at once if the transfer already was.
        func add<T: Sendable>(_ task: Task<T, any Error>) -> (task: Task<T, any Error>, id: Int) {
            let (id, cancelNow) = lock.withLock {
                nextId += 1
                tasks[nextId] = Entry(cancel: { task.cancel() }, end: { _ = try? await task.value })
                return (nextId, cancelled)
            }
            if cancelNow { task.cancel() }
            return (task, id)
        }

        /// Lets finished tasks go, and what they hold.
        func forget(_ ids: [Int]) {
            lock.withLock {
                for id in ids { tasks[id] = nil }
            }
        }

        func cancel() {
            let live = lock.withLock {
                cancelled = true
                return Array(tasks.values)
            }
            for entry in live { entry.cancel() }
        }

        /// A store found the set moved on: everything else is cancelled, and the transfer ends normally.
        func stop() {
            lock.withLock { stoppedEarly = true }
            cancel()
        }

        var isStopped: Bool { lock.withLock { stoppedEarly } }

        /// Waits for every task not forgotten, whatever their outcome.
        func finish() async {
            for entry in lock.withLock({ Array(tasks.values) }) { await entry.end() }
        }
    }
}
