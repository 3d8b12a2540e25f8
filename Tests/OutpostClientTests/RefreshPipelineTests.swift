import Foundation
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// A refresh pulls in a pipeline, several pages at once: each page is still stored once, in order, with its
/// cursor; a failure keeps what came before it; and a refresh overtaken by another stores nothing stale.
@Suite("Refresh pipeline")
struct RefreshPipelineTests {
    /// On a roster of 1,000 guests, 600 changed guests, 100 cancelled ones and a walk-in, in that order: more
    /// changes than one pull holds.
    static func change(_ server: ReferenceServer) {
        for i in 0..<600 {
            server.put(
                String(format: "g%05d", i),
                [
                    "event_id": "ev-1", "name": .string("Guest\(i % 97) Family\(i)"), "email": .string("guest\(i)@example.org"),
                    "note": "table 4",
                ],
                scope: "ev-1")
        }
        for i in 900..<1000 { server.cancel(String(format: "g%05d", i)) }
        server.put("walk-in", ["event_id": "ev-1", "name": "Late Arrival", "email": "late@example.org"], scope: "ev-1")
        // Another event's changes share the server's log; a pull passes over them.
        server.put("other", ["event_id": "ev-2", "name": "Elsewhere"], scope: "ev-2")
    }

    static let changes = 701
    static var pulls: Int { (changes + ReferenceData.refreshPageSize - 1) / ReferenceData.refreshPageSize }

    /// Streams carry as many pages as the refresh asks for (nil), or fewer, as from a server with a lower limit:
    /// the refresh then opens the next stream from the cursor the last one ended at.
    @Test(
        "more changes than a pull holds: every page stored once, in order, each pulled once, in as many streams as the server allows",
        .timeLimit(.minutes(5)), arguments: [nil, 1, 2] as [Int?])
    func severalPages(pagesPerStream: Int?) async throws {
        #expect(Self.pulls >= 3, "the test needs a refresh of at least three pulls")
        try await withStore { store, _ in
            let server = ReferenceDataTests.roster(1000)
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev-1")
            Self.change(server)
            server.failPulls(fromCall: nil)
            server.limitStreams(toPages: pagesPerStream)
            #expect(try await data.refresh(collection: "guests", scope: "ev-1") == RefreshSummary(updated: 601, removed: 100))
            #expect(server.pullRequests == Self.pulls)
            let perStream = pagesPerStream ?? ReferenceData.refreshPagesPerStream
            #expect(server.streamRequests == (Self.pulls + perStream - 1) / perStream)
            guard case .found(let changed) = try await data.lookup(collection: "guests", scope: "ev-1", recordId: "g00599"),
                case .found = try await data.lookup(collection: "guests", scope: "ev-1", recordId: "walk-in")
            else {
                Issue.record("a changed guest or the walk-in is missing")
                return
            }
            #expect(changed.fields["note"] == "table 4")
            #expect(try await data.lookup(collection: "guests", scope: "ev-1", recordId: "g00950") == .cancelled)
            #expect(try await data.lookup(collection: "guests", scope: "ev-1", recordId: "other") == .notFound)
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "late arrival").map(\.recordId) == ["walk-in"])
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "family950").isEmpty)
            // Caught up: the next refresh opens one stream, pulls once and finds nothing.
            server.failPulls(fromCall: nil)
            server.limitStreams(toPages: pagesPerStream)
            #expect(try await data.refresh(collection: "guests", scope: "ev-1") == RefreshSummary(updated: 0, removed: 0))
            #expect(server.pullRequests == 1)
            #expect(server.streamRequests == 1)
        }
    }

    @Test("the network failing on the third pull keeps the two pages before it; the next refresh pulls the rest only", .timeLimit(.minutes(5)))
    func failureKeepsPagesBefore() async throws {
        try await withStore { store, _ in
            let server = ReferenceDataTests.roster(1000)
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev-1")
            Self.change(server)
            server.failPulls(fromCall: 2)
            await #expect(throws: TransportError.self) { try await data.refresh(collection: "guests", scope: "ev-1") }
            let firstTwo = 2 * ReferenceData.refreshPageSize
            // The log holds the 600 changed guests first: the first two pages were stored, the rest not.
            guard
                case .found(let stored) = try await data.lookup(collection: "guests", scope: "ev-1", recordId: String(format: "g%05d", firstTwo - 1)),
                case .found(let notYet) = try await data.lookup(collection: "guests", scope: "ev-1", recordId: String(format: "g%05d", firstTwo))
            else {
                Issue.record("a guest is missing after the failed refresh")
                return
            }
            #expect(stored.fields["note"] == "table 4")
            #expect(notYet.fields["note"] == nil)
            server.failPulls(fromCall: nil)
            #expect(
                try await data.refresh(collection: "guests", scope: "ev-1")
                    == RefreshSummary(updated: 601 - firstTwo, removed: 100))
            #expect(server.pullRequests == Self.pulls - 2)
            #expect(try await data.lookup(collection: "guests", scope: "ev-1", recordId: "g00950") == .cancelled)
        }
    }

    /// Answers the first pull as it stood when asked, but only after `overtake` has run: a refresh that another
    /// refresh overtakes while its page is on the way.
    final class OvertakingServer: RosterDouble, @unchecked Sendable {
        let roster: ReferenceServer
        private let lock = NSLock()
        private var overtake: (@Sendable () async throws -> Void)?

        init(roster: ReferenceServer) {
            self.roster = roster
        }

        func onFirstPull(_ overtake: @escaping @Sendable () async throws -> Void) {
            lock.withLock { self.overtake = overtake }
        }

        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            try await roster.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }

        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            let answer = try await roster.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
            let overtake = lock.withLock {
                defer { self.overtake = nil }
                return self.overtake
            }
            try await overtake?()
            return answer
        }
    }

    @Test(
        "a refresh overtaken by another while its page was on the way stores nothing: no older value, no cursor moved back", .timeLimit(.minutes(5)))
    func overtaken() async throws {
        try await withStore { store, _ in
            let roster = ReferenceDataTests.roster(20)
            let server = OvertakingServer(roster: roster)
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev-1")
            roster.put("g00003", ["event_id": "ev-1", "name": "Guest3 Before", "email": "guest3@example.org"], scope: "ev-1")
            server.onFirstPull {
                // While the first refresh's page (with "Before") is on the way, the guest changes again and
                // another refresh stores that.
                roster.put("g00003", ["event_id": "ev-1", "name": "Guest3 After", "email": "guest3@example.org"], scope: "ev-1")
                let inner = try await data.refresh(collection: "guests", scope: "ev-1")
                #expect(inner == RefreshSummary(updated: 1, removed: 0))
            }
            #expect(try await data.refresh(collection: "guests", scope: "ev-1") == RefreshSummary(updated: 0, removed: 0))
            guard case .found(let guest) = try await data.lookup(collection: "guests", scope: "ev-1", recordId: "g00003") else {
                Issue.record("g00003 missing")
                return
            }
            #expect(guest.fields["name"] == "Guest3 After")
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "after").map(\.recordId) == ["g00003"])
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "before").isEmpty)
            // The cursor stayed where the second refresh left it: nothing more to pull.
            #expect(try await data.refresh(collection: "guests", scope: "ev-1") == RefreshSummary(updated: 0, removed: 0))
        }
    }
}
