import Foundation
import Hummingbird
import HummingbirdTesting
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Prometheus
import Testing

@testable import OutpostServer

/// Heartbeats, the sync monitor's data, persistent-failure reports and metrics, through the real router.
@Suite("Sync monitor")
struct MonitorTests {
    static func beat(_ device: String, event: String? = "gala", pending: Int = 0, failed: Int = 0) -> Heartbeat {
        Heartbeat(
            deviceId: device, event: event, pendingCount: pending, failedCount: failed,
            lastRosterFetch: Fixtures.time(0), appVersion: "test/1")
    }

    @Test(
        "devices report under tenant-scoped fingerprints; the monitor shows ok, stale and offline by the server's clock",
        arguments: StorageKind.allCases)
    func heartbeatsAndStates(kind: StorageKind) async throws {
        let clock = ManualNow(Fixtures.serverNow.date)
        try await withServer(kind, now: { clock.date }) { client, _ in
            let ana = try await Fixtures.token(user: "ana", name: "Ana Staff")
            let ben = try await Fixtures.token(user: "ben", name: "Ben Staff")
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let other = try await Fixtures.token(tenant: "globex", user: "gus", name: "Gus")
            // The monitor lists the events organizers created, by name (an unnamed one by its id), never one a
            // heartbeat names.
            _ = try await client.push(
                [
                    Fixtures.upsert("gala", ["name": "Gala"], collection: EventRecord.collection, device: "admin"),
                    Fixtures.upsert("fair", ["ops_contact": "ops@example.org"], collection: EventRecord.collection, device: "admin"),
                ],
                token: organizer, device: "admin")

            let a = try JSONDecoder().decode(
                HeartbeatResponse.self, from: try await client.post("/v1/heartbeats", Self.beat("phone-1", pending: 3), token: ana).body)
            clock.advance(seconds: 11 * 60)
            _ = try await client.post("/v1/heartbeats", Self.beat("phone-2", failed: 1), token: ben)
            // The same physical device at another tenant's event: another fingerprint, never shown here.
            let g = try JSONDecoder().decode(
                HeartbeatResponse.self, from: try await client.post("/v1/heartbeats", Self.beat("phone-1"), token: other).body)
            #expect(a.fingerprint != g.fingerprint)
            #expect(!a.fingerprint.contains("phone"))

            var monitor = try await monitor(client, organizer)
            #expect(monitor.devices.map(\.staffName) == ["Ben Staff", "Ana Staff"])
            #expect(monitor.devices.map(\.status) == [.ok, .stale])
            #expect(monitor.devices[1].pendingCount == 3)
            #expect(monitor.devices[1].lastRosterFetch == Fixtures.time(0))
            #expect(monitor.devices[0].failedCount == 1)
            #expect(monitor.emptyState == nil)
            #expect(monitor.events == [MonitorEvent(id: "fair", name: "fair"), MonitorEvent(id: "gala", name: "Gala")])

            clock.advance(seconds: 30 * 60)
            monitor = try await self.monitor(client, organizer)
            #expect(monitor.devices.map(\.status) == [.offline, .offline])
            #expect(monitor.emptyState == MonitorResponse.emptyStateMessage)

            // Staff cannot read the monitor; a heartbeat with bad input is refused whole.
            #expect(try await client.send(.get, "/v1/monitor?event=gala", token: ana).status == .forbidden)
            let bad = try await client.post("/v1/heartbeats", Self.beat("../etc"), token: ana)
            #expect(bad.status == .badRequest)
            #expect(bad.wireError?.code == .invalidRequest)
        }
    }

    func monitor(_ client: some TestClientProtocol, _ token: String, event: String = "gala") async throws -> MonitorResponse {
        let response = try await client.send(.get, "/v1/monitor?event=\(event)", token: token)
        #expect(response.status == .ok)
        return try JSONDecoder().decode(MonitorResponse.self, from: response.body)
    }

