import Foundation
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostRecords
import Testing

@testable import OutpostServer

/// The `outpost` command, run as a real process.
@Suite("outpost CLI")
struct CLITests {
    @Test("--help lists every command")
    func help() async throws {
        let output = try await OutpostProcess.run(["--help"])
        #expect(output.status == 0)
        #expect(output.stdout.contains("serve"))
        #expect(output.stdout.contains("token"))
    }

    static let badInvocations: [[String]] = [
        ["frobnicate"],
        ["serve", "--port", "70000"],
        ["serve", "--max-batch-size", "0"],
        ["serve", "--max-concurrent-requests", "0"],
        ["serve", "--max-waiting-requests", "-1"],
        ["serve", "--body-timeout", "0"],
        ["serve", "--upload-lifetime", "10m"],
        ["serve", "--tenant-file-gigabytes", "0"],
        ["serve", "--port", "0", "--file-directory", "/proc/outpost-files"],
        ["serve", "--database-url", "mysql://localhost/db"],
        ["serve", "--database-url", "postgres://localhost"],
        ["serve", "--port", "0", "--collections", "/nonexistent/collections.yaml"],
        ["token", "--tenant", "acme", "--user", "ana", "--role", "staff", "--device", "a b"],
        ["token", "--tenant", "acme", "--user", "ana", "--role", "king"],
        ["token", "--tenant", "../etc", "--user", "ana", "--role", "staff"],
        ["token", "--tenant", "acme", "--user", "ana", "--role", "staff", "--ttl", "forever"],
        ["token", "--user", "ana", "--role", "staff"],
        ["token", "--tenant", "acme", "--user", "hall-a", "--role", "relay"],
        ["token", "--tenant", "acme", "--user", "hall-a", "--role", "relay", "--scope", "no way"],
        ["token", "--tenant", "acme", "--user", "hall-a", "--role", "relay", "--scope", "gala", "--device", "d1"],
        ["token", "--tenant", "acme", "--user", "ana", "--role", "staff", "--scope", "gala"],
        ["serve", "--port", "0", "--upstream-token", "x"],
        ["serve", "--port", "0", "--upstream", "http://127.0.0.1:9"],
        ["serve", "--port", "0", "--upstream", "http://127.0.0.1:9", "--upstream-token", "not-a-jwt"],
        ["serve", "--port", "0", "--upstream", "ftp://example.org", "--upstream-token", CLITests.relayToken],
        ["serve", "--port", "0", "--upstream", "http://127.0.0.1:9", "--upstream-token", CLITests.staffToken],
        ["serve", "--port", "0", "--upstream", "http://127.0.0.1:9", "--upstream-token", CLITests.relayToken, "--upstream-scope", "other"],
        [
            "serve", "--port", "0", "--upstream", "http://127.0.0.1:9", "--upstream-token", CLITests.relayToken, "--database-url",
            "postgres://u@127.0.0.1:9/db",
        ],
    ]

