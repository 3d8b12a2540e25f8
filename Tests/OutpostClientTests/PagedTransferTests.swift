import Foundation
import OutpostProtocol
import Testing

@testable import OutpostClient

/// The paged transfer under downloads and refreshes, driven with pages that count themselves.
@Suite("Paged transfer")
struct PagedTransferTests {
    /// Counts the pages alive, and the most there ever were.
    final class Census: @unchecked Sendable {
        private let lock = NSLock()
        private var alive = 0
        private var peak = 0
        private var storedPages: [Int] = []
        private var fetchesAfterStop = 0
        private var stopped = false

        func born() {
            lock.withLock {
                alive += 1; peak = max(peak, alive)
            }
        }
        func died() { lock.withLock { alive -= 1 } }
        func stored(_ page: Int) { lock.withLock { storedPages.append(page) } }
        func stop() { lock.withLock { stopped = true } }
        func fetched() { lock.withLock { if stopped { fetchesAfterStop += 1 } } }

        var maximum: Int { lock.withLock { peak } }
        var living: Int { lock.withLock { alive } }
        var stores: [Int] { lock.withLock { storedPages } }
        var lateFetches: Int { lock.withLock { fetchesAfterStop } }
    }

    /// A page, or a prepared page: each one counted while it lives.
    final class Counted: Sendable {
        let number: Int
        let census: Census

        init(_ number: Int, census: Census) {
            self.number = number
            self.census = census
            census.born()
        }

        deinit { census.died() }
    }

    @Test("a long transfer holds a few pages at a time: each is let go once stored", .timeLimit(.minutes(5)))
    func pagesLetGo() async throws {
        let census = Census()
        let pages = 200
        try await ReferenceData.transfer(
            from: 0,
            ReferenceData.PageStages(
                fetch: { number in Counted(number, census: census) },
                next: { page in page.number + 1 < pages ? page.number + 1 : nil },
                prepare: { page in (page.number, Counted(page.number, census: census)) },
                store: { prepared, number in
                    #expect(prepared.0 == number)
                    census.stored(number)
                    return true
                }))
        #expect(census.stores == Array(0..<pages))
        // A page and its prepared twin for each page fetched and not yet stored (at most the lookahead, one
        // being stored and one being asked for), with room for a task's context let go a moment late; held
        // to the end, they would be 400.
        #expect(census.maximum <= 2 * (ReferenceData.lookahead + 2) + 2)
        #expect(census.living == 0)
    }

    /// Runs a transfer of `pages` pages whose store finds the set moved on at page `stopAt`, and whose pages
    /// from `failingFrom` on fail as the network would; returns what it saw.
    static func stopping(pages: Int, at stopAt: Int, failingFrom: Int? = nil) async throws -> Census {
        let census = Census()
        try await ReferenceData.transfer(
            from: 0,
            ReferenceData.PageStages(
                fetch: { number in
                    if let failingFrom, number >= failingFrom {
                        throw TransportError(kind: .network, message: "connection lost")
                    }
                    // As a transport does, a request cancelled before it goes out is not made.
                    try Task.checkCancellation()
                    census.fetched()
                    return number
                },
                next: { number in number + 1 < pages ? number + 1 : nil },
                prepare: { number in number },
                store: { number, _ in
                    census.stored(number)
                    guard number < stopAt else {
                        census.stop()
                        return false
                    }
                    return true
                }))
        return census
    }

    @Test(
        "a store that finds the set moved on stops the transfer at once: nothing stored after, nothing asked for, no error even if the network fails then",
        .timeLimit(.minutes(5)))
    func stopsAtOnce() async throws {
        let census = try await Self.stopping(pages: 50, at: 2, failingFrom: 3)
        #expect(census.stores == [0, 1, 2])
        #expect(census.lateFetches == 0)
    }

    @Test("stopped while later pages are still coming, no page after the stop is stored or asked for", .timeLimit(.minutes(5)))
    func stopsWithPagesInFlight() async throws {
        let census = try await Self.stopping(pages: 100, at: 5)
        #expect(census.stores == [0, 1, 2, 3, 4, 5])
        #expect(census.lateFetches == 0)
    }
}
