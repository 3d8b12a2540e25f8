import Foundation
import NIOConcurrencyHelpers
import OutpostProtocol

/// Pulls read from streams of pages (``BulkSyncTransport/pullPageStream(collection:scope:cursor:limit:pages:)``, or
/// ``BulkSyncTransport/pullStream(collection:scope:cursor:limit:pages:)``): each page asked for is the stream's next when
/// the stream stands at its cursor, and a new stream starts from the cursor otherwise (the first page, or after a
/// stream ended with more to come). Asked for by one task at a time: a refresh or a pull takes its pages in order.
///
/// Unchecked: the open stream's iterator is used by that one task at a time; the lock guards only which stream is
/// open, against ``close()``.
final class PullStream<Page: Sendable>: @unchecked Sendable {
    private struct Current {
        var iterator: AsyncThrowingStream<Page, any Error>.AsyncIterator
        var at: String?
    }

    private let open: @Sendable (String?) -> AsyncThrowingStream<Page, any Error>
    private let cursorOf: @Sendable (Page) -> String
    private let lock = NIOLock()
    private var current: Current?

    /// - Parameters:
    ///   - cursor: where the pull after a page continues.
    ///   - open: a stream of pages from a cursor (nil: from the start).
    init(
        cursor: @escaping @Sendable (Page) -> String,
        open: @escaping @Sendable (String?) -> AsyncThrowingStream<Page, any Error>
    ) {
        self.cursorOf = cursor
        self.open = open
    }

    func page(after cursor: String?) async throws -> Page {
        var iterator: AsyncThrowingStream<Page, any Error>.AsyncIterator
        if let current = lock.withLock({ self.current }), current.at == cursor {
            iterator = current.iterator
            let next: Page?
            do {
                next = try await iterator.next()
            } catch {
                // A stream that failed is done with: a retry from this cursor opens another.
                lock.withLock { self.current = nil }
                throw error
            }
            if let page = next {
                lock.withLock { self.current = Current(iterator: iterator, at: cursorOf(page)) }
                return page
            }
        }
        // A stream left standing elsewhere ends as its iterator is let go.
        lock.withLock { current = nil }
        // A cancelled pull (or a refresh stopped because another overtook it) asks for nothing more.
        try Task.checkCancellation()
        iterator = open(cursor).makeAsyncIterator()
        guard let page = try await iterator.next() else {
            try Task.checkCancellation()
            throw TransportError(kind: .invalidResponse, message: "the server's stream of changes was empty")
        }
        lock.withLock { self.current = Current(iterator: iterator, at: cursorOf(page)) }
        return page
    }

    /// Ends the open stream, and with it its exchange: a stream whose iterator is let go is cancelled, and its
    /// producer with it.
    func close() {
        lock.withLock { current = nil }
    }
}
