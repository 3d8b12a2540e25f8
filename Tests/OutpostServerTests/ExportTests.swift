import Foundation
import Hummingbird
import HummingbirdTesting
import OutpostProtocol
import OutpostRecords
import Testing

@testable import OutpostServer

/// `GET /v1/export`: CSV that Python's csv module reads back, with who may export what, on both engines.
@Suite("Exports", .requires(.python))
struct ExportTests {
    /// The rows Python's csv module reads from `body`, header first.
    static func pythonRows(_ body: ByteBuffer) async throws -> [[String]] {
        let script =
            "import csv, io, json, sys; csv.field_size_limit(sys.maxsize); print(json.dumps(list(csv.reader(io.StringIO(sys.stdin.read(), newline='')))))"
        let result = try await Tool.run("python3", ["-c", script], input: Data(body.readableBytesView))
        #expect(result.status == 0, "\(result.output)")
        return try JSONDecoder().decode([[String]].self, from: Data(result.output.utf8))
    }

    /// `rows` as dictionaries by the header's names.
    static func records(_ rows: [[String]]) -> [[String: String]] {
        guard let header = rows.first else { return [] }
        return rows.dropFirst().map { Dictionary(uniqueKeysWithValues: zip(header, $0)) }
    }

    static func guest(_ id: String, event: String, name: String) -> Mutation {
        Fixtures.upsert(
            id, ["event_id": .string(event), "name": .string(name), "status": "registered"], collection: Guest.collection,
            device: "admin", key: "import:\(event):\(id)")
    }

    @Test("an event's check-ins: scan times, devices and the offline flag, that event's only", arguments: StorageKind.allCases)
    func checkIns(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let staff = try await Fixtures.token()
            let roster = ["g1", "g2", "g3"].flatMap { id in ["A", "B"].map { Self.guest(id, event: $0, name: "Guest \(id)") } }
            _ = try await client.push(roster, token: organizer, device: "admin")
            var offline = RecordRulesTests.scan("g2", event: "A", device: "door-2", at: 20)
            offline.fields["isOfflineEntry"] = true
            #expect(
                try await client.push([RecordRulesTests.scan("g1", event: "A", device: "door-1", at: 10)], token: staff, device: "door-1")
                    .results.map(\.status) == [.applied])
            #expect(try await client.push([offline], token: staff, device: "door-2").results.map(\.status) == [.applied])
            _ = try await client.push([RecordRulesTests.scan("g3", event: "B", device: "door-9", at: 30)], token: staff, device: "door-9")
            try await storage.settle()

