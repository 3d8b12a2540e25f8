import Foundation
import OutpostApps
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import Testing

@testable import OutpostServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// PostgreSQL under concurrency and faults: many writers and pullers, several server processes on one
/// database, and the database itself restarted while devices push.
@Suite("PostgreSQL reliability")
struct PostgresReliabilityTests {
    static let secret = "a-postgres-reliability-secret-of-32-bytes"

    @Test("8 writers and 4 pullers, 50,000 mutations: every puller ends with exactly the server's final state")
    func writersAndPullers() async throws {
        try await withStorage(.postgres) { storage in
            let writers = 8
            let batches = 125
            let batchSize = 50
            let recordsPerWriter = 1000
            // Every write of a record is later than the one before, so its final version is its write count.
            var expected: [String: Int64] = [:]
            for writer in 0..<writers {
                for n in 0..<(batches * batchSize) { expected["w\(writer)-r\(n % recordsPerWriter)", default: 0] += 1 }
            }
            let target = expected
            let states = try await withThrowingTaskGroup(of: [String: Int64]?.self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        for batch in 0..<batches {
                            let mutations = (0..<batchSize).map { i in
                                let n = batch * batchSize + i
                                return Fixtures.upsert(
                                    "w\(writer)-r\(n % recordsPerWriter)", ["v": .integer(Int64(n))], at: Double(n) / 1000,
                                    device: "dev-\(writer)", key: "w\(writer)-\(n)")
                            }
                            let results = try await storage.push(mutations, device: "dev-\(writer)")
                            #expect(results.allSatisfy { $0.status == .applied })
                        }
                        return nil
                    }
                }
                for _ in 0..<4 {
                    group.addTask {
                        var state: [String: Int64] = [:]
                        var cursor = PullCursor.start
                        let deadline = ContinuousClock.now.advanced(by: .seconds(600))
                        while state != target && ContinuousClock.now < deadline {
                            let page = try await storage.pull(
                                tenant: "acme", collection: "notes", scope: nil, after: cursor, limit: 500)
                            for record in page.changes {
                                #expect(record.version >= (state[record.recordId] ?? 0))
                                state[record.recordId] = record.version
                            }
                            #expect(page.cursor >= cursor)
                            cursor = page.cursor
                            if page.changes.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
                        }
                        return state
                    }
                }
                return try await group.reduce(into: [[String: Int64]]()) { if let state = $1 { $0.append(state) } }
            }
            let final = Dictionary(
                uniqueKeysWithValues: try await storage.pullAll(limit: 5000).records.map { ($0.recordId, $0.version) })
            #expect(final == expected)
            #expect(final.values.reduce(0, +) == 50_000)
            #expect(states.count == 4)
            for state in states { #expect(state == final) }
        }
    }

    /// A transport to a server on `port`, as `user`.
    static func transport(port: String, user: String, role: Role = .staff) async throws -> HTTPSyncTransport {
        let authority = try await TokenAuthority(secret: Array(secret.utf8))
        let token = try await authority.token(
            for: Identity(tenant: "acme", userId: user, role: role, name: user), lifetime: .seconds(3600), now: Date())
        return HTTPSyncTransport(
            baseURL: URL(string: "http://127.0.0.1:\(port)")!, token: token, timeout: .seconds(60))
    }

    static func batch(device: String, number: Int, size: Int = 50) -> PushRequest {
        let time = Timestamp(Date())
        return PushRequest(
            deviceId: device,
            mutations: (0..<size).map { i in
                Mutation(
                    idempotencyKey: "\(device):b\(number)-\(i)", collection: "notes", recordId: "\(device)-b\(number)-\(i)",
                    op: .upsert, fields: ["i": .integer(Int64(i))], clientTimestamp: time)
            })
    }

    /// Every record id in the tenant's notes, as a server sees them.
    static func pullAll(_ transport: HTTPSyncTransport) async throws -> [String] {
        var ids: [String] = []
        var cursor: String?
        while true {
            let page = try await transport.pull(collection: "notes", scope: nil, cursor: cursor, limit: 5000)
            ids += page.changes.map(\.recordId)
            cursor = page.cursor
            if !page.hasMore { return ids }
        }
    }

    @Test("two `outpost serve` processes on one database, devices split and moving between them: no duplicates, one monitor")
    func twoServers() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-two-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        func serve(_ name: String) async throws -> (RunningChild, String) {
            let server = try await OutpostProcess.start(
                ["serve", "--port", "0", "--data-dir", root.appendingPathComponent(name).path, "--database-url", database],
                environment: ["OUTPOST_JWT_SECRET": Self.secret])
            return (server, try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#))
        }
        let (serverA, portA) = try await serve("a")
        let (serverB, portB) = try await serve("b")

        // Six devices, three on each server; halfway each moves to the other server (as behind a load
        // balancer) and resends its last batch there, as a device does when it never saw the answer.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for device in 0..<6 {
                group.addTask {
                    let name = "phone-\(device)"
                    let first = device % 2 == 0 ? portA : portB
                    let second = device % 2 == 0 ? portB : portA
                    let here = try await Self.transport(port: first, user: "u\(device)")
                    let there = try await Self.transport(port: second, user: "u\(device)")
                    var last = Self.batch(device: name, number: 0)
                    for number in 0..<5 {
                        last = Self.batch(device: name, number: number)
                        #expect(try await here.push(last).results.allSatisfy { $0.status == .applied })
                    }
                    _ = try await here.heartbeat(
                        Heartbeat(deviceId: name, event: "gala", pendingCount: 250, failedCount: 0, lastRosterFetch: nil, appVersion: "test"))
                    let resent = try await there.push(last)
                    #expect(resent.results.allSatisfy { $0.status == .duplicate })
                    for number in 5..<10 {
                        #expect(try await there.push(Self.batch(device: name, number: number)).results.allSatisfy { $0.status == .applied })
                    }
                    _ = try await there.heartbeat(
                        Heartbeat(deviceId: name, event: "gala", pendingCount: 0, failedCount: 0, lastRosterFetch: nil, appVersion: "test"))
                }
            }
            try await group.waitForAll()
        }

        // Both servers hold every write exactly once. (A pull shows no change committed after the oldest
        // transaction still open anywhere in the cluster began, and other tests share this cluster: pull
        // again until all is visible, for at most a minute.)
        func settled(_ port: String) async throws -> [String] {
            let transport = try await Self.transport(port: port, user: "reader")
            let deadline = ContinuousClock.now.advanced(by: .seconds(60))
            var ids = try await Self.pullAll(transport)
            while ids.count < 3000 && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
                ids = try await Self.pullAll(transport)
            }
            return ids
        }
        let fromA = try await settled(portA)
        let fromB = try await settled(portB)
        #expect(fromA.count == 3000)
        #expect(Set(fromA).count == 3000)
        #expect(Set(fromA) == Set(fromB))

        // and show one and the same sync monitor: six devices, each with its last report, whichever server it used.
        func monitor(_ port: String) async throws -> MonitorResponse {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/monitor?event=gala")!)
            let authority = try await TokenAuthority(secret: Array(Self.secret.utf8))
            let token = try await authority.token(
                for: Identity(tenant: "acme", userId: "olga", role: .organizer, name: "Olga"), lifetime: .seconds(600), now: Date())
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            let (data, _) = try await URLSession.shared.data(for: request)
            return try JSONDecoder().decode(MonitorResponse.self, from: data)
        }
        let monitorA = try await monitor(portA)
        let monitorB = try await monitor(portB)
        #expect(monitorA.devices.count == 6)
        #expect(monitorA.devices.allSatisfy { $0.pendingCount == 0 })
        #expect(monitorA.devices.map(\.fingerprint).sorted() == monitorB.devices.map(\.fingerprint).sorted())
        #expect(monitorA.devices.map(\.pendingCount) == monitorB.devices.map(\.pendingCount))

        #expect(await serverA.stop() == 0)
        #expect(await serverB.stop() == 0)
        await TestPostgres.shared.dropDatabase(url: database)
    }

    @Test("PostgreSQL crashes and restarts while devices sync: the server reconnects, the devices retry, nothing is lost")
    func databaseRestartUnderLoad() async throws {
        let cluster = try await PostgresCluster.create()
        defer { cluster.remove() }
        try await cluster.start()
        let database = try await cluster.createDatabase("outpost")
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-pgrestart-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let server = try await OutpostProcess.start(
            ["serve", "--port", "0", "--data-dir", root.appendingPathComponent("server").path, "--database-url", database],
            environment: ["OUTPOST_JWT_SECRET": Self.secret])
        let port = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)

        // Four devices, each with 1,000 writes queued offline, sync through the SDK's engine.
        let devices = 4
        let perDevice = 1000
        var engines: [SyncEngine] = []
        for device in 0..<devices {
            let url = root.appendingPathComponent("device-\(device)/device.sqlite")
            let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            for i in 0..<perDevice {
                try await store.write(
                    LocalStore.Write(collection: "notes", recordId: "d\(device)-\(i)", fields: ["i": .integer(Int64(i))]),
                    deviceId: "phone-\(device)", at: Date(), offline: true)
            }
            engines.append(
                SyncEngine(
                    store: store, transport: try await Self.transport(port: port, user: "u\(device)"),
                    configuration: SyncConfiguration(
                        deviceId: "phone-\(device)", chunkSize: 25,
                        retryDelays: [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2)])))
        }
        let syncs = engines.map { engine in
            Task { () -> Int in
                // A device syncs until nothing is queued: after failed retries it tries again, as the next
                // trigger (a timer, the network returning) would.
                var rounds = 0
                let deadline = ContinuousClock.now.advanced(by: .seconds(180))
                while ContinuousClock.now < deadline {
                    rounds += 1
                    // The health probe a device runs on a timer finds the server again after a failure.
                    if await engine.probe() { _ = try? await engine.sync() }
                    let counts = try await engine.store.counts()
                    if counts.pending == 0 && counts.failed == 0 { break }
                    if counts.failed > 0 { _ = try? await engine.retryAll() }
                    try await Task.sleep(for: .milliseconds(200))
                }
                return rounds
            }
        }

        // When a quarter of the writes have arrived, the database crashes (no shutdown checkpoint) and
        // comes back two seconds later.
        let observer = try await Self.transport(port: port, user: "observer")
        while try await observer.pull(collection: "notes", scope: nil, cursor: nil, limit: 5000).changes.count < devices * perDevice / 4 {
            try await Task.sleep(for: .milliseconds(20))
        }
        try await Thread.blocking { cluster.stop(immediate: true) }
        // While it is down the server answers, with a retryable error.
        let down = await #expect(throws: (any Error).self) {
            try await observer.pull(collection: "notes", scope: nil, cursor: nil, limit: 1)
        }
        #expect(
            down.map { "\($0)" }?.contains("503") == true || down.map { "\($0)" }?.contains("unavailable") == true,
            "\(String(describing: down))")
        try await Task.sleep(for: .seconds(2))
        try await cluster.start()
        #expect(server.isRunning, "the server exited with the database: \(server.stderr.suffix(3000))")

        var rounds: [Int] = []
        for sync in syncs { rounds.append(try await sync.value) }
        #expect(rounds.allSatisfy { $0 >= 1 })
        // Every device is drained, and the server, never restarted, holds every write exactly once.
        for engine in engines {
            let counts = try await engine.store.counts()
            #expect(counts.pending == 0 && counts.failed == 0)
        }
        #expect(server.isRunning)
        // A pull shows no change committed after the oldest transaction still open began (the server's own
        // background work included): pull again until all is visible, for at most a minute.
        let expected = Set((0..<devices).flatMap { d in (0..<perDevice).map { "d\(d)-\($0)" } })
        var ids = try await Self.pullAll(observer)
        let deadline = ContinuousClock.now.advanced(by: .seconds(60))
        while Set(ids) != expected && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
            ids = try await Self.pullAll(observer)
        }
        #expect(ids.count == devices * perDevice)
        let missing = expected.subtracting(ids).sorted()
        if !missing.isEmpty {
            // What the database and the devices hold of each missing write, to tell a lost write from one a
            // pull does not show.
            let list = missing.prefix(200).map { "'\($0)'" }.joined(separator: ",")
            let stored = try await cluster.rows(
                "SELECT record_id, change_xid, change_seq FROM records WHERE record_id IN (\(list)) ORDER BY 1",
                database: "outpost")
            let claimed = try await cluster.rows(
                "SELECT record_id, idempotency_key, status FROM mutations WHERE record_id IN (\(list)) ORDER BY 1",
                database: "outpost")
            let horizon = try await cluster.rows(
                "SELECT pg_current_snapshot(); SELECT pid, state, backend_xid, backend_xmin, left(query, 80) FROM pg_stat_activity WHERE backend_xid IS NOT NULL OR backend_xmin IS NOT NULL",
                database: "outpost")
            var onDevices: [String] = []
            for (d, engine) in engines.enumerated() {
                for id in missing where id.hasPrefix("d\(d)-") {
                    let record = try await engine.store.record(collection: "notes", recordId: id)
                    onDevices.append("\(id): \(record.map { "\($0.syncStatus) v\($0.version ?? -1)" } ?? "absent")")
                }
            }
            Issue.record(
                """
                \(missing.count) writes missing: \(missing.prefix(50))
                in records: \(stored)
                in mutations: \(claimed)
                snapshot and open transactions: \(horizon)
                on the devices: \(onDevices.prefix(50))
                server log: \(server.stderr.suffix(4000))
                """)
        }
        #expect(await server.stop() == 0)
    }
}
