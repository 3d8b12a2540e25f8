import Foundation
import HummingbirdTesting
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@testable import OutpostServer

/// A venue relay between doors and the server, on real HTTP, with a fault proxy on the line upstream: the doors
/// stay one place while the line is down, and everything reaches the server exactly once when it returns.
@Suite("Venue relay")
struct RelayTests {
    /// Runs a relay for `gala` whose line upstream goes through `proxy`.
    static func withRelay(
        upstream proxy: FaultProxy, collections: CollectionRegistry = .standard,
        _ body: @escaping @Sendable (any TestClientProtocol, any SyncStorage) async throws -> Void
    ) async throws {
        let token = try await RelayForwardTests.relayToken()
        var relay = try RelayConfiguration(upstream: URL(string: "http://127.0.0.1:\(proxy.port)")!, token: token)
        relay.longestBackoff = .milliseconds(500)
        relay.interval = .milliseconds(50)
        relay.reportInterval = .milliseconds(100)
        let configured = relay
        try await withServer(
            .sqlite, setup: .live,
            configure: {
                $0.relay = configured
                $0.collections = collections
            }, body)
    }

    /// A device's push to the relay, as this build's devices send it.
    static func push(
        _ client: any TestClientProtocol, _ mutations: [Mutation], user: String, device: String,
        features: String? = ProtocolFeature.allNames
    ) async throws -> [MutationResult] {
        try await client.push(mutations, token: try await Fixtures.token(user: user), device: device, features: features)
            .results
    }

    /// The relay line of a server's monitor.
    static func line(_ client: any TestClientProtocol, token: String) async throws -> RelayLine? {
        let response = try await client.send(.get, "/v1/monitor?event=gala", token: token)
        #expect(response.status == .ok)
        return try JSONDecoder().decode(MonitorResponse.self, from: response.body).relay
    }

    static func waitUntil(_ what: String, _ condition: @escaping @Sendable () async throws -> Bool) async throws {
        try await bounded(what) {
            while try await !condition() { try await Task.sleep(for: .milliseconds(20)) }
        }
    }

