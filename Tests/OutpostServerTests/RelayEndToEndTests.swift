import Foundation
import GRDB
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A venue on real processes: a server, a relay on the venue's laptop whose line to the server runs through a
/// fault proxy, and three doors that are `outpost` device processes talking to the relay.
@Suite("Venue relay end to end")
struct RelayEndToEndTests {
    final class Venue: @unchecked Sendable {
        let root: URL
        let serverPort = String(try! TestPostgres.freePort())
        let relayPort = String(try! TestPostgres.freePort())
        /// Every process shares one secret: the relay verifies the doors' tokens offline.
        let environment = ["OUTPOST_JWT_SECRET": String(repeating: "venue-secret-", count: 4), "TZ": "UTC"]
        var server: RunningChild?
        var relay: RunningChild?
        var proxy: FaultProxy?

        init() throws {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-venue-\(UUID())")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        }

        deinit {
            server?.signal(SIGKILL)
            relay?.signal(SIGKILL)
            if let proxy { Task { try? await proxy.stop() } }
            try? FileManager.default.removeItem(at: root)
        }

        var serverURL: String { "http://127.0.0.1:\(serverPort)" }
        var relayURL: String { "http://127.0.0.1:\(relayPort)" }
        func path(_ name: String) -> String { root.appendingPathComponent(name).path }

        func outpost(_ arguments: [String], environment extra: [String: String] = [:]) async throws -> OutpostProcess.Output {
            try await OutpostProcess.run(arguments, environment: environment.merging(extra) { $1 })
        }

        func token(_ user: String, role: String = "staff", scope: String? = nil) async throws -> String {
            let scopes = scope.map { ["--scope", $0] } ?? []
            return try await outpost(["token", "--tenant", "acme", "--user", user, "--role", role] + scopes)
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        func startServer() async throws {
            let child = try await OutpostProcess.start(
                ["serve", "--port", serverPort, "--data-dir", path("server")], environment: environment)
            _ = try await child.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
            server = child
        }

        func startRelay() async throws {
            let proxy = try #require(proxy)
            let child = try await OutpostProcess.start(
                [
                    "serve", "--port", relayPort, "--data-dir", path("relay"), "--upstream", "http://127.0.0.1:\(proxy.port)",
                ], environment: environment.merging(["OUTPOST_UPSTREAM_TOKEN": try await token("hall-a", role: "relay", scope: "gala")]) { $1 })
            _ = try await child.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
            relay = child
        }

        /// A door: a device store set up against the relay, and a runner of `outpost` commands as that device.
        func door(_ id: String, user: String) async throws -> (_ arguments: [String]) async throws -> OutpostProcess.Output {
            let store = ["--store", path("\(id)/device.sqlite")]
            let initialised = try await outpost(
                ["device", "init", "--server", relayURL, "--token", try await token(user), "--device-id", id] + store)
            #expect(initialised.status == 0, "\(initialised.stderr)")
            return { arguments in try await self.outpost(arguments + store) }
        }

        /// Starts the server with a roster of `guests` for gala, the fault proxy on the line and the relay behind
        /// it, and waits until the relay holds the roster; returns the organizer's environment.
        func open(guests: Int) async throws -> [String: String] {
            try await startServer()
            let organizer = ["OUTPOST_SERVER": serverURL, "OUTPOST_TOKEN": try await token("olga", role: "organizer")]
            let csv = path("roster.csv")
            #expect(try await outpost(["roster", "generate", "--guests", String(guests), "--output", csv]).status == 0)
            #expect(try await outpost(["roster", "import", "--event", "gala", csv], environment: organizer).status == 0)
            proxy = try await FaultProxy.start(upstreamPort: Int(serverPort)!)
            try await startRelay()
            try await waitUntil("the roster at the relay") {
                try await self.count("SELECT count(*) FROM records WHERE collection = 'guests'", in: "relay") == guests
            }
            return organizer
        }

        /// A count read from a server's SQLite file.
        func count(_ sql: String, in name: String) async throws -> Int {
            let pool = try DatabasePool(path: path(name) + "/" + SQLiteStorage.databaseFileName)
            return try await pool.read { db in try Int.fetchOne(db, sql: sql) ?? 0 }
        }

        func waitUntil(_ what: String, _ condition: @escaping @Sendable () async throws -> Bool) async throws {
            try await bounded(what) {
                while try await !condition() { try await Task.sleep(for: .milliseconds(100)) }
            }
        }
    }

    @Test("line cut, doors one place, relay killed mid-forward: every scan reaches the server once, refusals come back")
    func venueDay() async throws {
        let venue = try Venue()
        // The relay brings the roster down before the doors open.
        let organizer = try await venue.open(guests: 40)
        let proxy = try #require(venue.proxy)
        let doors = [
            try await venue.door("door-1", user: "ana"), try await venue.door("door-2", user: "ben"),
            try await venue.door("door-3", user: "cy"),
        ]
        for door in doors { #expect(try await door(["event", "open", "gala"]).stdout.contains("Ready for offline")) }

        // The venue's line fails; the doors still reach the relay.
        proxy.inject(.drop)
        // Connections already open through it break too, as when the line fails.
        proxy.cutAll()
        // (A scan says "saved at the venue relay" once the relay answered within the scan's wait; on a loaded
        // machine it may say the server has not confirmed it yet. Never that it is synced.)
        let first = try await doors[0](["event", "scan", "g000001"])
        #expect(first.stdout.contains("Checked in: g000001") && !first.stdout.contains("(synced)"), "\(first.stdout)")
        // Door 2 learns of the scan once it is at the relay: on a loaded machine the scan's own delivery may end
        // before the relay answered, and door 1's next sync takes it there.
        _ = try await doors[0](["device", "sync"])
        let second = try await doors[1](["event", "scan", "g000001", "--lookup-wait", "30s"])
        #expect(second.stdout.contains("Already checked in at") && second.stdout.contains("by door-1"), "\(second.stdout)")
        // A guest cancelled upstream while the line is down is admitted at the venue, which cannot know yet.
        #expect(try await venue.outpost(["roster", "cancel", "--event", "gala", "g000005"], environment: organizer).status == 0)
        let admitted = try await doors[2](["event", "scan", "g000005"])
        #expect(admitted.stdout.contains("Checked in: g000005") && !admitted.stdout.contains("(synced)"), "\(admitted.stdout)")
        var order: [String: [String]] = ["door-1": ["g000001"], "door-3": ["g000005"]]
        for number in 10..<28 {
            let guest = String(format: "g%06d", number)
            let index = number % 3
            let scan = try await doors[index](["event", "scan", guest])
            #expect(scan.stdout.contains("Checked in: \(guest)") && !scan.stdout.contains("(synced)"), "\(scan.stdout) \(scan.stderr)")
            order["door-\(index + 1)", default: []].append(guest)
        }
        // A door's sync says where its scans are: at the relay, not on the server.
        let held = try await doors[0](["device", "sync"])
        #expect(held.status != 0)
        #expect(held.stdout.contains("0 synced, 0 failed; \(order["door-1"]!.count) at the venue relay, waiting for the server"), "\(held.stdout)")
        let listed = try await doors[0](["device", "records", "--pending"]).stdout
        #expect(listed.contains("⏳ at the venue relay") && listed.contains("g000001"), "\(listed)")
        #expect(try await venue.count("SELECT count(*) FROM mutations WHERE device_id LIKE 'door-%'", in: "server") == 0)

        // The line returns, but the server's answers to the relay's first forward are lost, and the relay is
        // killed before it tries again: the server has the batch, the relay does not know.
        proxy.inject(.cutAnswers(toRequestsStartingWith: "POST /v1/relay/forward"))
        try await venue.waitUntil("the first forward at the server") {
            try await venue.count("SELECT count(*) FROM mutations WHERE device_id LIKE 'door-%'", in: "server") > 0
        }
        _ = await venue.relay?.stop(SIGKILL)
        #expect(try await venue.count("SELECT count(*) FROM relay_journal WHERE forwarded_at IS NOT NULL", in: "relay") == 0)
        // Started as a plain server, its data folder would tell the doors their held scans are on the server.
        let plain = try await venue.outpost(["serve", "--port", "0", "--data-dir", venue.path("relay")])
        #expect(plain.status != 0)
        #expect(
            plain.stderr.split(separator: "\n").last?.contains("writes of a venue relay not yet on the server: start it with --upstream")
                == true, "\(plain.stderr)")
        proxy.inject(nil)
        try await venue.startRelay()
        try await venue.waitUntil("an empty backlog") {
            try await venue.count("SELECT count(*) FROM relay_journal WHERE forwarded_at IS NULL", in: "relay") == 0
        }

        // The server holds each scan it took once (not the cancelled guest's; door 2, told g000001 was in, saved
        // none), with its door, and each door's scans in the order it made them.
        order["door-3"]?.removeFirst()
        let scans = order.values.reduce(0) { $0 + $1.count }
        #expect(try await venue.count("SELECT count(*) FROM mutations WHERE device_id LIKE 'door-%'", in: "server") == scans)
        let pool = try DatabasePool(path: venue.path("server") + "/" + SQLiteStorage.databaseFileName)
        for (door, guests) in order {
            let stored = try await pool.read { db in
                try String.fetchAll(
                    db, sql: "SELECT record_id FROM mutations WHERE device_id = ? AND status <> 'superseded' ORDER BY client_ts",
                    arguments: [door])
            }
            #expect(stored == guests, "\(door)")
        }
        // The doors hear the server's answers through the relay: synced, and the cancelled guest refused.
        let one = try await doors[0](["device", "sync"])
        #expect(one.stdout.contains("\(order["door-1"]!.count) synced, 0 failed"), "\(one.stdout)")
        let three = try await doors[2](["device", "sync"])
        #expect(three.stdout.contains("1 refused"), "\(three.stdout)")
        let refused = try await doors[2](["device", "records", "--refused"]).stdout
        #expect(refused.contains("g000005") && refused.contains("cancelled"), "\(refused)")
        // The door reports the refusal to the relay, and the relay passes it on: both monitors list it.
        _ = try await doors[2](["device", "status"])
        let monitorToken = try await venue.token("olga", role: "organizer")
        for (name, url) in [("relay", venue.relayURL), ("server", venue.serverURL)] {
            let monitor = Client(url: url, token: monitorToken)
            try await venue.waitUntil("the refusal on the \(name)'s monitor") {
                let (status, data) = try await monitor.send("GET", "/v1/monitor?event=gala")
                guard status == 200 else { return false }
                return try JSONDecoder().decode(MonitorResponse.self, from: data).refusedRecords.contains { $0.recordId == "g000005" }
            }
        }

        #expect(await venue.relay?.stop() == 0)
        #expect(await venue.server?.stop() == 0)
        // No token in either log.
        let relayToken = try await venue.token("hall-a", role: "relay", scope: "gala")
        #expect(!(venue.relay?.stderr.contains(relayToken) ?? true))
    }
}

extension RelayEndToEndTests {
    /// A client of one of the venue's processes, over real HTTP.
    struct Client {
        let url: String
        let token: String

