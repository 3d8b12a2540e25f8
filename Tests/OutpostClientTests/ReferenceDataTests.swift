import Foundation
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

@Suite("Reference data")
struct ReferenceDataTests {
    static func roster(_ count: Int, event: String = "ev-1") -> ReferenceServer {
        let server = ReferenceServer()
        for i in 0..<count {
            server.put(
                String(format: "g%05d", i),
                ["event_id": .string(event), "name": .string("Guest\(i % 97) Family\(i)"), "email": .string("guest\(i)@example.org")],
                scope: event)
        }
        return server
    }

    @Test("a download cut at 50 % resumes from the last stored page and ends at 100 %, nothing missing or doubled")
    func resumeAfterFailure() async throws {
        try await withStore { store, _ in
            let server = Self.roster(2000)
            let data = ReferenceData(store: store, transport: server, pageSize: 100)
            server.failSnapshots(fromCall: 10)
            await #expect(throws: TransportError.self) { try await data.download(collection: "guests", scope: "ev-1") }
            #expect(try await data.state(collection: "guests", scope: "ev-1") == .incomplete(stored: 1000, total: 2000))
            #expect(try await data.lookup(collection: "guests", scope: "ev-1", recordId: "g00001") == .incomplete)
            server.failSnapshots(fromCall: nil)
            let progress = ProgressLog()
            let state = try await data.download(collection: "guests", scope: "ev-1") { progress.append($0) }
            #expect(state.isReady)
            // Resumed: ten more pages, not twenty.
            #expect(server.snapshotRequests == 10)
            #expect(progress.values.first?.stored == 1100)
            #expect(progress.values.last?.stored == 2000)
            #expect(progress.values.allSatisfy { $0.total == 2000 })
            for id in ["g00000", "g00999", "g01000", "g01999"] {
                guard case .found = try await data.lookup(collection: "guests", scope: "ev-1", recordId: id) else {
                    Issue.record("\(id) missing")
                    continue
                }
            }
        }
    }

    @Test("until complete the roster is incomplete; then ready for offline, with the time")
    func gating() async throws {
        try await withStore { store, _ in
            let data = ReferenceData(store: store, transport: Self.roster(10), now: { Date(timeIntervalSince1970: 1_795_251_600) })
            #expect(try await data.state(collection: "guests", scope: "ev-1") == .notDownloaded)
            #expect(try await data.state(collection: "guests", scope: "ev-1").message() == "Roster incomplete — connect to network to finish")
            try await data.download(collection: "guests", scope: "ev-1")
            let state = try await data.state(collection: "guests", scope: "ev-1")
            #expect(state == .ready(since: Date(timeIntervalSince1970: 1_795_251_600)))
            #expect(state.message(timeZone: TimeZone(identifier: "UTC")!) == "Ready for offline (since 2026-11-21 09:00)")
        }
    }