    @Test("the line cut: the doors are one place, and every scan reaches the server once, in order", arguments: StorageKind.allCases)
    func lineCut(kind: StorageKind) async throws {
        // The server takes at most 40 mutations a request: the relay's forwards of 500 are made smaller.
        try await withServer(kind, setup: .live, configure: { $0.maxBatchSize = 40 }) { server, serverStorage in
            let guests = (0..<120).map { String(format: "g%03d", $0) }
            try await RelayForwardTests.importGuests(guests, client: server)
            let proxy = try await FaultProxy.start(upstreamPort: try #require(server.port))
            defer { Task { try? await proxy.stop() } }
            try await Self.withRelay(upstream: proxy) { relay, relayStorage in
                let staff = try await Fixtures.token()
                // The relay brings the roster down before the doors open,
                try await Self.waitUntil("the roster at the relay") {
                    try await relay.pull("collection=guests&scope=gala&limit=1000", token: staff).changes.count == guests.count
                }
                // and the venue's line fails.
                proxy.inject(.drop)
                // Connections already open through it break too, as when the line fails.
                proxy.cutAll()

                // What the relay does not carry waits on the device for the server; a key naming the server's own
                // writes at the relay is refused.
                let note = Fixtures.upsert("n1", ["text": "for the office"], at: 5, device: "door-1")
                var elsewhere = RecordRulesTests.scan("h1", event: "other", device: "door-1", at: 6)
                elsewhere.idempotencyKey = "door-1:other:h1"
                var posing = RecordRulesTests.scan("g002", device: "door-1", at: 7)
                posing.idempotencyKey = "upstream:checkins:gala:g002:v1"
                let kept = try await Self.push(relay, [note, elsewhere, posing], user: "ana", device: "door-1")
                #expect(kept.map(\.error?.code) == [.notCarriedByRelay, .notCarriedByRelay, .invalidIdempotencyKey])
                let admin = try await relay.push(
                    [RecordRulesTests.scan("g003", device: "desk", at: 8)], token: try await Fixtures.token(user: "root", role: .admin),
                    device: "desk")
                #expect(admin.results.map(\.error?.code) == [.notCarriedByRelay])
                let olderNote = try await relay.send(
                    .post, "/v1/push", token: try await Fixtures.token(user: "ana"),
                    body: try Fixtures.json(PushRequest(deviceId: "door-1", mutations: [note])))
                #expect(olderNote.status == .serviceUnavailable)

                // Door 1's scan is held at the relay, not called synced;
                let first = try await Self.push(relay, [RecordRulesTests.scan("g000", device: "door-1", at: 10)], user: "ana", device: "door-1")
                #expect(first.map(\.error?.code) == [.heldAtRelay])
                // door 2 is told at once who scanned the guest first;
                let second = try await Self.push(relay, [RecordRulesTests.scan("g000", device: "door-2", at: 20)], user: "ben", device: "door-2")
                #expect(second.map(\.status) == [.superseded])
                #expect(second[0].serverFields?["scanned_by"] == "door-1")
                // a device of an older build is told to come back, not that its scan is on the server.
                let older = try await relay.send(
                    .post, "/v1/push", token: try await Fixtures.token(user: "cy"),
                    body: try Fixtures.json(
                        PushRequest(deviceId: "door-3", mutations: [RecordRulesTests.scan("g001", device: "door-3", at: 21)])))
                #expect(older.status == .serviceUnavailable)

                // Three doors scan the rest, in chunks, while the line is down.
                var sent: [String: [Mutation]] = [:]
                for (index, guest) in guests.dropFirst(2).enumerated() {
                    let door = ["door-1", "door-2", "door-3"][index % 3]
                    sent[door, default: []].append(RecordRulesTests.scan(guest, device: door, at: 30 + Double(index)))
                }
                let users = ["door-1": "ana", "door-2": "ben", "door-3": "cy"]
                for (door, scans) in sent {
                    for chunk in stride(from: 0, to: scans.count, by: 10) {
                        let results = try await Self.push(
                            relay, Array(scans[chunk..<min(chunk + 10, scans.count)]), user: users[door]!, device: door)
                        #expect(results.allSatisfy { $0.error?.code == .heldAtRelay })
                    }
                }
                try await serverStorage.settle()
                let organizer = try await Fixtures.token(user: "olga", role: .organizer)
                #expect(try await server.pull("collection=checkins&scope=gala&limit=1000", token: organizer).changes.isEmpty)
                // The relay's monitor says what it holds and why it cannot hand it over.
                try await Self.waitUntil("a failed forward") { try await Self.line(relay, token: organizer)?.lastError != nil }
                let down = try #require(try await Self.line(relay, token: organizer))
                #expect(down.waiting == guests.count + 1 && down.forwarded == 0 && down.upstream == "127.0.0.1")
                #expect(down.lastError?.contains("cannot be reached") == true, "\(down.lastError ?? "")")
                #expect(down.oldestWaitingSince == Fixtures.serverNow)

                // The doors tell the relay how they are.
                for (door, user) in users {
                    let beat = try await relay.post(
                        "/v1/heartbeats",
                        Heartbeat(deviceId: door, event: "gala", pendingCount: 40, failedCount: 0, lastRosterFetch: nil, appVersion: "1.0"),
                        token: try await Fixtures.token(user: user))
                    #expect(beat.status == .ok)
                }

                // The line returns: the relay's backlog empties,
                proxy.inject(nil)
                let journal = try #require(relayStorage as? SQLiteStorage)
                try await Self.waitUntil("an empty backlog") { try await journal.relayBacklog().waiting == 0 }
                let backlog = try await journal.relayBacklog()
                #expect(backlog.forwarded == guests.count + 1 && backlog.refused == 0 && backlog.lastError == nil)
                let up = try #require(try await Self.line(relay, token: organizer))
                #expect(up.waiting == 0 && up.forwarded == guests.count + 1 && up.lastError == nil && up.lastForwardedAt != nil)
                // The server's own monitor has no relay line; it shows the relay as one row, and the doors behind it.
                #expect(try await Self.line(server, token: organizer) == nil)
                try await Self.waitUntil("the relay on the server's monitor") {
                    let monitor = try await server.send(.get, "/v1/monitor?event=gala", token: organizer)
                    let shown = try JSONDecoder().decode(MonitorResponse.self, from: monitor.body)
                    return shown.relays.map(\.relayId) == ["hall-a"] && shown.relays[0].waiting == 0 && shown.devices.count == 3
                }

                // the server holds each scan once, with its device, person and scan time,
                try await serverStorage.settle()
                let checkIns = try await server.pull("collection=checkins&scope=gala&limit=1000", token: organizer).changes
                #expect(checkIns.count == guests.count && Set(checkIns.map(\.recordId)) == Set(guests))
                let audit = try await server.send(.get, "/v1/audit?collection=checkins&recordId=g000&scope=gala", token: organizer)
                let entries = try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries
                #expect(entries.map(\.deviceId) == ["door-1", "door-2"])
                #expect(entries.map(\.status) == [.applied, .superseded])
                #expect(entries.map(\.clientTimestamp) == [Fixtures.time(10), Fixtures.time(20)])
                for (door, scans) in sent {
                    for scan in scans.prefix(3) {
                        let audit = try await server.send(
                            .get, "/v1/audit?collection=checkins&recordId=\(scan.recordId)&scope=gala", token: organizer)
                        let entry = try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries
                        #expect(entry.map(\.deviceId) == [door] && entry.map(\.userId) == [users[door]!])
                        #expect(entry.map(\.clientTimestamp) == [scan.clientTimestamp])
                    }
                }

                // A walk-in registered upstream, and a cancellation, reach the venue through the relay.
                let walkIn = try await server.push(
                    [
                        AccessRulesTests.guest("walk-in-1", event: "gala"),
                        Fixtures.delete("g119", at: 50, collection: "guests", device: "admin", scope: "gala"),
                    ],
                    token: organizer, device: "admin")
                #expect(walkIn.results.map(\.status) == [.applied, .applied])
                try await Self.waitUntil("the walk-in and the cancellation at the relay") {
                    let guests = try await relay.pull("collection=guests&scope=gala&limit=1000", token: staff).changes
                    return guests.contains { $0.recordId == "walk-in-1" && !$0.tombstone }
                        && guests.contains { $0.recordId == "g119" && $0.tombstone }
                }

                // and each door, sending its scans again, hears the server's answers: synced at last.
                let again = try await Self.push(relay, [RecordRulesTests.scan("g000", device: "door-1", at: 10)], user: "ana", device: "door-1")
                #expect(again.map(\.status) == [.applied])
                for (door, scans) in sent {
                    let results = try await Self.push(relay, Array(scans.prefix(10)), user: users[door]!, device: door)
                    #expect(results.allSatisfy { $0.status == .applied }, "\(door)")
                }
            }
        }
    }

    @Test(
        "a scan the server refuses is taken back at the relay: other doors no longer see the guest as checked in, the door that scanned hears why",
        arguments: StorageKind.allCases)
    func refusedUpstream(kind: StorageKind) async throws {
        try await withServer(kind, setup: .live) { server, _ in
            let guests = ["g000", "g001", "g002"]
            try await RelayForwardTests.importGuests(guests, client: server)
            let proxy = try await FaultProxy.start(upstreamPort: try #require(server.port))
            defer { Task { try? await proxy.stop() } }
            try await Self.withRelay(upstream: proxy) { relay, relayStorage in
                let staff = try await Fixtures.token()
                let organizer = try await Fixtures.token(user: "olga", role: .organizer)
                try await Self.waitUntil("the roster at the relay") {
                    try await relay.pull("collection=guests&scope=gala&limit=100", token: staff).changes.count == guests.count
                }
                proxy.inject(.drop)
                proxy.cutAll()
                // The organizer cancels g001 upstream while the venue cannot hear of it; door 1 admits both guests.
                let cancelled = try await server.push(
                    [Fixtures.delete("g001", at: 5, collection: "guests", device: "admin", scope: "gala")], token: organizer,
                    device: "admin")
                #expect(cancelled.results.map(\.status) == [.applied])
                let scans = [RecordRulesTests.scan("g001", device: "door-1", at: 10), RecordRulesTests.scan("g002", device: "door-1", at: 11)]
                #expect(try await Self.push(relay, scans, user: "ana", device: "door-1").map(\.error?.code) == [.heldAtRelay, .heldAtRelay])
                let seen = try await relay.pull("collection=checkins&scope=gala&limit=100", token: staff).changes
                #expect(seen.filter { !$0.tombstone }.map(\.recordId).sorted() == ["g001", "g002"])

                proxy.inject(nil)
                let journal = try #require(relayStorage as? SQLiteStorage)
                try await Self.waitUntil("an empty backlog") { try await journal.relayBacklog().waiting == 0 }
                #expect(try await journal.relayBacklog().refused == 1)

                // The relay keeps what the server took and takes back what it refused: other doors pull that.
                let after = try await relay.pull("collection=checkins&scope=gala&limit=100", token: staff).changes
                #expect(after.filter { !$0.tombstone }.map(\.recordId) == ["g002"])
                #expect(after.first { $0.recordId == "g001" }?.tombstone == true)
                let audit = try await relay.send(.get, "/v1/audit?collection=checkins&recordId=g001&scope=gala", token: organizer)
                let history = try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries
                #expect(history.map(\.deviceId) == ["door-1", "relay"] && history.map(\.op) == [.upsert, .delete])
                // Door 1, sending its scan again, hears the server's refusal and its reason;
                let again = try await Self.push(relay, [scans[0]], user: "ana", device: "door-1")
                #expect(again.map(\.status) == [.rejected] && again[0].error?.code != .heldAtRelay, "\(again)")
                #expect(again[0].error?.message.isEmpty == false)
                // door 2, scanning the guest now, is not told that the guest is already in.
                try await Self.waitUntil("the cancellation at the relay") {
                    try await relay.pull("collection=guests&scope=gala&limit=100", token: staff).changes
                        .contains { $0.recordId == "g001" && $0.tombstone }
                }
                let second = try await Self.push(relay, [RecordRulesTests.scan("g001", device: "door-2", at: 20)], user: "ben", device: "door-2")
                #expect(second.map(\.status) == [.rejected] && second[0].serverFields == nil, "\(second)")
            }
        }
    }

    @Test(
        "the relay numbers each record as the server does: a door that synced with the server edits at the relay, and the server takes it",
        arguments: StorageKind.allCases)
    func serverVersions(kind: StorageKind) async throws {
        let tasks = CollectionRegistry(CollectionRegistry.standard.policies.values + [CollectionPolicy(name: "tasks", scopeField: "event")])
        try await withServer(kind, setup: .live, configure: { $0.collections = tasks }) { server, serverStorage in
            let proxy = try await FaultProxy.start(upstreamPort: try #require(server.port))
            defer { Task { try? await proxy.stop() } }
            // At the server, door 1 makes a task and edits it twice: version 3.
            let ana = try await Fixtures.token(user: "ana")
            for (second, base) in [(1.0, nil), (2.0, 1), (3.0, 2)] as [(Double, Int64?)] {
                let edit = Fixtures.upsert(
                    "t1", ["event": "gala", "text": "edit \(Int(second))"], at: second, collection: "tasks", device: "door-1", base: base)
                #expect(try await server.push([edit], token: ana, device: "door-1").results.map(\.version) == [Int64(second)])
            }
            try await Self.withRelay(upstream: proxy, collections: tasks) { relay, relayStorage in
                try await Self.waitUntil("the task at the relay") {
                    try await relay.pull("collection=tasks&scope=gala&limit=10", token: ana).changes.first?.version == 3
                }
                // The line fails; door 1 goes on at the relay from the version it has.
                proxy.inject(.drop)
                proxy.cutAll()
                let edit = Fixtures.upsert("t1", ["event": "gala", "text": "at the venue"], at: 10, collection: "tasks", device: "door-1", base: 3)
                #expect(try await Self.push(relay, [edit], user: "ana", device: "door-1").map(\.error?.code) == [.heldAtRelay])
                #expect(try await relay.pull("collection=tasks&scope=gala&limit=10", token: ana).changes.map(\.version) == [4])
                // The line returns: the server takes the edit as version 4, and the relay's copy stays there.
                proxy.inject(nil)
                let journal = try #require(relayStorage as? SQLiteStorage)
                try await Self.waitUntil("an empty backlog") { try await journal.relayBacklog().waiting == 0 }
                #expect(try await journal.relayBacklog().refused == 0)
                try await serverStorage.settle()
                let stored = try await server.pull("collection=tasks&scope=gala&limit=10", token: ana).changes
                #expect(stored.map(\.version) == [4] && stored.first?.fields["text"] == "at the venue")
                let again = try await Self.push(relay, [edit], user: "ana", device: "door-1")
                #expect(again.map(\.status) == [.applied] && again.map(\.version) == [4])
                // The server's copy of the edit comes back through the mirror and changes nothing at the relay.
                try await Self.waitUntil("the server's version 4 at the relay") {
                    try await journal.pool.read { db in
                        try Bool.fetchOne(
                            db, sql: "SELECT EXISTS (SELECT 1 FROM mutations WHERE idempotency_key = 'upstream:tasks:gala:t1:v4')")
                            ?? false
                    }
                }
                let mirrored = try await relay.pull("collection=tasks&scope=gala&limit=10", token: ana).changes
                #expect(mirrored.map(\.version) == [4] && mirrored.first?.fields["text"] == "at the venue")
            }
        }
    }

    @Test(
        "while the relay cannot hear of a cancellation, each scan the server refuses is taken back, and a check-in made elsewhere comes down",
        arguments: StorageKind.allCases)
    func refusedTwice(kind: StorageKind) async throws {
        try await withServer(kind, setup: .live) { server, _ in
            try await RelayForwardTests.importGuests(["g000", "g001"], client: server)
            let proxy = try await FaultProxy.start(upstreamPort: try #require(server.port))
            defer { Task { try? await proxy.stop() } }
            try await Self.withRelay(upstream: proxy) { relay, relayStorage in
                let staff = try await Fixtures.token()
                let organizer = try await Fixtures.token(user: "olga", role: .organizer)
                // A door on another line checks g000 in at the server: the relay's copy brings it down.
                let elsewhere = try await server.push([RecordRulesTests.scan("g000", device: "door-9", at: 5)], token: staff, device: "door-9")
                #expect(elsewhere.results.map(\.status) == [.applied])
                try await Self.waitUntil("the check-in made elsewhere at the relay") {
                    try await relay.pull("collection=checkins&scope=gala&limit=100", token: staff).changes
                        .contains { $0.recordId == "g000" && $0.fields["scanned_by"] == "door-9" && $0.version == 1 }
                }
                // Forwards go through, but the relay's pulls get no answer: it cannot hear of g001's cancellation.
                proxy.inject(.cutAnswers(toRequestsStartingWith: "GET /v1/pull"))
                let cancelled = try await server.push(
                    [Fixtures.delete("g001", at: 6, collection: "guests", device: "admin", scope: "gala")], token: organizer,
                    device: "admin")
                #expect(cancelled.results.map(\.status) == [.applied])
                let journal = try #require(relayStorage as? SQLiteStorage)
                for (number, door, user) in [(1, "door-1", "ana"), (2, "door-2", "ben")] {
                    let scan = RecordRulesTests.scan("g001", device: door, at: 10 * Double(number))
                    #expect(try await Self.push(relay, [scan], user: user, device: door).map(\.error?.code) == [.heldAtRelay])
                    try await Self.waitUntil("the server's refusal of scan \(number)") {
                        try await journal.relayBacklog().refused == number
                    }
                    // Taken back each time, and the next scan is judged afresh, with its own time.
                    let copy = try await relay.pull("collection=checkins&scope=gala&limit=100", token: staff).changes
                    #expect(copy.first { $0.recordId == "g001" }?.tombstone == true, "scan \(number)")
                }
                let audit = try await relay.send(.get, "/v1/audit?collection=checkins&recordId=g001&scope=gala", token: organizer)
                let history = try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries
                #expect(history.map(\.deviceId) == ["door-1", "door-2", "relay", "relay"])
                #expect(history.map(\.version) == [1, 3, 2, 4] && history.map(\.op) == [.upsert, .upsert, .delete, .delete])
                #expect(history.filter { $0.deviceId == "door-2" }.map(\.status) == [.applied])
            }
        }
    }
}
