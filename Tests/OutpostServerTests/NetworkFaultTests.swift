import Foundation
import GRDB
import OutpostClient
import OutpostTesting
import Testing

@testable import OutpostServer

/// A real `outpost serve` and real `outpost` device processes, talking through the project's fault proxy on
/// loopback, which cuts the link part-way through a transfer, drops connections, or delays them.
@Suite("Network faults")
struct NetworkFaultTests {
    /// A server process, a proxy in front of it, and tokens.
    struct Setup {
        let root: URL
        let data: String
        let server: RunningChild
        let proxy: FaultProxy

        static func start() async throws -> Setup {
            let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-faults-\(UUID())")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let data = root.appendingPathComponent("server").path
            let server = try await OutpostProcess.start(["serve", "--port", "0", "--data-dir", data])
            let port = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
            let proxy = try await FaultProxy.start(upstreamPort: Int(port)!)
            return Setup(root: root, data: data, server: server, proxy: proxy)
        }

        var proxyURL: String { "http://127.0.0.1:\(proxy.port)" }

        func token(_ user: String, role: String) async throws -> String {
            try await OutpostProcess.run(["token", "--tenant", "acme", "--user", user, "--role", role, "--data-dir", data])
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// A device store set up against the proxy.
        func device(_ name: String, user: String = "ana") async throws -> [String] {
            let store = ["--store", root.appendingPathComponent("\(name)/device.sqlite").path]
            let setup = try await OutpostProcess.run(
                ["device", "init", "--server", proxyURL, "--token", try token(user, role: "staff"), "--device-id", name]
                    + store)
            #expect(setup.status == 0, "\(setup.stderr)")
            return store
        }

        /// Generates a roster of `guests` and imports it as event `gala`, through the proxy.
        func importRoster(guests: Int) async throws {
            let organizer = ["OUTPOST_SERVER": proxyURL, "OUTPOST_TOKEN": try await token("org", role: "organizer")]
            let csv = root.appendingPathComponent("roster.csv").path
            #expect(try await OutpostProcess.run(["roster", "generate", "--guests", String(guests), "--output", csv]).status == 0)
            #expect(try await OutpostProcess.run(["roster", "import", "--event", "gala", csv], environment: organizer).status == 0)
        }

        func finish() async throws {
            try await proxy.stop()
            #expect(await server.stop() == 0)
            try? FileManager.default.removeItem(at: root)
        }
    }

    static func database(_ store: [String]) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.readonly = true
        return try DatabaseQueue(path: store[1], configuration: configuration)
    }

    @Test("a link cut mid-roster-download: the device resumes after the last stored page and holds every guest once")
    func cutMidRosterDownload() async throws {
        let setup = try await Setup.start()
        try await setup.importRoster(guests: 3000)

        // How many bytes a whole download takes, measured through the proxy on a healthy link.
        let reference = try await setup.device("reference")
        let before = setup.proxy.counters.bytesDownstream
        #expect(try await OutpostProcess.run(["event", "open", "gala"] + reference).status == 0)
        let whole = setup.proxy.counters.bytesDownstream - before

        // Given a link that dies halfway through the roster and stays down,
        let store = try await setup.device("phone")
        setup.proxy.inject(.cutAfter(bytes: whole / 2, direction: .downstream))
        let cut = try await OutpostProcess.run(["event", "open", "gala"] + store)
        #expect(cut.status != 0)
        #expect(cut.stderr.split(separator: "\n").count == 1, "one line on stderr: \(cut.stderr)")
        let partial = try await Self.database(store).read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM reference_records") ?? 0
        }
        #expect(partial > 0 && partial < 3000, "stored \(partial) before the cut")

        // when the network returns, opening the event again fetches only what is missing,
        setup.proxy.inject(nil)
        let resumedFrom = setup.proxy.counters.bytesDownstream
        let resumed = try await OutpostProcess.run(["event", "open", "gala"] + store)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(resumed.stdout.contains("3000/3000"))
        #expect(resumed.stdout.contains("Ready for offline"))
        let fetched = setup.proxy.counters.bytesDownstream - resumedFrom
        #expect(fetched < whole * 3 / 4, "resumed with \(fetched) of \(whole) bytes")