    @Test("refresh fetches only the delta: walk-ins appear, cancellations become tombstones")
    func deltaRefresh() async throws {
        try await withStore { store, _ in
            let server = Self.roster(50)
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev-1")
            // Before the refresh, a walk-in is not found.
            server.put("walk-in", ["event_id": "ev-1", "name": "Late Arrival", "email": "late@example.org"], scope: "ev-1")
            server.cancel("g00007")
            #expect(
                try await data.lookup(collection: "guests", scope: "ev-1", recordId: "walk-in").message
                    == "Guest not in roster — refresh and try again")
            let summary = try await data.refresh(collection: "guests", scope: "ev-1")
            #expect(summary == RefreshSummary(updated: 1, removed: 1))
            guard case .found(let walkIn) = try await data.lookup(collection: "guests", scope: "ev-1", recordId: "walk-in") else {
                Issue.record("walk-in missing after refresh")
                return
            }
            #expect(walkIn.fields["name"] == "Late Arrival")
            let cancelled = try await data.lookup(collection: "guests", scope: "ev-1", recordId: "g00007")
            #expect(cancelled == .cancelled)
            #expect(cancelled.message == "Registration cancelled — refer to organizer")
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "late").map(\.recordId) == ["walk-in"])
            // A second refresh with nothing new changes nothing.
            #expect(try await data.refresh(collection: "guests", scope: "ev-1") == RefreshSummary(updated: 0, removed: 0))
            // A cancelled guest registered again is found again, no longer cancelled.
            server.put("g00007", ["event_id": "ev-1", "name": "Guest7 Again", "email": "guest7@example.org"], scope: "ev-1")
            #expect(try await data.refresh(collection: "guests", scope: "ev-1") == RefreshSummary(updated: 1, removed: 0))
            guard case .found(let again) = try await data.lookup(collection: "guests", scope: "ev-1", recordId: "g00007") else {
                Issue.record("a guest registered again is not found")
                return
            }
            #expect(again.fields["name"] == "Guest7 Again")
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "guest7 again").map(\.recordId) == ["g00007"])
        }
    }

    @Test("search finds by name prefix or by e-mail, case and accents aside")
    func search() async throws {
        try await withStore { store, _ in
            let server = ReferenceServer()
            server.put("g1", ["name": "Zoë Ångström", "email": "zoe@example.org"], scope: "ev")
            server.put("g2", ["name": "Zoltan Kodály", "email": "zk@example.org"], scope: "ev")
            server.put("g3", ["name": "Anna Zorn", "email": "anna@example.org"], scope: "ev")
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev")
            func ids(_ query: String) async throws -> [String] {
                try await data.search(collection: "guests", scope: "ev", query: query).map(\.recordId).sorted()
            }
            #expect(try await ids("zo") == ["g1", "g2", "g3"])
            #expect(try await ids("Zoe") == ["g1"])
            #expect(try await ids("zolt") == ["g2"])
            #expect(try await ids("angst") == ["g1"])
            #expect(try await ids("zo ang") == ["g1"])
            #expect(try await ids("ZK@example.org") == ["g2"])
            #expect(try await ids("nobody") == [])
            await #expect(throws: ClientError.self) { _ = try await data.search(collection: "guests", scope: "ev", query: "z") }
        }
    }

    @Test("the SDK searches what the app declares: other collections and field names; a collection the schema names no search for is refused")
    func declaredSearch() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-schema-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        let schema = StoreSchema(search: ["crew": ReferenceSearch(words: "full_name", exact: "mail")])
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: schema)
        let server = ReferenceServer()
        server.put("c1", ["full_name": "Ines Okafor", "mail": "ines@example.org", "name": "ignored"], scope: "site")
        server.put("c2", ["full_name": "Omar Ines", "mail": "omar@example.org"], scope: "site")
        server.put("g1", ["name": "Ines Guest", "email": "ines@example.org"], scope: "site")
        let data = ReferenceData(store: store, transport: server)
        try await data.download(collection: "crew", scope: "site")
        func ids(_ query: String) async throws -> [String] {
            try await data.search(collection: "crew", scope: "site", query: query).map(\.recordId)
        }
        // Sorted by the declared words field.
        #expect(try await ids("ine") == ["c1", "c2"])
        #expect(try await ids("okaf") == ["c1"])
        #expect(try await ids("ignored") == [])
        #expect(try await ids("OMAR@example.org") == ["c2"])
        // Guests are nothing to this app: their roster is not searched here.
        try await data.download(collection: "guests", scope: "site")
        let refused = await #expect(throws: ClientError.self) {
            try await data.search(collection: "guests", scope: "site", query: "ines")
        }
        #expect(refused?.code == .invalidInput)
    }

    @Test("roster rows and the search index hold no name or e-mail in the clear")
    func encrypted() async throws {
        try await withStore { store, url in
            let server = ReferenceServer()
            server.put("g1", ["name": "Quintessa Marlowe", "email": "quintessa@example.org"], scope: "ev")
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev")
            #expect(try await data.search(collection: "guests", scope: "ev", query: "quint").count == 1)
            for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: url.path + suffix) {
                let bytes = try Data(contentsOf: URL(fileURLWithPath: url.path + suffix))
                for secret in ["Quintessa", "quintessa", "Marlowe", "example.org"] {
                    #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(secret) in \(suffix)")
                }
            }
        }
    }
}

final class ProgressLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [DownloadProgress] = []
    var values: [DownloadProgress] { lock.withLock { items } }
    func append(_ item: DownloadProgress) { lock.withLock { items.append(item) } }
}
