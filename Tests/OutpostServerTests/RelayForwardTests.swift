import Foundation
import HummingbirdTesting
import NIOCore
import OutpostProtocol
import OutpostRecords
import Testing

@testable import OutpostServer

/// What a venue relay's token may do upstream, on both engines: forward the writes of its events in their
/// authors' names, exactly once, and read its events' records; nothing else.
@Suite("Relay forwarding")
struct RelayForwardTests {
    static func relayToken(tenant: String = "acme", scopes: [String] = ["gala"]) async throws -> String {
        let authority = try await TokenAuthority(secret: Fixtures.secret)
        return try await authority.token(
            for: .relay(tenant: tenant, relayId: "hall-a", name: "Hall A relay", scopes: scopes),
            lifetime: .seconds(3600), now: Fixtures.serverNow.date)
    }

    static func batch(
        device: String, user: String = "ana", role: Role = .staff, _ mutations: [Mutation]
    ) -> RelayBatch {
        RelayBatch(deviceId: device, userId: user, userName: user.capitalized, role: role, mutations: mutations)
    }

    static func forward(
        _ client: any TestClientProtocol, _ batches: [RelayBatch], token: String
    ) async throws -> [[MutationResult]] {
        let response = try await client.post("/v1/relay/forward", RelayForwardRequest(batches: batches), token: token)
        #expect(response.status == .ok)
        return try JSONDecoder().decode(RelayForwardResponse.self, from: response.body).batches.map(\.results)
    }

    static func importGuests(_ ids: [String], event: String = "gala", client: any TestClientProtocol) async throws {
        let organizer = try await Fixtures.token(user: "olga", role: .organizer)
        for start in stride(from: 0, to: ids.count, by: 40) {
            let results = try await client.push(
                ids[start..<min(start + 40, ids.count)].map { AccessRulesTests.guest($0, event: event) }, token: organizer,
                device: "admin"
            ).results
            #expect(results.allSatisfy { $0.status == .applied })
        }
    }