        // and the device holds every guest exactly once.
        let (rows, ids) = try await Self.database(store).read { db in
            (
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM reference_records WHERE collection = 'guests'") ?? 0,
                Set(try String.fetchAll(db, sql: "SELECT record_id FROM reference_records WHERE collection = 'guests'"))
            )
        }
        #expect(rows == 3000)
        #expect(ids == Set((0..<3000).map { String(format: "g%06d", $0) }))
        try await setup.finish()
    }

    @Test(
        "a link cut mid-replay, on the way in and on the way back: every write arrives exactly once, in order",
        arguments: [FaultProxy.Direction.upstream, .downstream])
    func cutMidReplay(direction: FaultProxy.Direction) async throws {
        let setup = try await Setup.start()
        let store = try await setup.device("phone")
        // Given 600 writes queued offline,
        let written = try await LocalStore.queueOfflineNotes(at: store[1], deviceId: "phone", count: 600)

        // when the link dies part-way through the replay (a request half-sent, or a response half-received
        // after the server applied it) and stays down,
        // A chunk of 50 is about 12 kB on the way in and 6 kB on the way back: cut inside the third.
        let chunk = direction == .upstream ? 12_000 : 6_000
        setup.proxy.inject(.cutAfter(bytes: 2 * chunk + chunk / 2, direction: direction))
        let cut = try await OutpostProcess.run(["device", "sync"] + store)
        // The device says the replay stopped short: some synced, the rest kept and marked failed.
        let tally = try #require(cut.stdout.firstMatch(of: /(\d+) synced, (\d+) failed/), "\(cut.stdout)")
        #expect(Int(tally.1)! < 600 && Int(tally.2)! > 0, "\(cut.stdout)")
        #expect(setup.proxy.counters.cut > 0)
        let (before, _, _) = try await Self.serverState(setup)
        #expect(before > 0 && before < 600, "\(before) of 600 arrived before the cut")

        // and then returns,
        setup.proxy.inject(nil)
        let resumed = try await OutpostProcess.run(["device", "sync"] + store)
        #expect(resumed.status == 0, "\(resumed.stdout) \(resumed.stderr)")
        #expect(resumed.stdout.contains("0 failed"))
        #expect(try await OutpostProcess.run(["device", "records", "--pending"] + store).stdout.contains("no records"))

        // then the server holds each write exactly once, in the device's order.
        let (mutations, keys, order) = try await Self.serverState(setup)
        #expect(mutations == 600)
        #expect(keys == 600)
        #expect(order == written)
        try await setup.finish()
    }

    /// The server's mutations, distinct idempotency keys, and records in commit order.
    static func serverState(_ setup: Setup) async throws -> (Int, Int, [String]) {
        let pool = try DatabasePool(path: setup.data + "/" + SQLiteStorage.databaseFileName)
        return try await pool.read { db in
            (
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM mutations") ?? 0,
                try Int.fetchOne(db, sql: "SELECT COUNT(DISTINCT idempotency_key) FROM mutations") ?? 0,
                try String.fetchAll(db, sql: "SELECT record_id FROM records ORDER BY change_seq")
            )
        }
    }

    @Test("dropped connections fail the download cleanly with nothing stored; a slow link still completes it")
    func dropAndDelay() async throws {
        let setup = try await Setup.start()
        try await setup.importRoster(guests: 1200)
        let store = try await setup.device("phone")

        setup.proxy.inject(.drop)
        let dropped = try await OutpostProcess.run(["event", "open", "gala"] + store)
        #expect(dropped.status != 0)
        #expect(dropped.stderr.split(separator: "\n").count == 1, "one line on stderr: \(dropped.stderr)")
        let stored = try await Self.database(store).read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM reference_records") }
        #expect(stored == 0)

        setup.proxy.inject(.delay(.milliseconds(150)))
        let slow = try await OutpostProcess.run(["event", "open", "gala"] + store)
        #expect(slow.status == 0, "\(slow.stderr)")
        #expect(slow.stdout.contains("1200/1200"))
        try await setup.finish()
    }
}
