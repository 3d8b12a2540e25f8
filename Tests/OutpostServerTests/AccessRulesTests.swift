import Foundation
import GRDB
import HummingbirdTesting
import OutpostProtocol
import OutpostRecords
import PostgresNIO
import Testing

@testable import OutpostServer

/// Who may read and change what: records keyed by their scope, collections of own records, bound devices,
/// reviewed protected fields and sealed cursors, on both engines.
@Suite("Access rules")
struct AccessRulesTests {
    static func guest(_ id: String, event: String, name: String = "Guest", at seconds: Double = 0) -> Mutation {
        Fixtures.upsert(
            id, ["event_id": .string(event), "name": .string(name), "status": "registered"], at: seconds,
            collection: Guest.collection, device: "admin", key: "import:\(event):\(id)")
    }

    @Test("two events sharing 1,000 guest ids: each roster, delta and check-in stays its event's", arguments: StorageKind.allCases)
    func sharedGuestIds(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let staff = try await Fixtures.token()
            let ids = (0..<1000).map { String(format: "g%04d", $0) }
            // Given event A's roster and then event B's, with the same guest ids,
            for event in ["A", "B"] {
                for chunk in stride(from: 0, to: ids.count, by: 500) {
                    let results = try await client.push(
                        ids[chunk..<chunk + 500].map { Self.guest($0, event: event) }, token: organizer, device: "admin"
                    )
                    .results
                    #expect(results.allSatisfy { $0.status == .applied })
                }
            }
            // each event's snapshot holds its 1,000 guests,
            for event in ["A", "B"] {
                let start = try await storage.snapshotStart(tenant: "acme", collection: "guests", scope: event)
                #expect(start.total == 1000)
            }
            // and cancelling a guest at B leaves A's as it was, in B's delta alone.
            try await storage.settle()
            let cursorA = try await client.pull("collection=guests&scope=A&limit=1000", token: staff).cursor
            let cursorB = try await client.pull("collection=guests&scope=B&limit=1000", token: staff).cursor
            let cancel = try await client.push(
                [Fixtures.delete("g0007", at: 5, collection: "guests", device: "admin", scope: "B")], token: organizer,
                device: "admin")
            #expect(cancel.results[0].status == .applied)
            try await storage.settle()
            #expect(try await client.pull("collection=guests&scope=A&cursor=\(cursorA)", token: staff).changes.isEmpty)
            let deltaB = try await client.pull("collection=guests&scope=B&cursor=\(cursorB)", token: staff).changes
            #expect(deltaB.map(\.recordId) == ["g0007"] && deltaB[0].tombstone && deltaB[0].scope == "B")

            // Check-ins for the same guest at both events are two records, both in the audit.
            let scans = try await client.push(
                [RecordRulesTests.scan("g0001", event: "A", at: 10), RecordRulesTests.scan("g0001", event: "B", at: 11)],
                token: staff
            ).results
            #expect(scans.map(\.status) == [.applied, .applied])
            #expect(scans.map(\.version) == [1, 1])
            // A cancelled guest at B is refused there, though A's guest of that id is fine.
            let refused = try await client.push([RecordRulesTests.scan("g0007", event: "B", at: 12)], token: staff).results
            #expect(refused[0].error?.code == .guestCancelled)
            try await storage.settle()
            for event in ["A", "B"] {
                let checkIns = try await client.pull("collection=checkins&scope=\(event)", token: staff).changes
                #expect(checkIns.map(\.recordId) == ["g0001"] && checkIns[0].scope == event)
            }
            let audit = try await client.send(.get, "/v1/audit?collection=checkins&recordId=g0001", token: organizer)
            let entries = try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries
            #expect(Set(entries.map(\.scope)) == ["A", "B"])
            let auditB = try await client.send(.get, "/v1/audit?collection=checkins&recordId=g0001&scope=B", token: organizer)
            #expect(try JSONDecoder().decode(AuditResponse.self, from: auditB.body).entries.map(\.scope) == ["B"])
        }
    }

    @Test(
        "a delete in a scoped collection names its scope; a scope that differs from the scope field is refused",
        arguments: StorageKind.allCases)
    func scopeNamed(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            _ = try await client.push([Self.guest("g1", event: "A")], token: organizer, device: "admin")
            let results = try await client.push(
                [
                    Fixtures.delete("g1", at: 1, collection: "guests", device: "admin"),
                    Fixtures.upsert("g1", ["event_id": "A"], at: 2, collection: "guests", device: "admin", scope: "B"),
                    Fixtures.upsert("n1", ["t": "x"], at: 3, device: "admin", scope: "A"),
                ], token: organizer, device: "admin"
            ).results
            #expect(results.map(\.error?.code) == [.invalidFields, .invalidFields, .invalidFields])
        }
    }

    static func activity(_ id: String, _ fields: [String: JSONValue] = [:], at seconds: Double, device: String) -> Mutation {
        Fixtures.upsert(
            id,
            ["type": "Session", "duration_minutes": 60, "participants": 3, "date": "2026-11-21", "travel_expense": "12.50"]
                .merging(fields) { $1 }, at: seconds, collection: Activity.collection, device: device)
    }

    @Test(
        "staff read and change only their own attendance, activities and builds; supervisors read all and change their own",
        arguments: StorageKind.allCases)
    func ownRecords(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            let ben = try await Fixtures.token(user: "ben", name: "Ben")
            let sue = try await Fixtures.token(user: "sue", role: .supervisor, name: "Sue")
            let olga = try await Fixtures.token(user: "olga", role: .organizer)
            // Given Ana's attendance, activity and build,
            let build = Fixtures.upsert(
                "b1", ["name": "Block C", "status": "done"], at: 2, collection: Build.collection,
                device: "phone-ana")
            let created = try await client.push(
                [RecordRulesTests.attendance(.checkIn, at: 1), Self.activity("a1", at: 1, device: "phone-ana"), build],
                token: ana, device: "phone-ana"
            ).results
            #expect(created.map(\.status) == [.applied, .applied, .applied], "\(created)")
            try await storage.settle()

            // Ben sees none of them, and may change none of them: each refusal is `forbidden` and writes nothing.
            for collection in ["attendance", "activities", "builds"] {
                #expect(try await client.pull("collection=\(collection)", token: ben).changes.isEmpty)
            }
            let attempts = try await client.push(
                [
                    Self.activity("a1", ["type": "Mine now"], at: 5, device: "phone-ben"),
                    Fixtures.delete("a1", at: 6, collection: Activity.collection, device: "phone-ben"),
                    Fixtures.upsert("b1", ["status": "redo"], at: 7, collection: Build.collection, device: "phone-ben"),
                ], token: ben, device: "phone-ben"
            ).results
            #expect(attempts.map(\.error?.code) == [.forbidden, .forbidden, .forbidden])
            // A supervisor reads all three, and is refused the same changes.
            for collection in ["attendance", "activities", "builds"] {
                #expect(try await client.pull("collection=\(collection)", token: sue).changes.count == 1)
            }
            let review = try await client.push(
                [Fixtures.upsert("b1", ["status": "ok"], at: 8, collection: Build.collection, device: "phone-sue")],
                token: sue, device: "phone-sue"
            ).results
            #expect(review[0].error?.code == .forbidden)
            // Ana still sees her records as she wrote them; an organizer may correct them.
            try await storage.settle()
            let mine = try await client.pull("collection=activities", token: ana).changes
            #expect(mine.map(\.fields["type"]) == ["Session"] && mine[0].version == 1)
            let fix = try await client.push(
                [Fixtures.upsert("a1", ["type": "Corrected"], at: 9, collection: Activity.collection, device: "admin")], token: olga, device: "admin")
            #expect(fix.results[0].status == .applied)
            // Notes are the tenant's: anyone reads and changes them.
            _ = try await client.push([Fixtures.upsert("n1", ["t": "gate B"], at: 10, device: "phone-ana")], token: ana, device: "phone-ana")
            let note = try await client.push([Fixtures.upsert("n1", ["t": "gate C"], at: 11, device: "phone-ben")], token: ben, device: "phone-ben")
            #expect(note.results[0].status == .applied)
            // Check-ins are read by scope: a member of staff names the event.
            let unscoped = try await client.send(.get, "/v1/pull?collection=checkins", token: ben)
            #expect(unscoped.status == .forbidden && unscoped.wireError?.code == .forbidden)
        }
    }

    @Test(
        "a push, heartbeat or failure report under another user's device is refused and changes nothing; a release frees it",
        arguments: StorageKind.allCases)
    func boundDevices(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token(user: "ana", name: "Ana")
            let ben = try await Fixtures.token(user: "ben", name: "Ben")
            let olga = try await Fixtures.token(user: "olga", role: .organizer)
            let beat = Heartbeat(deviceId: "door-1", event: "gala", pendingCount: 2, failedCount: 0, lastRosterFetch: nil, appVersion: "t/1")
            #expect(try await client.post("/v1/heartbeats", beat, token: ana).status == .ok)
            _ = try await client.push([Fixtures.upsert("n1", ["t": "x"], device: "door-1")], token: ana, device: "door-1")

            // Ben cannot speak for Ana's device,
            var forged = beat
            forged.pendingCount = 0
            let heartbeat = try await client.post("/v1/heartbeats", forged, token: ben)
            #expect(heartbeat.status == .forbidden && heartbeat.wireError?.code == .deviceOwned)
            let push = try await client.send(
                .post, "/v1/push", token: ben,
                body: try Fixtures.json(PushRequest(deviceId: "door-1", mutations: [Fixtures.upsert("n2", ["t": "y"], device: "door-1")])))
            #expect(push.status == .forbidden && push.wireError?.code == .deviceOwned)
            let report = SyncFailureReport(
                deviceId: "door-1",
                failures: [SyncFailure(collection: "notes", recordId: "n1", firstAttempt: Fixtures.time(0), lastError: "x")])
            #expect(try await client.post("/v1/sync-failures", report, token: ben).status == .forbidden)
            // and Ana's monitor row and records are as she left them.
            let monitor = try JSONDecoder().decode(
                MonitorResponse.self, from: try await client.send(.get, "/v1/monitor", token: olga).body)
            #expect(monitor.devices.map(\.staffName) == ["Ana"] && monitor.devices[0].pendingCount == 2)
            try await storage.settle()
            #expect(try await client.pull("collection=notes", token: olga).changes.map(\.recordId) == ["n1"])

            // Staff may not release a device; an organizer may, and the next user owns it.
            #expect(try await client.send(.delete, "/v1/devices/door-1/owner", token: ben).status == .forbidden)
            let released = try await client.send(.delete, "/v1/devices/door-1/owner", token: olga)
            #expect(try JSONDecoder().decode(DeviceRelease.self, from: released.body).released)
            #expect(try await client.post("/v1/heartbeats", forged, token: ben).status == .ok)
            #expect(try await client.post("/v1/heartbeats", beat, token: ana).status == .forbidden)

            // A token bound to one device speaks for no other.
            let door2 = try await Fixtures.token(user: "cat", device: "door-2")
            #expect(
                try await client.post(
                    "/v1/heartbeats",
                    Heartbeat(deviceId: "door-3", event: nil, pendingCount: 0, failedCount: 0, lastRosterFetch: nil, appVersion: "t/1"), token: door2
                ).status == .forbidden)
            #expect(
                try await client.post(
                    "/v1/heartbeats",
                    Heartbeat(deviceId: "door-2", event: nil, pendingCount: 0, failedCount: 0, lastRosterFetch: nil, appVersion: "t/1"), token: door2
                ).status == .ok)
        }
    }

    @Test(
        "a base version above the stored version is refused; a protected field changes only on a base that saw it",
        arguments: StorageKind.allCases)
    func reviewedProtectedFields(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let ana = try await Fixtures.token()
            _ = try await client.push([Self.activity("a1", at: 1, device: "dev-a")], token: ana)
            var ahead = Self.activity("a1", ["travel_expense": "999.00"], at: 2, device: "dev-a")
            ahead.baseVersion = 999_999
            var stale = Self.activity("a1", ["travel_expense": "50.00"], at: 3, device: "dev-a")
            stale.baseVersion = 0
            var seen = Self.activity("a1", ["travel_expense": "20.00"], at: 4, device: "dev-a")
            seen.baseVersion = 1
            let results = try await client.push([ahead, stale, seen], token: ana).results
            #expect(results[0].error?.code == .invalidBaseVersion)
            #expect(results[1].status == .conflict)
            #expect(results[2].status == .applied)
            // Nothing stored yet: any base above zero claims a version that never existed.
            var unseen = Self.activity("a2", at: 5, device: "dev-a")
            unseen.baseVersion = 3
            #expect(try await client.push([unseen], token: ana).results[0].error?.code == .invalidBaseVersion)
        }
    }

    @Test(
        "cursors are sealed per tenant: they reveal no position, and another tenant's is refused",
        arguments: StorageKind.allCases)
    func sealedCursors(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let acme = try await Fixtures.token(tenant: "acme", user: "ana")
            let globex = try await Fixtures.token(tenant: "globex", user: "gus")
            _ = try await client.push([Fixtures.upsert("n1", ["t": "a"])], token: acme, device: "acme-1")
            _ = try await client.push((0..<20).map { Fixtures.upsert("g\($0)", ["t": "g"], at: Double($0)) }, token: globex, device: "globex-1")
            _ = try await client.push([Fixtures.upsert("n2", ["t": "b"], at: 30)], token: acme, device: "acme-1")
            try await storage.settle()
            let page = try await client.pull("collection=notes&limit=1", token: acme)
            let next = try await client.pull("collection=notes&limit=1&cursor=\(page.cursor)", token: acme)
            #expect(page.cursor.hasPrefix("c2.") && next.cursor.hasPrefix("c2."))
            // The second page follows from the first's cursor, whatever the other tenant wrote between them,
            #expect(next.changes.map(\.recordId) == ["n2"])
            // and neither token holds a position in the clear: each is one sealed box (a 12-byte nonce, the
            // 16-byte position and a 16-byte tag), whatever characters its base64 happens to start with.
            for token in [page.cursor, next.cursor] {
                let sealed = token.dropFirst(CursorSealer.prefix.count)
                #expect(!sealed.contains("."))
                #expect(Base64URL.decode(sealed)?.count == 12 + 16 + 16)
            }
            let stolen = try await client.send(.get, "/v1/pull?collection=notes&cursor=\(page.cursor)", token: globex)
            #expect(stolen.status == .badRequest && stolen.wireError?.code == .invalidCursor)
            // A cursor of the earlier, unsealed form still reads.
            #expect(try await client.pull("collection=notes&cursor=c1.0.0", token: acme).changes.count == 2)
        }
    }

    @Test(
        "a collections file adds a collection with a scope and an own-records rule, and its rules hold",
        arguments: StorageKind.allCases)
    func declaredCollection(kind: StorageKind) async throws {
        let registry = try CollectionRegistry.standard(
            adding: """
                collections:
                  - name: incidents
                    scopeField: site_id
                    read: own
                    protectedFields: [cost]
                """, source: "collections.yaml")
        try await withServer(kind, configure: { $0.collections = registry }) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            let ben = try await Fixtures.token(user: "ben")
            let incident = { (id: String, site: String, at: Double, device: String) in
                Fixtures.upsert(id, ["site_id": .string(site), "cost": "10.00"], at: at, collection: "incidents", device: device)
            }
            let results = try await client.push([incident("i1", "north", 1, "dev-a"), incident("i1", "south", 2, "dev-a")], token: ana).results
            #expect(results.map(\.status) == [.applied, .applied])
            #expect(results.map(\.version) == [1, 1])
            try await storage.settle()
            #expect(try await client.pull("collection=incidents&scope=north", token: ana).changes.count == 1)
            #expect(try await client.pull("collection=incidents", token: ben).changes.isEmpty)
            let taken = try await client.push([incident("i1", "north", 3, "dev-b")], token: ben, device: "dev-b").results
            #expect(taken[0].error?.code == .forbidden)
        }
    }

    @Test(
        "a conflict answer carries the server's values only to a caller who may read the record; the review keeps them",
        arguments: StorageKind.allCases)
    func conflictAnswerReadable(kind: StorageKind) async throws {
        let registry = try CollectionRegistry.standard(
            adding: """
                collections:
                  - name: visits
                    read: own
                    write: tenant
                    protectedFields: [fee]
                """, source: "collections.yaml")
        try await withServer(kind, configure: { $0.collections = registry }) { client, _ in
            let ana = try await Fixtures.token(user: "ana")
            let ben = try await Fixtures.token(user: "ben")
            let sue = try await Fixtures.token(user: "sue", role: .supervisor)
            let visit = { (fee: String, at: Double, device: String, base: Int64?) in
                Fixtures.upsert("v1", ["fee": .string(fee)], at: at, collection: "visits", device: device, base: base)
            }
            _ = try await client.push([visit("10.00", 1, "dev-a", nil)], token: ana)
            _ = try await client.push([visit("20.00", 2, "dev-a", 1)], token: ana)
            // Ben may write Ana's visit but not read it: his stale change of the fee conflicts, and says no value.
            let bens = try await client.push([visit("30.00", 3, "dev-b", 1)], token: ben, device: "dev-b").results[0]
            #expect(bens.status == .conflict && bens.conflict?.fields == ["fee"])
            #expect(bens.conflict?.serverFields.isEmpty == true, "\(String(describing: bens.conflict))")
            // A supervisor, who reads every visit, and Ana, whose visit it is, are shown the server's fee.
            let sues = try await client.push([visit("40.00", 4, "dev-s", 1)], token: sue, device: "dev-s").results[0]
            #expect(sues.conflict?.serverFields == ["fee": "20.00"])
            let anas = try await client.push([visit("50.00", 5, "dev-a", 1)], token: ana).results[0]
            #expect(anas.conflict?.serverFields == ["fee": "20.00"])
            // The organizers' review holds what every conflicting write met.
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let review = try await client.send(.get, "/v1/conflicts?collection=visits", token: organizer)
            let conflicts = try JSONDecoder().decode(ConflictsResponse.self, from: review.body).conflicts
            #expect(conflicts.count == 3 && conflicts.allSatisfy { $0.serverFields == ["fee": "20.00"] }, "\(conflicts)")
        }
    }

    @Test("a bad collections file is refused with one line naming the problem")
    func badCollectionsFile() {
        let cases: [(String, String)] = [
            ("collections: [{name: notes}]", "standard collection"),
            ("collections: [{name: x, read: everyone}]", "read must be own, scope or tenant"),
            ("collections: [{name: x, read: scope}]", "needs a scopeField"),
            ("collections: [{name: x, colour: red}]", "unknown member colour"),
            ("collections: [{name: x}, {name: x}]", "declared twice"),
            ("collections: [{name: x, kind: reference, read: own}]", "not by owner"),
            ("collections: {name: x}", "must be a list"),
            ("{", "not valid YAML or JSON"),
            (#"{"collections": [{"name": "1x"}]}"#, "name must be"),
        ]
        for (text, problem) in cases {
            #expect(throws: CollectionsFileError.self, "\(text)") {
                try CollectionRegistry.standard(adding: text, source: "f.yaml")
            }
            do {
                _ = try CollectionRegistry.standard(adding: text, source: "f.yaml")
            } catch {
                let line = "\(error)"
                #expect(line.contains(problem) && line.hasPrefix("f.yaml") && !line.contains("\n"), "\(line)")
            }
        }
        let json = try? CollectionRegistry.standard(
            adding: #"{"collections": [{"name": "visits", "read": "own", "protectedFields": ["fee"]}]}"#, source: "f.json")
        #expect(json?["visits"]?.read == .own && json?["visits"]?.protectedFields == ["fee"])
    }

    @Test("a collections file gives a collection the files it takes, and refuses a bad limit or type with one line")
    func attachmentsInCollectionsFile() throws {
        // Given a collection of photos and plans, one of any file, and one of none,
        let registry = try CollectionRegistry.standard(
            adding: """
                collections:
                  - name: inspections
                    attachments: {maxBytes: 26214400, types: [image/jpeg, image/*, application/pdf, image/jpeg]}
                  - name: logs
                    attachments:
                      maxBytes: 2147483648
                      types: ["*/*"]
                  - name: visits
                """, source: "collections.yaml")
        // each takes what it declares, once each, and nothing else;
        #expect(registry["inspections"]?.attachments == AttachmentPolicy(maxBytes: 26_214_400, types: ["image/jpeg", "image/*", "application/pdf"]))
        #expect(registry["logs"]?.attachments == AttachmentPolicy(maxBytes: 2_147_483_648, types: ["*/*"]))
        #expect(registry["visits"]?.attachments == nil)
        let inspections = try #require(registry["inspections"])
        #expect(inspections.fileRefusal(type: "image/png", size: 26_214_400) == nil)
        #expect(inspections.fileRefusal(type: "image/png", size: 26_214_401)?.code == .fileTooLarge)
        #expect(inspections.fileRefusal(type: "application/zip", size: 1)?.code == .fileTypeRefused)
        #expect(inspections.fileRefusal(type: "imagex/png", size: 1)?.code == .fileTypeRefused)
        #expect(registry["logs"]?.fileRefusal(type: "application/zip", size: 1) == nil)
        #expect(registry["visits"]?.fileRefusal(type: "image/png", size: 1)?.message == "visits takes no files")
        // the standard collections keep theirs.
        #expect(registry["builds"]?.attachments == AttachmentPolicy(maxBytes: 52_428_800, types: ["image/*", "application/pdf"]))
        #expect(registry["attendance"]?.attachments == AttachmentPolicy(maxBytes: 10_485_760, types: ["image/*"]))
        #expect(registry["notes"]?.attachments == AttachmentPolicy(maxBytes: 52_428_800, types: ["*/*"]))
        #expect(["guests", "events", "checkins", "activities"].allSatisfy { registry[$0]?.attachments == nil })

        // A bad limit or type is refused with one line naming it.
        let cases: [(String, String)] = [
            ("collections: [{name: x, attachments: {maxBytes: 0, types: [image/png]}}]", "maxBytes must be a whole number of bytes from 1"),
            ("collections: [{name: x, attachments: {maxBytes: 2147483649, types: [image/png]}}]", "to 2147483648"),
            ("collections: [{name: x, attachments: {maxBytes: 25MiB, types: [image/png]}}]", "collections[0].attachments.maxBytes"),
            ("collections: [{name: x, attachments: {types: [image/png]}}]", "maxBytes must be"),
            ("collections: [{name: x, attachments: {maxBytes: 10}}]", "types must be a list"),
            ("collections: [{name: x, attachments: {maxBytes: 10, types: []}}]", "types must be a list"),
            ("collections: [{name: x, attachments: {maxBytes: 10, types: [Image/PNG]}}]", "types must list lower-case media types"),
            ("collections: [{name: x, attachments: {maxBytes: 10, types: [image]}}]", "types must list"),
            ("collections: [{name: x, attachments: {maxBytes: 10, types: [\"*/png\"]}}]", "types must list"),
            ("collections: [{name: x, attachments: {maxBytes: 10, types: [image/png], max: 3}}]", "unknown member max"),
            ("collections: [{name: x, attachments: yes}]", "attachments must be a mapping"),
        ]
        for (text, problem) in cases {
            do {
                _ = try CollectionRegistry.standard(adding: text, source: "f.yaml")
                Issue.record("\(text) was taken")
            } catch {
                let line = "\(error)"
                #expect(line.contains(problem) && line.hasPrefix("f.yaml") && !line.contains("\n"), "\(line)")
            }
        }
    }
}