    @Test("forwarded scans are applied once each, in their devices' and people's names", arguments: StorageKind.allCases)
    func forwardsOnce(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            try await Self.importGuests(["g1", "g2", "g3"], client: client)
            let relay = try await Self.relayToken()
            let door1 = [RecordRulesTests.scan("g1", device: "door-1", at: 10), RecordRulesTests.scan("g2", device: "door-1", at: 11)]
            let door2 = [RecordRulesTests.scan("g1", device: "door-2", at: 12), RecordRulesTests.scan("g3", device: "door-2", at: 13)]
            let batches = [
                Self.batch(device: "door-1", user: "ana", door1), Self.batch(device: "door-2", user: "ben", door2),
            ]
            let first = try await Self.forward(client, batches, token: relay)
            #expect(first.map { $0.map(\.status) } == [[.applied, .applied], [.superseded, .applied]])

            // Sent again (an answer lost on the line), nothing is applied twice,
            let again = try await Self.forward(client, batches, token: relay)
            #expect(again.flatMap { $0 }.allSatisfy { $0.status == .duplicate })
            #expect(again.flatMap { $0 }.map(\.originalStatus) == [.applied, .applied, .superseded, .applied])
            // nor when the device itself sends a key the relay forwarded.
            let ben = try await Fixtures.token(user: "ben")
            let direct = try await client.push([door2[1]], token: ben, device: "door-2").results
            #expect(direct.map(\.status) == [.duplicate])

            // The audit holds each scan once, with the device, the person and the time of the scan.
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            try await storage.settle()
            let audit = try await client.send(.get, "/v1/audit?collection=checkins&recordId=g1&scope=gala", token: organizer)
            let entries = try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries
            #expect(entries.map(\.deviceId) == ["door-1", "door-2"])
            #expect(entries.map(\.userId) == ["ana", "ben"])
            #expect(entries.map(\.userName) == ["Ana", "Ben"])
            #expect(entries.map(\.clientTimestamp) == [Fixtures.time(10), Fixtures.time(12)])
        }
    }

    @Test("a relay reads its own events' records, as a supervisor would, and nothing else", arguments: StorageKind.allCases)
    func relayReads(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            try await Self.importGuests(["g1", "g2"], client: client)
            try await Self.importGuests(["h1"], event: "other", client: client)
            let staff = try await Fixtures.token()
            _ = try await client.push([RecordRulesTests.scan("g1", at: 10)], token: staff)
            try await storage.settle()
            let relay = try await Self.relayToken()

            let guests = try await client.pull("collection=guests&scope=gala", token: relay).changes
            #expect(guests.map(\.recordId).sorted() == ["g1", "g2"])
            let checkIns = try await client.pull("collection=checkins&scope=gala", token: relay).changes
            #expect(checkIns.map(\.recordId) == ["g1"])
            let snapshot = try await client.send(.get, "/v1/snapshot?collection=guests&scope=gala", token: relay)
            #expect(snapshot.status == .ok)

            for uri in [
                "/v1/pull?collection=guests&scope=other", "/v1/pull?collection=guests",
                "/v1/snapshot?collection=guests&scope=other", "/v1/pull?collection=notes&scope=gala",
                "/v1/monitor?event=gala", "/v1/audit?collection=checkins&recordId=g1", "/v1/record-id-key",
                "/v1/conflicts",
            ] {
                let refused = try await client.send(.get, uri, token: relay)
                #expect(refused.status == .forbidden, "\(uri)")
                #expect(refused.wireError?.code == .forbidden, "\(uri)")
            }
            let push = try await client.send(
                .post, "/v1/push", token: relay,
                body: try Fixtures.json(PushRequest(deviceId: "hall-a", mutations: [RecordRulesTests.scan("g2", at: 11)])))
            #expect(push.status == .forbidden)
        }
    }

    @Test("a relay forwards nothing outside its events, for no admin, and for no device as another person", arguments: StorageKind.allCases)
    func forwardRefusals(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            try await Self.importGuests(["g1", "g2"], client: client)
            try await Self.importGuests(["h1"], event: "other", client: client)
            let relay = try await Self.relayToken()
            // door-9 is ben's device: the relay cannot push through it as ana.
            let ben = try await Fixtures.token(user: "ben")
            _ = try await client.push([RecordRulesTests.scan("g2", device: "door-9", at: 5)], token: ben, device: "door-9")

            let note = Fixtures.upsert("n1", ["text": "hello"], at: 9, device: "door-1")
            let results = try await Self.forward(
                client,
                [
                    Self.batch(
                        device: "door-1",
                        [
                            RecordRulesTests.scan("h1", event: "other", device: "door-1", at: 10), note,
                            RecordRulesTests.scan("g1", device: "door-1", at: 11),
                        ]),
                    Self.batch(device: "door-2", role: .admin, [RecordRulesTests.scan("g1", device: "door-2", at: 12)]),
                    Self.batch(device: "door-9", [RecordRulesTests.scan("g1", device: "door-9", at: 13)]),
                    Self.batch(
                        device: "door-3", user: "olga", role: .organizer,
                        [AccessRulesTests.guest("walk-in", event: "other")]),
                ], token: relay)
            #expect(results[0].map(\.status) == [.rejected, .rejected, .applied])
            #expect(results[0].prefix(2).map(\.error?.code) == [.forbidden, .forbidden])
            #expect(results[1].map(\.error?.code) == [.forbidden])
            #expect(results[2].map(\.error?.code) == [.deviceOwned])
            #expect(results[3].map(\.error?.code) == [.forbidden])
            try await storage.settle()
            let staff = try await Fixtures.token()
            #expect(try await client.pull("collection=checkins&scope=other", token: staff).changes.isEmpty)
            #expect(try await client.pull("collection=guests&scope=other", token: staff).changes.map(\.recordId) == ["h1"])

            // A relay of another tenant writes into its own tenant only: acme's roster knows nothing of it.
            let stranger = try await Self.relayToken(tenant: "globex")
            _ = try await Self.forward(
                client, [Self.batch(device: "door-1", [RecordRulesTests.scan("g2", device: "door-1", at: 14)])],
                token: stranger)
            try await storage.settle()
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let audit = try await client.send(.get, "/v1/audit?collection=checkins&recordId=g2&scope=gala", token: organizer)
            #expect(try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries.map(\.deviceId) == ["door-9"])
        }
    }

    @Test("only a relay's token forwards, and a relay's token must name its scopes", arguments: StorageKind.allCases)
    func credentials(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let body = RelayForwardRequest(batches: [Self.batch(device: "door-1", [RecordRulesTests.scan("g1", at: 10)])])
            for role in Role.allCases {
                let token = try await Fixtures.token(role: role)
                let response = try await client.post("/v1/relay/forward", body, token: token)
                #expect(response.status == .forbidden, "\(role)")
                #expect(response.wireError?.code == .forbidden)
            }
            let issued = Fixtures.serverSeconds
            for claims in [
                #"{"tenant":"acme","sub":"hall-a","role":"relay","exp":\#(issued + 600)}"#,
                #"{"tenant":"acme","sub":"hall-a","role":"relay","scopes":[],"exp":\#(issued + 600)}"#,
                #"{"tenant":"acme","sub":"hall-a","role":"relay","scopes":["no way"],"exp":\#(issued + 600)}"#,
                #"{"tenant":"acme","sub":"hall-a","role":"relay","scopes":["gala"],"device":"d1","exp":\#(issued + 600)}"#,
                #"{"tenant":"acme","sub":"ana","role":"staff","scopes":["gala"],"exp":\#(issued + 600)}"#,
            ] {
                let response = try await client.post("/v1/relay/forward", body, token: Fixtures.rawToken(claims: claims))
                #expect(response.status == .unauthorized, "\(claims)")
            }
            let relay = try await Self.relayToken()
            let unknownRole = try await client.send(
                .post, "/v1/relay/forward", token: relay,
                body: ByteBuffer(
                    string: #"{"batches":[{"deviceId":"d","userId":"u","userName":"U","role":"root","mutations":[]}]}"#))
            #expect(unknownRole.status == .badRequest)
            #expect(unknownRole.wireError?.code == .invalidJSON)
        }
    }

    @Test("an organizer creates a relay's token through the API; nobody else does, and bad requests are refused", arguments: StorageKind.allCases)
    func tokensThroughTheAPI(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            try await Self.importGuests(["g1"], client: client)
            try await storage.settle()
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let created = try await client.post(
                "/v1/relay-tokens", RelayTokenRequest(relayId: "hall-a", name: "Hall A", scopes: ["gala"], lifetimeSeconds: 7200),
                token: organizer)
            #expect(created.status == .ok)
            #expect(created.headers[.cacheControl] == "no-store")
            let answer = try JSONDecoder().decode(RelayTokenResponse.self, from: created.body)
            #expect(answer.expiresAt == Timestamp(Fixtures.serverNow.date.addingTimeInterval(7200)))
            // It reads the event's roster as a relay, and forwards in its name.
            #expect(try await client.pull("collection=guests&scope=gala", token: answer.token).changes.map(\.recordId) == ["g1"])
            let forwarded = try await Self.forward(
                client, [Self.batch(device: "door-1", [RecordRulesTests.scan("g1", device: "door-1", at: 10)])], token: answer.token)
            #expect(forwarded.map { $0.map(\.status) } == [[.applied]])
            // It is a relay's token only: no person's route takes it.
            #expect(try await client.send(.get, "/v1/monitor", token: answer.token).status == .forbidden)

            let request = RelayTokenRequest(relayId: "hall-b", scopes: ["gala"])
            for role in [Role.staff, .supervisor] {
                let refused = try await client.post("/v1/relay-tokens", request, token: try await Fixtures.token(role: role))
                #expect(refused.status == .forbidden, "\(role)")
            }
            #expect(try await client.post("/v1/relay-tokens", request, token: answer.token).status == .forbidden)
            for bad in [
                RelayTokenRequest(relayId: "no way", scopes: ["gala"]), RelayTokenRequest(relayId: "hall-b", scopes: []),
                RelayTokenRequest(relayId: "hall-b", scopes: ["gala", "bad scope"]),
                RelayTokenRequest(relayId: "hall-b", scopes: ["gala"], lifetimeSeconds: 31 * 24 * 3600),
                RelayTokenRequest(relayId: "hall-b", name: "", scopes: ["gala"]),
            ] {
                let refused = try await client.post("/v1/relay-tokens", bad, token: organizer)
                #expect(refused.status == .badRequest, "\(bad)")
                #expect(refused.wireError?.code == .invalidRequest)
            }
        }
    }

    @Test("a relay's status shows on the server's monitor: the relay as one row, its devices as it heard them", arguments: StorageKind.allCases)
    func statusOnTheMonitor(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let relay = try await Self.relayToken()
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            // door-1 told the server itself, later than the relay last heard from it.
            let direct = try await client.post(
                "/v1/heartbeats",
                Heartbeat(deviceId: "door-1", event: "gala", pendingCount: 0, failedCount: 0, lastRosterFetch: nil, appVersion: "1.0"),
                token: try await Fixtures.token())
            #expect(direct.status == .ok)
            let door1 = try JSONDecoder().decode(HeartbeatResponse.self, from: direct.body).fingerprint
            let door2 = "00112233aabbccdd"
            func device(_ fingerprint: String, pending: Int, seen offset: Double, event: String = "gala") -> RelayDeviceReport {
                RelayDeviceReport(
                    fingerprint: fingerprint, userId: "ana", staffName: "Ana Staff", event: event, pendingCount: pending,
                    failedCount: 0, rejectedCount: 0, lastRosterFetch: nil, appVersion: "1.0",
                    lastSeen: Timestamp(Fixtures.serverNow.date.addingTimeInterval(offset)))
            }
            func failure(_ collection: String, _ record: String, _ reason: String) -> RelayFailureReport {
                RelayFailureReport(
                    fingerprint: door2, userId: "ana", collection: collection, recordId: record,
                    firstAttempt: Timestamp(Fixtures.serverNow.date.addingTimeInterval(-120)), lastError: reason, kind: .rejected)
            }
            let report = RelayStatusReport(
                waiting: 12, oldestWaitingSince: Timestamp(Fixtures.serverNow.date.addingTimeInterval(-240)),
                lastError: "the server at sync.example.org cannot be reached",
                devices: [device(door1, pending: 40, seen: -60), device(door2, pending: 7, seen: -30)],
                failures: [failure("checkins", "g5", "Registration cancelled"), failure("notes", "n1", "not a relay's")])
            let sent = try await client.post("/v1/relay/status", report, token: relay)
            #expect(sent.status == .noContent)

            let monitor = try await client.send(.get, "/v1/monitor?event=gala", token: organizer)
            let shown = try JSONDecoder().decode(MonitorResponse.self, from: monitor.body)
            #expect(shown.relays.map(\.relayId) == ["hall-a"])
            #expect(shown.relays.first?.name == "Hall A relay" && shown.relays.first?.scopes == ["gala"])
            #expect(shown.relays.first?.waiting == 12 && shown.relays.first?.status == .ok)
            #expect(shown.relays.first?.lastContact == Fixtures.serverNow)
            #expect(shown.relays.first?.lastError == "the server at sync.example.org cannot be reached")
            let pending = Dictionary(uniqueKeysWithValues: shown.devices.map { ($0.fingerprint, $0.pendingCount) })
            // door-2 is known through the relay alone; door-1's own later report stands.
            #expect(pending == [door1: 0, door2: 7])
            // The refusal door-2 reported to the relay is listed; a failure outside the relay's events is not.
            #expect(shown.refusedRecords.map(\.recordId) == ["g5"])
            #expect(shown.refusedRecords.first?.lastError == "Registration cancelled")
            // Another event's monitor has no relay of gala.
            let other = try await client.send(.get, "/v1/monitor?event=other", token: organizer)
            #expect(try JSONDecoder().decode(MonitorResponse.self, from: other.body).relays.isEmpty)

            // Only a relay reports, and only its events' devices, each well formed.
            #expect(try await client.post("/v1/relay/status", report, token: organizer).status == .forbidden)
            var outside = report
            outside.devices = [device(door2, pending: 1, seen: 0, event: "other")]
            #expect(try await client.post("/v1/relay/status", outside, token: relay).status == .forbidden)
            var malformed = report
            malformed.devices = [device("door-2", pending: 1, seen: 0)]
            #expect(try await client.post("/v1/relay/status", malformed, token: relay).status == .badRequest)
        }
    }
}
