import AsyncAlgorithms
import Foundation

extension ReferenceData {
    /// Pages a transfer holds fetched but not yet stored, besides the one being asked for: one being stored,
    /// one being prepared, one waiting for the preparing stage, and one in the fetching stage's hand.
    static let lookahead = 4

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

    /// Runs a transfer from the page `first` names to the last, in a pipeline: fetching, preparing and storing are
    /// stages of their own, each a task of one task group, handing pages on through `AsyncThrowingChannel`s
    /// (swift-async-algorithms), with room for one page between fetching and preparing: the next page is asked for
    /// as soon as the one before it is handed on, and a page is prepared while the one before it is stored, so that
    /// the server, the network, the CPU work and the store overlap, with at most ``lookahead`` pages fetched and not
    /// yet stored. Pages are stored one at a time, in order; a page fetched but not stored when the
    /// transfer stops is fetched again by the next one. A page is let go once stored: a transfer holds a few pages
    /// at a time, whatever its length.
    ///
    /// Cancelling the calling task stops the transfer: no page is asked for after it, a page being stored
    /// finishes, and the call throws `CancellationError` once every stage has ended. When the network fails, the
    /// pages already received are stored before its error is thrown. When a store returns false, the other stages
    /// are cancelled, and the call returns normally once they have ended.
    static func transfer<Key: Sendable, Page: Sendable, Prepared: Sendable>(
        from first: Key, _ stages: PageStages<Key, Page, Prepared>
    ) async throws {
        let fetched = AsyncThrowingChannel<(key: Key, page: Page), any Error>()
        let prepared = AsyncThrowingChannel<(key: Key, page: Prepared), any Error>()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await fetched.feed { send in
                    var key = first
                    while true {
                        let page = try await stages.fetch(key)
                        try await send((key, page))
                        guard let next = stages.next(page) else { return }
                        key = next
                    }
                }
            }
            group.addTask {
                await prepared.feed { send in
                    for try await (key, page) in fetched.buffer(policy: .bounded(1)) {
                        try await send((key, try await stages.prepare(page)))
                    }
                }
            }
            for try await (key, page) in prepared {
                // A page not yet stored when the transfer is cancelled is left for the next one.
                try Task.checkCancellation()
                guard try await stages.store(page, key) else {
                    // The set moved on: nothing more is asked for or stored, and the rest is not an error.
                    group.cancelAll()
                    return
                }
            }
            // A cancelled stage ends its channel early: that is the transfer's cancellation, not its end.
            try Task.checkCancellation()
        }
    }
}