        func send(_ method: String, _ path: String, body: (some Encodable)? = nil as String?) async throws -> (Int, Data) {
            var request = URLRequest(url: URL(string: url + path)!)
            request.httpMethod = method
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            request.setValue(ProtocolFeature.allNames, forHTTPHeaderField: ProtocolFeature.header)
            if let body {
                request.httpBody = try JSONEncoder().encode(body)
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            }
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
        }

        func push(_ mutations: [Mutation], device: String) async throws -> [MutationResult] {
            let (status, data) = try await send("POST", "/v1/push", body: PushRequest(deviceId: device, mutations: mutations))
            #expect(status == 200, "\(String(decoding: data, as: UTF8.self))")
            return try JSONDecoder().decode(PushResponse.self, from: data).results
        }

        /// Every check-in of `gala`, as the server holds it.
        func checkIns() async throws -> [Change] {
            var changes: [Change] = []
            var cursor = ""
            while true {
                let (status, data) = try await send("GET", "/v1/pull?collection=checkins&scope=gala&limit=1000\(cursor)")
                guard status == 200 else { return changes }
                let page = try JSONDecoder().decode(PullResponse.self, from: data)
                changes += page.changes
                cursor = "&cursor=\(page.cursor)"
                if !page.hasMore { return changes }
            }
        }
    }