    @Test(
        "the monitor shows the bytes of photos each device has waiting to upload, as its last heartbeat said; a bound past any device is refused",
        arguments: StorageKind.allCases)
    func pendingUploads(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let ana = try await Fixtures.token(user: "ana")
            let ben = try await Fixtures.token(user: "ben")
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            var uploading = Self.beat("phone-1", pending: 2)
            uploading.pendingUploadBytes = 12_400_000
            #expect(try await client.post("/v1/heartbeats", uploading, token: ana).status == .ok)
            #expect(try await client.post("/v1/heartbeats", Self.beat("phone-2"), token: ben).status == .ok)
            let board = try await monitor(client, organizer)
            #expect(board.devices.map { $0.pendingUploadBytes ?? -1 }.sorted() == [0, 12_400_000])
            let page = try MonitorPages().body(board, refresh: .seconds(30))
            #expect(page.components(separatedBy: "sync-monitor-upload-bytes").count == 2, "\(page)")
            #expect(page.contains(">12.4 MB of files to upload</span>"), "\(page)")
            // Once they are up, the device says so, and the row says nothing of uploads.
            uploading.pendingUploadBytes = 0
            #expect(try await client.post("/v1/heartbeats", uploading, token: ana).status == .ok)
            #expect(!(try MonitorPages().body(try await monitor(client, organizer), refresh: .seconds(30))).contains("to upload"))
            uploading.pendingUploadBytes = 2_000_000_000_000
            #expect(try await client.post("/v1/heartbeats", uploading, token: ana).status == .badRequest)
        }
    }

    @Test("check-ins per 5 minutes per device, by the scanning device's fingerprint", arguments: StorageKind.allCases)
    func checkInChart(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let staff = try await Fixtures.token()
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            _ = try await client.push(
                (0..<3).map { Fixtures.upsert("g\($0)", ["name": "G", "event_id": "gala"], collection: Guest.collection, device: "admin") },
                token: organizer, device: "admin")
            // Scans 50, 40 and 2 minutes before the server's now.
            let offsets: [Double] = [50 * 60, 40 * 60, 2 * 60]
            var scans: [Mutation] = []
            for (guest, minutesBefore) in offsets.enumerated() {
                scans.append(RecordRulesTests.scan("g\(guest)", device: "door-1", at: 3600 - minutesBefore))
            }
            _ = try await client.push(scans, token: staff, device: "door-1")
            _ = try await client.post("/v1/heartbeats", Self.beat("door-1"), token: staff)
            try await storage.settle()
            let monitor = try await monitor(client, organizer)
            let counts = try #require(monitor.devices.first?.checkIns)
            // Buckets from 09:05 to 10:00 (server time 10:00): scans at 09:10, 09:20 and 09:58.
            #expect(counts == [0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0])
        }
    }

    static func failure(
        _ recordId: String, collection: String = "notes", error: String = "The server could not be reached"
    ) -> SyncFailure {
        SyncFailure(collection: collection, recordId: recordId, firstAttempt: Fixtures.time(-26 * 3600), lastError: error)
    }

    @Test(
        "persistent failures: own records only, counted once, never half-recorded; listed on the monitor and counted in /metrics",
        arguments: StorageKind.allCases)
    func persistentFailures(kind: StorageKind) async throws {
        let metrics = ServerMetrics()
        try await withServer(kind, metrics: metrics) { client, _ in
            let ana = try await Fixtures.token(user: "ana")
            let ben = try await Fixtures.token(user: "ben")
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            _ = try await client.post("/v1/heartbeats", Self.beat("phone-1"), token: ana)
            // ben's device wrote n9; ana's never did.
            _ = try await client.push([Fixtures.upsert("n9", ["t": "x"], device: "phone-9")], token: ben, device: "phone-9")

            let report = SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("n1"), Self.failure("n2")])
            var response = try await client.post("/v1/sync-failures", report, token: ana)
            var receipt = try JSONDecoder().decode(SyncFailureReceipt.self, from: response.body)
            #expect(receipt == SyncFailureReceipt(recorded: 2, alreadyKnown: 0, escalationEnabled: true))
            response = try await client.post("/v1/sync-failures", report, token: ana)
            receipt = try JSONDecoder().decode(SyncFailureReceipt.self, from: response.body)
            #expect(receipt == SyncFailureReceipt(recorded: 0, alreadyKnown: 2, escalationEnabled: true))

            // Someone else's record refuses the whole report: n3 is not recorded either.
            response = try await client.post(
                "/v1/sync-failures", SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("n3"), Self.failure("n9")]),
                token: ana)
            #expect(response.status == .forbidden)
            #expect(response.wireError?.code == .forbidden)
            for bad in [
                SyncFailureReport(deviceId: "phone-1", failures: []),
                SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("n4", collection: "nope")]),
                SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("../n5")]),
                SyncFailureReport(deviceId: "bad id", failures: [Self.failure("n6")]),
                // A NUL, which PostgreSQL's text refuses, after a good failure: neither is kept.
                SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("n7"), Self.failure("n8", error: "bad\u{0}byte")]),
                SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("n7", error: "")]),
                SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("n7", error: String(repeating: "x", count: 1001))]),
                // One character of 1,501 scalars.
                SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("n7", error: "e" + String(repeating: "\u{301}", count: 1500))]),
            ] {
                let refused = try await client.post("/v1/sync-failures", bad, token: ana)
                #expect(refused.status.code / 100 == 4)
                #expect(refused.wireError != nil)
            }
            #expect(try await client.post("/v1/sync-failures", report, token: nil).status == .unauthorized)

            let monitor = try await monitor(client, organizer)
            #expect(monitor.persistentFailures.map(\.recordId) == ["n1", "n2"])
            #expect(monitor.devices.first?.persistentFailures == 2)
            let text = String(decoding: try await client.send(.get, "/metrics", token: nil).body.readableBytesView, as: UTF8.self)
            #expect(text.contains("outpost_persistent_sync_failures_total 2"))
            #expect(text.contains(#"outpost_devices{state="ok"} 1"#))
            #expect(text.contains(#"outpost_mutations_total{status="applied"} 1"#))
            #expect(text.contains("outpost_http_request_duration_seconds_bucket"))
        }
    }

    @Test(
        "a refused record is reported as refused: its own counter and a warning, never a persistent failure, a page or a notice",
        arguments: StorageKind.allCases)
    func rejectedRecords(kind: StorageKind) async throws {
        let metrics = ServerMetrics()
        try await withServer(kind, metrics: metrics) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            var beat = Self.beat("phone-1")
            beat.failedCount = 0
            beat.rejectedCount = 1
            _ = try await client.post("/v1/heartbeats", beat, token: ana)

            // Given a device reporting a refusal made a minute ago and a record waiting for over a day.
            var refused = Self.failure("n1", error: "guest g1's registration is cancelled")
            refused.kind = .rejected
            refused.firstAttempt = Fixtures.time(-60)
            var waiting = Self.failure("n2")
            waiting.kind = .persistent
            let report = SyncFailureReport(deviceId: "phone-1", failures: [refused, waiting])
            let receipt = try JSONDecoder().decode(
                SyncFailureReceipt.self, from: try await client.post("/v1/sync-failures", report, token: ana).body)
            #expect(receipt == SyncFailureReceipt(recorded: 2, alreadyKnown: 0, escalationEnabled: true))

            // Then only the waiting one is a persistent failure, on the monitor and in /metrics.
            let board = try await monitor(client, organizer)
            #expect(board.persistentFailures.map(\.recordId) == ["n2"])
            #expect(board.devices.first?.persistentFailures == 1)
            // The refused one is listed apart, with the server's reason, and counted on its device's row.
            #expect(board.refusedRecords.map(\.recordId) == ["n1"])
            #expect(board.refusedRecords.first?.lastError == "guest g1's registration is cancelled")
            #expect(board.devices.first?.rejectedCount == 1 && board.devices.first?.failedCount == 0)
            let page = try MonitorPages().body(board, refresh: .seconds(30))
            #expect(page.contains("Records refused by the server") && page.contains("(1 refused)"), "\(page)")
            #expect(page.contains("notes/n1 — guest g1&#39;s registration is cancelled; the staff member resolves it on the device"), "\(page)")
            let text = String(decoding: try await client.send(.get, "/metrics", token: nil).body.readableBytesView, as: UTF8.self)
            #expect(text.contains("outpost_persistent_sync_failures_total 1"))
            #expect(text.contains("outpost_rejected_records_total 1"))
            #expect(try await storage.syncFailures(tenant: "acme").map(\.kind) == [.persistent, .rejected])

            // A report again is known; the refused record later waiting too long is a persistent failure then.
            var later = refused
            later.kind = nil
            let again = try JSONDecoder().decode(
                SyncFailureReceipt.self,
                from: try await client.post("/v1/sync-failures", SyncFailureReport(deviceId: "phone-1", failures: [refused, later]), token: ana)
                    .body)
            #expect(again == SyncFailureReceipt(recorded: 1, alreadyKnown: 1, escalationEnabled: true))
            let after = try await monitor(client, organizer)
            #expect(after.persistentFailures.map(\.recordId).sorted() == ["n1", "n2"])

            // An unknown kind, or a null one, is refused whole.
            for body in [
                #"{"deviceId":"phone-1","failures":[{"collection":"notes","recordId":"n3","firstAttempt":"2026-11-21T09:00:00.000Z","lastError":"x","kind":"lost"}]}"#,
                #"{"deviceId":"phone-1","failures":[{"collection":"notes","recordId":"n3","firstAttempt":"2026-11-21T09:00:00.000Z","lastError":"x","kind":null}]}"#,
            ] {
                let answer = try await client.send(.post, "/v1/sync-failures", token: ana, body: ByteBuffer(string: body))
                #expect(answer.status == .badRequest, "\(body)")
            }
        }
    }

    @Test("escalation switched off on the server: reports are acknowledged and not recorded")
    func escalationOff() async throws {
        try await withServer(.sqlite, configure: { $0.escalationEnabled = false }) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            let response = try await client.post(
                "/v1/sync-failures", SyncFailureReport(deviceId: "phone-1", failures: [Self.failure("n1")]), token: ana)
            #expect(try JSONDecoder().decode(SyncFailureReceipt.self, from: response.body).escalationEnabled == false)
            #expect(try await storage.syncFailures(tenant: "acme").isEmpty)
        }
    }

    @Test("device state: stale at 10 minutes, offline at 30")
    func deviceStates() {
        let seen = Fixtures.now
        #expect(DeviceState(lastSeen: seen, now: Fixtures.time(9 * 60 + 59)) == .ok)
        #expect(DeviceState(lastSeen: seen, now: Fixtures.time(10 * 60)) == .stale)
        #expect(DeviceState(lastSeen: seen, now: Fixtures.time(29 * 60 + 59)) == .stale)
        #expect(DeviceState(lastSeen: seen, now: Fixtures.time(30 * 60)) == .offline)
    }

    @Test("the ops contact becomes a mailto, tel or https link, and nothing else")
    func contactLinks() {
        #expect(MonitorPages.contactLink("ops@example.org")?.hasPrefix("mailto:ops@example.org") == true)
        #expect(MonitorPages.contactLink("+44 20 7946 0000") == "tel:+442079460000")
        #expect(MonitorPages.contactLink("https://chat.example.org/ops") == "https://chat.example.org/ops")
        #expect(MonitorPages.contactLink("javascript:alert(1)") == nil)
    }

    @Test("the page escapes everything it shows")
    func escaping() async throws {
        let hostile = #"<script>alert("x")</script> & 'quotes'"#
        let device = MonitorDevice(
            fingerprint: "fp", staffName: hostile, status: .stale, lastSeen: Fixtures.now, lastRosterFetch: nil,
            pendingCount: 1, failedCount: 2, appVersion: hostile, checkIns: Array(repeating: 1, count: 12), persistentFailures: 0)
        let failure = PersistentFailure(
            fingerprint: "fp", staffName: hostile, collection: "notes", recordId: "n1", firstAttempt: Fixtures.now,
            lastError: hostile, reportedAt: Fixtures.now)
        var silent = device
        silent.fingerprint = "fp2"
        silent.status = .offline
        let monitor = MonitorResponse(
            event: "gala", events: [MonitorEvent(id: "gala", name: hostile)], generatedAt: Fixtures.time(700),
            devices: [device, silent], emptyState: nil, opsContact: nil, persistentFailures: [failure], bucketStart: Fixtures.now)
        let html = try MonitorPages().page(monitor, refresh: .seconds(15))
        #expect(!html.contains("<script>alert"))
        #expect(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;quotes&#39;"))
        // The event by its name, picked by its id.
        #expect(html.contains("<title>Sync monitor · &lt;script&gt;"))
        #expect(html.contains(#"<option value="gala" selected>&lt;script&gt;"#))
        // Both pills of a device not heard from carry the one test id, with their state.
        #expect(html.components(separatedBy: #"data-testid="sync-monitor-stale-pill" data-state="stale""#).count == 2)
        #expect(html.components(separatedBy: #"data-testid="sync-monitor-stale-pill" data-state="offline""#).count == 2)
        #expect(MonitorPages.escape(#"<a href="x">'&'</a>"#) == "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;")
        // A quote carrying a combining mark is still a quote to the browser; other text passes unchanged.
        #expect(MonitorPages.escape("\"\u{0301}x") == "&quot;\u{0301}x")
        #expect(MonitorPages.escape("Zoë 漢 😀") == "Zoë 漢 😀")
    }

    @Test("/metrics passes promtool check metrics", .requires(.promtool))
    func promtool() async throws {
        try await withServer(.sqlite) { client, _ in
            let ana = try await Fixtures.token(user: "ana")
            _ = try await client.push([Fixtures.upsert("n1", ["t": "x"])], token: ana)
            _ = try await client.post("/v1/heartbeats", Self.beat("phone-1"), token: ana)
            let body = try await client.send(.get, "/metrics", token: nil).body
            let result = try await Tool.run("promtool", ["check", "metrics"], input: Data(body.readableBytesView))
            #expect(result.status == 0, "\(result.output)")
        }
    }
}

@Suite("Alert rules")
struct AlertRulesTests {
    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("deploy/prometheus")
    }

    @Test("deploy/prometheus/alerts.yml passes promtool check rules and its unit tests", .requires(.promtool))
    func rules() async throws {
        let check = try await Tool.run("promtool", ["check", "rules", "alerts.yml"], in: Self.directory)
        #expect(check.status == 0, "\(check.output)")
        let test = try await Tool.run("promtool", ["test", "rules", "alerts.test.yml"], in: Self.directory)
        #expect(test.status == 0, "\(test.output)")
    }
}