            let answer = try await client.send(.get, "/v1/export?collection=checkins&scope=A&format=csv", token: organizer)
            #expect(answer.status == .ok)
            #expect(answer.headers[.contentType] == "text/csv; charset=utf-8")
            #expect(answer.headers[.contentDisposition] == "attachment; filename=\"checkins-A.csv\"")
            let rows = try await Self.pythonRows(answer.body)
            #expect(
                Array(rows.first?.prefix(10) ?? []) == [
                    "record_id", "scope", "version", "created_at", "updated_at", "received_at", "guest_id", "scanned_at",
                    "scanned_by", "isOfflineEntry",
                ])
            let records = Self.records(rows)
            #expect(records.map { $0["guest_id"] } == ["g1", "g2"])
            #expect(records.map { $0["scanned_by"] } == ["door-1", "door-2"])
            #expect(records.map { $0["scanned_at"] } == [Fixtures.time(10).iso8601, Fixtures.time(20).iso8601])
            #expect(records.map { $0["isOfflineEntry"] } == ["", "true"])
            #expect(records.allSatisfy { $0["scope"] == "A" && $0["event_id"] == "A" })
            // The device's times beside the server's.
            #expect(records.map { $0["updated_at"] } == [Fixtures.time(10).iso8601, Fixtures.time(20).iso8601])
            #expect(records.allSatisfy { $0["received_at"] == Fixtures.serverNow.iso8601 })
        }
    }

    @Test(
        "who may export: supervisors what they may read, organizers all; staff and other tenants nothing",
        arguments: StorageKind.allCases)
    func access(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            let ben = try await Fixtures.token(user: "ben")
            var offline = RecordRulesTests.attendance(.checkIn, user: "ben", at: 5)
            offline.fields["isOfflineEntry"] = true
            _ = try await client.push([RecordRulesTests.attendance(.checkIn, user: "ana", at: 1)], token: ana, device: "phone-a")
            _ = try await client.push([offline], token: ben, device: "phone-b")
            try await storage.settle()

            // Staff export nothing, not even their own: the answer is the JSON error.
            let refused = try await client.send(.get, "/v1/export?collection=attendance", token: ana)
            #expect(refused.status == .forbidden)
            #expect(try JSONDecoder().decode(WireError.self, from: refused.body).code == .forbidden)

            // A supervisor reads every member's attendance, offline entries marked.
            let supervisor = try await Fixtures.token(user: "sue", role: .supervisor)
            let attendance = Self.records(
                try await Self.pythonRows(try await client.send(.get, "/v1/export?collection=attendance", token: supervisor).body))
            // Whose each record is: its user column says, since its id names no one.
            #expect(Set(attendance.map { $0["user_id"] }) == ["ana", "ben"])
            #expect(attendance.allSatisfy { $0["record_id"]?.hasPrefix(Attendance.derivedIdPrefix) == true })
            #expect(attendance.first { $0["user_id"] == "ben" }?["isOfflineEntry"] == "true")
            #expect(attendance.first { $0["user_id"] == "ben" }?["latitude"] == "51.5")

            // Another tenant's organizer gets the header alone.
            let stranger = try await Fixtures.token(tenant: "other", user: "olga", role: .organizer)
            let theirs = try await Self.pythonRows(try await client.send(.get, "/v1/export?collection=attendance", token: stranger).body)
            #expect(theirs.count == 1)

            // Bad requests are 4xx with the JSON error; nothing else is served.
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            for uri in ["/v1/export?collection=attendance&format=xlsx", "/v1/export?collection=nope", "/v1/export"] {
                let answer = try await client.send(.get, uri, token: organizer)
                #expect((400..<500).contains(answer.status.code), "\(uri)")
                #expect((try? JSONDecoder().decode(WireError.self, from: answer.body)) != nil, "\(uri)")
            }
            #expect(try await client.send(.get, "/v1/export?collection=attendance", token: nil).status == .unauthorized)
        }
    }

    @Test(
        "an export of many pages, by count and by size, holds every live record once, in record id order, its columns from every page",
        arguments: StorageKind.allCases)
    func manyPages(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            // More records than a page holds, then records of 200 KB, several to a page's bytes.
            let small = (0..<(ExportController<SQLiteStorage>.pageLimit + 30)).map { index in
                Fixtures.upsert(String(format: "a%04d", index), ["n": .integer(Int64(index))], at: Double(index))
            }
            for start in stride(from: 0, to: small.count, by: 250) {
                let pushed = try await client.push(Array(small[start..<min(start + 250, small.count)]), token: ana)
                #expect(pushed.results.allSatisfy { $0.status == .applied })
            }
            let large = String(repeating: "x", count: 200 * 1024)
            let big = (0..<12).map { index in
                // The last one alone holds a field no other record has: a column only a late page can name.
                Fixtures.upsert(
                    "b\(index)", index == 11 ? ["text": .string(large), "late": "yes"] : ["text": .string(large)],
                    at: Double(1_000 + index))
            }
            for start in stride(from: 0, to: big.count, by: 4) {
                #expect(try await client.push(Array(big[start..<start + 4]), token: ana).results.allSatisfy { $0.status == .applied })
            }
            #expect(try await client.push([Fixtures.delete("a0007", at: 2_000, base: 1)], token: ana).results.map(\.status) == [.applied])
            try await storage.settle()
            let supervisor = try await Fixtures.token(user: "sue", role: .supervisor)
            let answer = try await client.send(.get, "/v1/export?collection=notes", token: supervisor)
            #expect(answer.status == .ok)
            let rows = try await Self.pythonRows(answer.body)
            #expect(rows.first == ["record_id", "scope", "version", "created_at", "updated_at", "received_at", "late", "n", "text"])
            let records = Self.records(rows)
            let expected = (small.map(\.recordId) + big.map(\.recordId)).filter { $0 != "a0007" }.sorted()
            #expect(records.map { $0["record_id"] ?? "" } == expected)
            #expect(records.filter { $0["text"] == large }.count == 12)
            #expect(records.first { $0["record_id"] == "b11" }?["late"] == "yes")
            #expect(records.first { $0["record_id"] == "a0529" }?["n"] == "529")
        }
    }

    @Test(
        "activities with their money fields; text a spreadsheet would run stays text; quotes and line breaks round-trip",
        arguments: StorageKind.allCases)
    func values(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            let notes = ["=HYPERLINK(\"http://evil\")", "a, b", "say \"hi\"", "line one\nline two", "-5 minutes"]
            let activities = notes.enumerated().map { index, note in
                Fixtures.upsert(
                    "act-\(index)",
                    [
                        "type": "home-visit", "date": "2026-11-20", "duration_minutes": 90, "travel_expense": "12.50",
                        "notes": .string(note),
                    ],
                    at: Double(index + 1), collection: Activity.collection)
            }
            #expect(try await client.push(activities, token: ana).results.allSatisfy { $0.status == .applied })
            // A deleted record is not exported (the delete has seen the money field it removes).
            let deleted = try await client.push(
                [Fixtures.delete("act-4", at: 10, collection: Activity.collection, base: 1)], token: ana)
            #expect(deleted.results.map(\.status) == [.applied], "\(deleted.results)")
            try await storage.settle()
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let rows = Self.records(
                try await Self.pythonRows(try await client.send(.get, "/v1/export?collection=activities", token: organizer).body))
            #expect(rows.map { $0["record_id"] } == ["act-0", "act-1", "act-2", "act-3"], "\(rows)")
            #expect(rows.map { $0["notes"] } == ["'=HYPERLINK(\"http://evil\")", "a, b", "say \"hi\"", "line one\nline two"])
            #expect(rows.allSatisfy { $0["travel_expense"] == "12.50" && $0["duration_minutes"] == "90" && $0["type"] == "home-visit" })
        }
    }

    @Test("the monitor links an event's downloads; they need the organizer's session", arguments: StorageKind.allCases)
    func monitorDownloads(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let staff = try await Fixtures.token()
            _ = try await client.push([Self.guest("g1", event: "gala", name: "Guest 1")], token: organizer, device: "admin")
            _ = try await client.push([RecordRulesTests.scan("g1", event: "gala", device: "door-1", at: 10)], token: staff, device: "door-1")
            try await storage.settle()

            let browser = MonitorSessionTests.Browser(client)
            // Signed out, a download is refused, as its JSON error.
            let refused = try await browser.send(.get, "/admin/export?collection=checkins&event=gala")
            #expect(refused.status == .unauthorized)
            #expect((try? JSONDecoder().decode(WireError.self, from: refused.body)) != nil)

            _ = try await browser.signIn(token: organizer)
            let page = String(buffer: try await browser.send(.get, "/admin/monitor?event=gala").body)
            #expect(page.contains(#"href="/admin/export?collection=checkins&amp;event=gala""#))
            let download = try await browser.send(.get, "/admin/export?collection=checkins&event=gala")
            #expect(download.status == .ok)
            #expect(download.headers[.contentDisposition] == "attachment; filename=\"checkins-gala.csv\"")
            let rows = Self.records(try await Self.pythonRows(download.body))
            #expect(rows.map { $0["guest_id"] } == ["g1"])
            #expect(rows.first?["scanned_by"] == "door-1")
        }
    }

    @Test(
        "the monitor shows the event's name and progress: checked in of the roster, and the last 5 minutes",
        arguments: StorageKind.allCases)
    func progress(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let staff = try await Fixtures.token()
            var cancelled = Self.guest("g4", event: "gala", name: "Guest 4")
            cancelled.fields["status"] = "cancelled"
            let roster = ["g1", "g2", "g3"].map { Self.guest($0, event: "gala", name: "Guest \($0)") } + [cancelled]
            _ = try await client.push(roster + [Self.guest("x1", event: "other", name: "Elsewhere")], token: organizer, device: "admin")
            _ = try await client.push(
                [Fixtures.upsert("gala", ["name": "Annual Gala"], collection: EventRecord.collection, device: "admin")],
                token: organizer, device: "admin")
            // One scan an hour ago, two in the last 5 minutes of the server's clock (an hour after the fixtures' start).
            let scans = [("g1", 10.0), ("g2", 3500.0), ("g3", 3590.0)].map { RecordRulesTests.scan($0.0, event: "gala", device: "door-1", at: $0.1) }
            #expect(try await client.push(scans, token: staff, device: "door-1").results.allSatisfy { $0.status == .applied })
            try await storage.settle()

            let json = try await client.send(.get, "/v1/monitor?event=gala", token: organizer)
            let monitor = try JSONDecoder().decode(MonitorResponse.self, from: json.body)
            #expect(monitor.progress == EventProgress(checkedIn: 3, onRoster: 3, lastFiveMinutes: 2))
            #expect(monitor.events.first { $0.id == "gala" }?.name == "Annual Gala")

            let browser = MonitorSessionTests.Browser(client)
            _ = try await browser.signIn(token: organizer)
            let page = String(buffer: try await browser.send(.get, "/admin/monitor?event=gala").body)
            #expect(page.contains("<h2>Annual Gala</h2>"))
            #expect(page.contains("3 of 3 guests checked in (100 %) · 2 in the last 5 minutes"))
            #expect(page.contains(#"<progress max="3" value="3""#))

            // A guest cancelled after checking in counts on neither side.
            var cancelledLater = Self.guest("g3", event: "gala", name: "Guest g3")
            cancelledLater.fields["status"] = "cancelled"
            cancelledLater.idempotencyKey += ":cancel"
            cancelledLater.clientTimestamp = Fixtures.time(3595)
            _ = try await client.push([cancelledLater], token: organizer, device: "admin")
            try await storage.settle()
            let after = try JSONDecoder().decode(
                MonitorResponse.self, from: try await client.send(.get, "/v1/monitor?event=gala", token: organizer).body)
            #expect(after.progress == EventProgress(checkedIn: 2, onRoster: 2, lastFiveMinutes: 1))
        }
    }
}