    /// Tokens for the relay's options, unsigned: the relay reads their claims, and its server verifies them.
    static let relayToken = unsignedToken(#"{"tenant":"acme","sub":"hall-a","role":"relay","scopes":["gala"],"exp":4102444800}"#)
    static let staffToken = unsignedToken(#"{"tenant":"acme","sub":"ana","role":"staff","exp":4102444800}"#)
    static func unsignedToken(_ claims: String) -> String {
        func part(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        return part(#"{"alg":"HS256","typ":"JWT"}"#) + "." + part(claims) + ".c2lnbmF0dXJl"
    }

    @Test("a bad argument or configuration is one line on stderr and a non-zero exit", arguments: badInvocations)
    func badArguments(arguments: [String]) async throws {
        let output = try await OutpostProcess.run(arguments)
        #expect(output.status != 0)
        let lines = output.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(output.stderr)")
        #expect(lines.first?.hasPrefix("outpost: ") == true)
        #expect(output.stdout.isEmpty)
    }

    @Test("an unreachable PostgreSQL is one clear line at start, without the password")
    func unreachableDatabase() async throws {
        let port = try TestPostgres.freePort()
        let output = try await OutpostProcess.run(
            ["serve", "--port", "0", "--database-url", "postgres://outpost:hunter2@127.0.0.1:\(port)/outpost?sslmode=disable"])
        #expect(output.status != 0)
        let lines = output.stderr.split(separator: "\n")
        #expect(lines.last == "outpost: cannot reach PostgreSQL at 127.0.0.1:\(port)/outpost as outpost within 15 s")
        #expect(!output.stderr.contains("hunter2"))
        #expect(!output.stdout.contains("hunter2"))
    }

    @Test("a short OUTPOST_JWT_SECRET is refused in one line")
    func shortSecret() async throws {
        let output = try await OutpostProcess.run(
            ["token", "--tenant", "acme", "--user", "ana", "--role", "staff"],
            environment: ["OUTPOST_JWT_SECRET": "too-short"])
        #expect(output.status != 0)
        #expect(output.stderr.split(separator: "\n").count == 1)
        #expect(output.stderr.contains("32 bytes"))
        #expect(!output.stderr.contains("too-short"))
    }

    @Test("serve creates its data folder, serves, accepts a token from `outpost token`, and stops on SIGTERM")
    func serveLifecycle() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-cli-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let dataDirectory = directory.appendingPathComponent("outpost-data").path
        let server = try await OutpostProcess.start(["serve", "--port", "0", "--data-dir", dataDirectory])
        let port = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        #expect(server.stdout.contains("SQLite at"))
        // The generated secret is kept beside the store, readable by its owner only.
        let attributes = try FileManager.default.attributesOfItem(atPath: dataDirectory + "/jwt-secret")
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)

        let token = try await OutpostProcess.run(
            ["token", "--tenant", "acme", "--user", "ana", "--role", "staff", "--name", "Ana", "--data-dir", dataDirectory])
        #expect(token.status == 0)
        let transport = HTTPSyncTransport(
            baseURL: URL(string: "http://127.0.0.1:\(port)")!,
            token: token.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let result = try await transport.push(
            PushRequest(deviceId: "dev-a", mutations: [Fixtures.upsert("r1", ["n": 1], at: 0)]))
        #expect(result.results.first?.status == .applied)

        #expect(await server.stop(SIGTERM) == 0)
        #expect(server.stdout.contains("outpost: stopped"))
        // Nothing of the token reached the log.
        #expect(!server.stderr.contains(token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    @Test("SIGINT stops the server cleanly too")
    func sigint() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-cli-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await OutpostProcess.start(["serve", "--port", "0", "--data-dir", directory.path])
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        #expect(await server.stop(SIGINT) == 0)
    }

    @Test("two servers on one PostgreSQL behave as one: shared secret, one idempotency space, one set of access rules")
    func twoServersOnePostgres() async throws {
        try await withPostgresDatabase { url in
            let first = try await OutpostProcess.start(["serve", "--port", "0"], environment: ["OUTPOST_DATABASE_URL": url])
            let second = try await OutpostProcess.start(["serve", "--port", "0", "--database-url", url])
            let portA = try await first.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
            let portB = try await second.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
            #expect(first.stdout.contains("PostgreSQL at"))
            // The password of the URL, if any, never reaches the output.
            let token = try await OutpostProcess.run(
                ["token", "--tenant", "acme", "--user", "ana", "--role", "staff", "--database-url", url])
            #expect(token.status == 0, "\(token.stderr)")
            let bearer = token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let a = HTTPSyncTransport(baseURL: URL(string: "http://127.0.0.1:\(portA)")!, token: bearer)
            let b = HTTPSyncTransport(baseURL: URL(string: "http://127.0.0.1:\(portB)")!, token: bearer)
            let mutation = Fixtures.upsert("r1", ["n": 1], at: 0)
            #expect(try await a.push(PushRequest(deviceId: "d", mutations: [mutation])).results[0].status == .applied)
            #expect(try await b.push(PushRequest(deviceId: "d", mutations: [mutation])).results[0].status == .duplicate)
            // Pulls wait behind transactions still running anywhere in the cluster: poll until the change shows.
            var pulled = 0
            let deadline = ContinuousClock.now.advanced(by: .seconds(30))
            while pulled == 0 && ContinuousClock.now < deadline {
                pulled = try await b.pull(collection: "notes", scope: nil, cursor: nil, limit: nil).changes.count
                if pulled == 0 { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(pulled == 1)

            // Several users and two events through both servers: each reads only what it may.
            func transport(_ user: String, _ role: String, port: String) async throws -> HTTPSyncTransport {
                let token = try await OutpostProcess.run(
                    ["token", "--tenant", "acme", "--user", user, "--role", role, "--database-url", url])
                let bearer = token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                return HTTPSyncTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!, token: bearer)
            }
            let olga = try await transport("olga", "organizer", port: portA)
            let ben = try await transport("ben", "staff", port: portB)
            let sue = try await transport("sue", "supervisor", port: portB)
            let roster = ["gala", "expo"].map { AccessRulesTests.guest("g1", event: $0) }
            #expect(try await olga.push(PushRequest(deviceId: "admin", mutations: roster)).results.map(\.status) == [.applied, .applied])
            let build = Fixtures.upsert("b1", ["name": "Block C"], at: 1, collection: Build.collection, device: "d")
            #expect(try await a.push(PushRequest(deviceId: "d", mutations: [build])).results[0].status == .applied)
            let scans = [
                RecordRulesTests.scan("g1", event: "gala", device: "door-ben", at: 2),
                RecordRulesTests.scan("g1", event: "expo", device: "door-ben", at: 3),
            ]
            #expect(try await ben.push(PushRequest(deviceId: "door-ben", mutations: scans)).results.map(\.status) == [.applied, .applied])
            var builds: (ben: Int, sue: Int) = (1, 0)
            var checkIns = 0
            let settled = ContinuousClock.now.advanced(by: .seconds(30))
            while (builds.sue == 0 || checkIns < 2) && ContinuousClock.now < settled {
                builds = (
                    try await ben.pull(collection: "builds", scope: nil, cursor: nil, limit: nil).changes.count,
                    try await sue.pull(collection: "builds", scope: nil, cursor: nil, limit: nil).changes.count
                )
                checkIns = 0
                for event in ["gala", "expo"] {
                    let changes = try await ben.pull(collection: "checkins", scope: event, cursor: nil, limit: nil).changes
                    checkIns += changes.filter { $0.scope == event }.count
                }
                if builds.sue == 0 || checkIns < 2 { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(builds.ben == 0 && builds.sue == 1 && checkIns == 2)
            // Ben cannot speak for Ana's device on either server.
            await #expect(throws: TransportError.self) {
                try await ben.push(PushRequest(deviceId: "d", mutations: [Fixtures.upsert("n9", ["n": 9], at: 3)]))
            }
            #expect(await first.stop() == 0)
            #expect(await second.stop() == 0)
        }
    }
}

@Suite("Benchmark harness")
struct BenchHarnessTests {
    @Test("`bench failures --json` runs against a real server process and prints name, figure, unit, target and met")
    func json() async throws {
        let run = try await OutpostProcess.run(["bench", "failures", "--json"])
        // A debug build may miss a target (exit 1); the document is printed either way.
        #expect([0, 1].contains(run.status), "\(run.stderr)")
        let start = try #require(run.stdout.firstIndex(of: "["))
        let results = try JSONSerialization.jsonObject(with: Data(run.stdout[start...].utf8)) as? [[String: Any]]
        let result = try #require(results?.first)
        #expect(Set(result.keys) == ["name", "figure", "unit", "target", "met"])
        #expect((result["name"] as? String)?.contains("persistent-failure report") == true)
        #expect(result["unit"] as? String == "ms")
    }

    @Test("`bench local-write roster`, small: both device scenarios complete on the store's current schema")
    func deviceScenarios() async throws {
        let run = try await OutpostProcess.run(
            ["bench", "local-write", "roster", "--records", "500", "--guests", "5500", "--samples", "20", "--json"])
        #expect([0, 1].contains(run.status), "\(run.stderr)")
        let start = try #require(run.stdout.firstIndex(of: "["), "\(run.stdout) \(run.stderr)")
        let results = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout[start...].utf8)) as? [[String: Any]])
        let names = results.compactMap { $0["name"] as? String }
        for expected in ["local-write p50", "bare SQLite commit", "roster download", "search p50", "delta refresh"] {
            #expect(names.contains { $0.hasPrefix(expected) }, "\(expected) missing: \(names)")
        }
        #expect(results.allSatisfy { ($0["figure"] as? Double ?? 0) > 0 }, "\(results)")
    }

    @Test("`bench silent-save` times real save commands against a server that never answers, to their first line")
    func silentSave() async throws {
        let run = try await OutpostProcess.run(["bench", "silent-save", "--samples", "10", "--json"])
        #expect([0, 1].contains(run.status), "\(run.stderr)")
        let start = try #require(run.stdout.firstIndex(of: "["), "\(run.stdout) \(run.stderr)")
        let results = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout[start...].utf8)) as? [[String: Any]])
        #expect(results.compactMap { $0["name"] as? String }.allSatisfy { $0.hasPrefix("silent-save: command start to durable write") })
        #expect(results.count == 2 && results.allSatisfy { ($0["figure"] as? Double ?? 0) > 0 }, "\(results)")
    }

    @Test("`bench live-query` keeps a list of 2,000 check-ins open while the store commits, and reports what each commit costs it")
    func liveQuery() async throws {
        let run = try await OutpostProcess.run(["bench", "live-query", "--samples", "10", "--json"])
        #expect([0, 1].contains(run.status), "\(run.stderr)")
        let start = try #require(run.stdout.firstIndex(of: "["), "\(run.stdout) \(run.stderr)")
        let results = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout[start...].utf8)) as? [[String: Any]])
        #expect(results.map { $0["unit"] as? String } == ["×", "ms", "ms", "ms"], "\(results)")
        // The list's new value after each scan was seen: its latency is a time, not a zero for a value never seen.
        #expect((results.last?["figure"] as? Double ?? 0) > 0, "\(results)")
    }

    @Test("`bench export` stores a collection, exports it whole once and twice at once, and reports the server's memory")
    func export() async throws {
        let run = try await OutpostProcess.run(["bench", "export", "--megabytes", "5", "--json"])
        #expect([0, 1].contains(run.status), "\(run.stderr)")
        let start = try #require(run.stdout.firstIndex(of: "["), "\(run.stdout) \(run.stderr)")
        let results = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout[start...].utf8)) as? [[String: Any]])
        // Each export held every record (the scenario fails with a reason otherwise).
        #expect(results.map { $0["unit"] as? String } == ["MB RSS", "s", "MB RSS"], "\(results)")
        #expect(results.allSatisfy { ($0["name"] as? String)?.contains("5 MB") == true })
    }

    @Test("`bench connector` delivers its backlog and its live pushes to its receiver, and reports rate and delays")
    func connector() async throws {
        let run = try await OutpostProcess.run(["bench", "connector", "--json"])
        #expect([0, 1].contains(run.status), "\(run.stderr)")
        let start = try #require(run.stdout.firstIndex(of: "["), "\(run.stdout) \(run.stderr)")
        let results = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout[start...].utf8)) as? [[String: Any]])
        // Every change arrived (the scenario fails with a reason otherwise); its three figures are there.
        #expect(results.count == 3, "\(results)")
        #expect(results.allSatisfy { ($0["name"] as? String)?.hasPrefix("connector:") == true && ($0["figure"] as? Double ?? 0) > 0 })
        #expect(results.map { $0["unit"] as? String } == ["changes/s", "ms", "ms"])
    }

    @Test("`bench attachments` uploads through the outbox beside a plain upload, and samples a device process's memory")
    func attachments() async throws {
        let run = try await OutpostProcess.run(["bench", "attachments", "--file-megabytes", "10", "--json"])
        #expect([0, 1].contains(run.status), "\(run.stderr)")
        let start = try #require(run.stdout.firstIndex(of: "["), "\(run.stdout) \(run.stderr)")
        let results = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout[start...].utf8)) as? [[String: Any]])
        // Every upload synced its record (the scenario fails with a reason otherwise); both figures are there.
        #expect(results.map { $0["unit"] as? String } == ["× plain", "of the extra bytes"], "\(results)")
        #expect((results.first?["figure"] as? Double ?? 0) > 0, "\(results)")
        #expect(results.allSatisfy { $0["figure"] is Double }, "\(results)")
    }
}

@Suite("Load harness")
struct LoadHarnessTests {
    @Test("`bench load`, 200 devices for 10 s against a real server process: no failed request, every write once")
    func smallLoad() async throws {
        let run = try await OutpostProcess.run(
            ["bench", "load", "--devices", "200", "--seconds", "10", "--interval", "1", "--json"])
        let start = try #require(run.stdout.firstIndex(of: "["), "\(run.stdout) \(run.stderr)")
        let results = try #require(
            try JSONSerialization.jsonObject(with: Data(run.stdout[start...].utf8)) as? [[String: Any]])
        let byName = { (part: String) in results.first { ($0["name"] as? String)?.contains(part) == true } }
        let failed = try #require(byName("failed requests"))
        #expect(failed["figure"] as? Double == 0, "\(failed)")
        #expect(failed["met"] as? Bool == true)
        let once = try #require(byName("writes on the server once"))
        #expect(once["met"] as? Bool == true, "\(once)")
        #expect((once["figure"] as? Double ?? 0) > 0)
        #expect(byName("latency p99") != nil)
        #expect(byName("server memory") != nil)
    }
}