    @Test("the server killed with SIGKILL mid-forward and started again: nothing lost, nothing doubled", arguments: StorageKind.allCases)
    func serverKilledMidForward(kind: StorageKind) async throws {
        let venue = try Venue()
        let database = kind == .postgres ? try await TestPostgres.shared.makeDatabase() : nil
        let storage = database.map { ["--database-url", $0] } ?? []
        func startServer() async throws -> RunningChild {
            let child = try await OutpostProcess.start(
                ["serve", "--port", venue.serverPort, "--data-dir", venue.path("server")] + storage,
                environment: venue.environment)
            _ = try await child.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
            return child
        }
        var server = try await startServer()
        venue.server = server
        let organizer = Client(url: venue.serverURL, token: try await venue.token("olga", role: "organizer"))
        let guests = (0..<600).map { String(format: "g%04d", $0) }
        for chunk in stride(from: 0, to: guests.count, by: 300) {
            let roster = guests[chunk..<chunk + 300].map { AccessRulesTests.guest($0, event: "gala") }
            #expect(try await organizer.push(Array(roster), device: "admin").allSatisfy { $0.status == .applied })
        }
        let proxy = try await FaultProxy.start(upstreamPort: Int(venue.serverPort)!)
        venue.proxy = proxy
        defer { Task { try? await proxy.stop() } }
        try await venue.startRelay()
        try await venue.waitUntil("the roster at the relay") {
            try await venue.count("SELECT count(*) FROM records WHERE collection = 'guests'", in: "relay") == guests.count
        }

        // The line is cut while three doors scan every guest, each door its own in order.
        proxy.inject(.drop)
        // Connections already open through it break too, as when the line fails.
        proxy.cutAll()
        var doors: [String: Client] = [:]
        for (door, user) in [("door-1", "ana"), ("door-2", "ben"), ("door-3", "cy")] {
            doors[door] = Client(url: venue.relayURL, token: try await venue.token(user))
        }
        for chunk in stride(from: 0, to: guests.count, by: 60) {
            let door = "door-\(chunk / 60 % 3 + 1)"
            let scans = guests[chunk..<chunk + 60].enumerated().map { offset, guest in
                RecordRulesTests.scan(guest, device: door, at: 100 + Double(chunk + offset))
            }
            let results = try await doors[door]!.push(scans, device: door)
            #expect(results.allSatisfy { $0.error?.code == .heldAtRelay })
        }

        // The line returns slowly, and the server is killed as the forwards arrive, then started again.
        proxy.inject(.delay(.milliseconds(20)))
        try await venue.waitUntil("the first forward at the server") { try await organizer.checkIns().count > 0 }
        _ = await server.stop(SIGKILL)
        server = try await startServer()
        venue.server = server
        proxy.inject(nil)
        try await venue.waitUntil("an empty backlog") {
            try await venue.count("SELECT count(*) FROM relay_journal WHERE forwarded_at IS NULL", in: "relay") == 0
        }

        // Every scan is on the server once: one record each, written once, with its door. (PostgreSQL's pulls
        // show a change once every transaction before it has ended: the killed server's may take a moment.)
        try await venue.waitUntil("every scan on the server") { try await organizer.checkIns().count >= guests.count }
        let checkIns = try await organizer.checkIns()
        #expect(checkIns.count == guests.count)
        #expect(Set(checkIns.map(\.recordId)) == Set(guests))
        #expect(checkIns.allSatisfy { $0.version == 1 })
        for change in checkIns {
            let index = guests.firstIndex(of: change.recordId)!
            #expect(change.fields["scanned_by"] == .string("door-\(index / 60 % 3 + 1)"))
            #expect(change.createdAt == Fixtures.time(100 + Double(index)))
        }
        #expect(await venue.relay?.stop() == 0)
        #expect(await server.stop() == 0)
        if let database { await TestPostgres.shared.dropDatabase(url: database) }
    }
}

extension RelayEndToEndTests {
    @Test("a door with the relay as its fallback, moving between relay and server mid-queue: each write applied once")
    func doorWithFallback() async throws {
        let venue = try Venue()
        // The venue's one line out carries both the door's way to the server and the relay's.
        _ = try await venue.open(guests: 20)
        let proxy = try #require(venue.proxy)
        let store = ["--store", venue.path("door-1/device.sqlite")]
        let initialised = try await venue.outpost(
            [
                "device", "init", "--server", "http://127.0.0.1:\(proxy.port)", "--fallback", venue.relayURL, "--token",
                try await venue.token("ana"), "--device-id", "door-1",
            ] + store)
        #expect(initialised.status == 0 && initialised.stdout.contains("fallback \(venue.relayURL)"), "\(initialised.stderr)")
        let door = { (arguments: [String]) in try await venue.outpost(arguments + store) }
        #expect(try await door(["event", "open", "gala"]).stdout.contains("Ready for offline"))

        // With the line up, the door's scan goes to the server.
        _ = try await door(["event", "scan", "g000001"])
        #expect(try await door(["device", "sync"]).stdout.contains("0 failed"))
        // With it down, to the relay, where it is held.
        proxy.inject(.drop)
        // Connections already open through it break too, as when the line fails.
        proxy.cutAll()
        for number in 2...6 { _ = try await door(["event", "scan", String(format: "g%06d", number)]) }
        let held = try await door(["device", "sync"])
        #expect(held.stdout.contains("at the venue relay, waiting for the server"), "\(held.stdout) \(held.stderr)")
        // The line returns: the door sends what waits to the server itself, and the relay forwards the same writes.
        proxy.inject(nil)
        let synced = try await door(["device", "sync"])
        #expect(synced.stdout.contains("0 failed") && !synced.stdout.contains("at the venue relay"), "\(synced.stdout)")
        try await venue.waitUntil("an empty backlog") {
            try await venue.count("SELECT count(*) FROM relay_journal WHERE forwarded_at IS NULL", in: "relay") == 0
        }
        #expect(try await door(["device", "records", "--pending"]).stdout.contains("no records"))
        // Each scan is on the server once, written once.
        #expect(try await venue.count("SELECT count(*) FROM mutations WHERE device_id = 'door-1'", in: "server") == 6)
        #expect(try await venue.count("SELECT count(*) FROM records WHERE collection = 'checkins' AND version = 1", in: "server") == 6)
        #expect(await venue.relay?.stop() == 0)
        #expect(await venue.server?.stop() == 0)
    }
}
