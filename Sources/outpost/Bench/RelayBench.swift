import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostServer

extension SyncBench {
    /// A venue relay holds `scans` check-ins made while the line was down; the server comes back, and the relay
    /// forwards them all. Beside it, the same number of scans pushed straight to the server, in the same chunks.
    func relay(scans: Int = 10_000, doors: Int = 5) async throws -> [BenchResult] {
        let secret = Array(TokenAuthority.generateSecret().map { String(format: "%02x", $0) }.joined().utf8)
        let authority = try await TokenAuthority(secret: secret)
        let tenant = "bench-\(UUID().uuidString.prefix(8).lowercased())"
        func token(_ user: String, _ role: Role) async throws -> String {
            try await authority.token(
                for: Identity(tenant: tenant, userId: user, role: role, name: user), lifetime: .seconds(3600), now: Date())
        }
        let upstreamDirectory = directory.appendingPathComponent("upstream-\(UUID().uuidString.prefix(6))")
        var upstream = try BenchServer(directory: upstreamDirectory, secret: secret, databaseURL: databaseURL)
        defer { upstream.stop() }
        let base = try await upstream.waitUntilListening()
        let relayToken = try await authority.token(
            for: .relay(tenant: tenant, relayId: "hall", name: "Hall relay", scopes: ["venue"]), lifetime: .seconds(3600),
            now: Date())
        return try await withDeviceHTTPClient { client in
            let organizer = HTTPSyncTransport(baseURL: base, token: try await token("olga", .organizer), client: client, timeout: .seconds(60))
            let guests = (0..<scans).map { String(format: "g%06d", $0) }
            progress("relay (\(engine)): importing two rosters of \(scans) guests…")
            for event in ["venue", "direct"] {
                for start in stride(from: 0, to: scans, by: 500) {
                    let roster = guests[start..<min(start + 500, scans)].map { guest in
                        Mutation(
                            idempotencyKey: "import:\(event):\(guest)", collection: "guests", recordId: guest, scope: event, op: .upsert,
                            fields: ["event_id": .string(event), "name": .string("Guest \(guest)"), "status": "registered"],
                            clientTimestamp: Timestamp(Date()))
                    }
                    _ = try await organizer.push(PushRequest(deviceId: "admin", mutations: roster))
                }
            }
            let relay = try BenchServer(
                directory: directory.appendingPathComponent("relay-\(UUID().uuidString.prefix(6))"), secret: secret,
                arguments: ["--upstream", base.absoluteString, "--upstream-token", relayToken])
            defer { relay.stop() }
            let relayBase = try await relay.waitUntilListening()
            let monitor = try await token("olga", .organizer)
            progress("relay (\(engine)): the relay brings the roster down…")
            let relayReader = HTTPSyncTransport(baseURL: relayBase, token: monitor, client: client, timeout: .seconds(60))
            try await Self.waitUntil("the roster at the relay") {
                try await relayReader.snapshot(collection: "guests", scope: "venue", continuation: nil, limit: 1).total == scans
            }

            // The line goes down: the server stops, and the doors scan every guest at the relay.
            upstream.stop()
            progress("relay (\(engine)): \(doors) doors scan \(scans) guests while the line is down…")
            var doorTransports: [HTTPSyncTransport] = []
            for door in 0..<doors {
                doorTransports.append(
                    HTTPSyncTransport(baseURL: relayBase, token: try await token("door\(door)", .staff), client: client, timeout: .seconds(60)))
            }
            let scansOf = { (event: String, guest: String, index: Int) -> Mutation in
                let door = "door-\(index / 500 % doors)"
                let time = Timestamp(Date())
                return Mutation(
                    idempotencyKey: "\(door):\(event):\(guest)", collection: "checkins", recordId: guest, scope: event, op: .upsert,
                    fields: [
                        "event_id": .string(event), "guest_id": .string(guest), "scanned_by": .string(door), "scanned_at": .string(time.iso8601),
                    ], clientTimestamp: time)
            }
            for start in stride(from: 0, to: scans, by: 500) {
                let chunk = guests[start..<min(start + 500, scans)].enumerated().map { scansOf("venue", $1, start + $0) }
                let door = start / 500 % doors
                let held = try await doorTransports[door].push(PushRequest(deviceId: "door-\(door)", mutations: chunk)).results
                guard held.allSatisfy({ $0.error?.code == .heldAtRelay }) else {
                    throw CLIError("the relay did not hold every scan: \(held.first { $0.error?.code != .heldAtRelay }.map { "\($0)" } ?? "")")
                }
            }

            // The line returns: the server starts again on its port, and the relay's backlog empties.
            let clock = ContinuousClock()
            upstream = try BenchServer(directory: upstreamDirectory, secret: secret, databaseURL: databaseURL, port: base.port ?? 0)
            _ = try await upstream.waitUntilListening()
            let restored = clock.now
            var firstForward: ContinuousClock.Instant?
            try await Self.waitUntil("an empty backlog") {
                let waiting = try await Self.relayLine(relayBase, token: monitor, client: client)?.waiting ?? scans
                if waiting < scans, firstForward == nil { firstForward = clock.now }
                return waiting == 0
            }
            let emptied = clock.now
            let forwarding = emptied - (firstForward ?? restored)
            let checkIns = try await Self.count(
                HTTPSyncTransport(baseURL: base, token: monitor, client: client, timeout: .seconds(60)), scope: "venue")
            guard checkIns == scans else { throw CLIError("the server holds \(checkIns) of \(scans) forwarded scans") }

            // Beside it: the same scans pushed straight to the server, in the same chunks.
            progress("relay (\(engine)): the same scans pushed straight to the server…")
            let direct = try await clock.measure {
                for start in stride(from: 0, to: scans, by: 500) {
                    let chunk = guests[start..<min(start + 500, scans)].enumerated().map { scansOf("direct", $1, start + $0) }
                    let door = start / 500 % doors
                    let transport = HTTPSyncTransport(
                        baseURL: base, token: try await token("door\(door)", .staff), client: client, timeout: .seconds(60))
                    _ = try await transport.push(PushRequest(deviceId: "door-\(door)", mutations: chunk))
                }
            }
            let ratio = forwarding.seconds / max(direct.seconds, 0.001)
            return [
                BenchResult(
                    name: "relay forwards \(scans) scans after the line returns (\(engine) upstream)",
                    figure: Double(scans) / max(forwarding.seconds, 0.001), unit: "changes/s", target: "reported", met: true),
                BenchResult(
                    name: "relay: line restored to an empty backlog, \(scans) scans (\(engine) upstream)",
                    figure: (emptied - restored).seconds, unit: "s", target: "≤ 10 s", met: (emptied - restored).seconds <= 10),
                BenchResult(
                    name: "relay: forwarding time over the same scans pushed straight to the server (\(engine))", figure: ratio,
                    unit: "×", target: "≤ 2×", met: ratio <= 2),
            ]
        }
    }

    /// The relay line of a relay's monitor.
    static func relayLine(_ base: URL, token: String, client: HTTPClient) async throws -> RelayLine? {
        var request = HTTPClientRequest(url: base.absoluteString + "/v1/monitor?event=venue")
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        let response = try await client.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 16 * 1024 * 1024)
        guard response.status == .ok else { throw CLIError("the relay's monitor answered \(response.status.code)") }
        return try JSONDecoder().decode(MonitorResponse.self, from: Data(buffer: body)).relay
    }

    /// The check-ins of `scope` the server holds.
    static func count(_ transport: HTTPSyncTransport, scope: String) async throws -> Int {
        var count = 0
        var cursor: String?
        while true {
            let page = try await transport.pull(collection: "checkins", scope: scope, cursor: cursor, limit: 5000)
            count += page.changes.count
            cursor = page.cursor
            if !page.hasMore { return count }
        }
    }

    /// Polls `condition` every 10 ms, for at most two minutes.
    static func waitUntil(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while try await !condition() {
            guard ContinuousClock.now < deadline else { throw CLIError("relay: still waiting for \(what) after 120 s") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}
