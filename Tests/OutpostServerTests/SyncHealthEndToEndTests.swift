import Foundation
import OutpostProtocol
import OutpostRecords
import Testing

/// Heartbeats and persistent-failure escalation with real processes: a server's JSON log line, its
/// metrics, and a device's notice that will not be dismissed.
@Suite("Sync health end to end")
struct SyncHealthEndToEndTests {
    @Test(
        "a refusal is reported as one (a WARNING, its own counter); a record failing too long is escalated once: one JSON ERROR line, counted once, a notice that stays until it syncs; logs hold no token, payload or name"
    )
    func escalation() async throws {
        let today = try await settledToday()
        let session = try AppSession()
        try await session.startServer()
        let device = try await session.device("phone-ana", user: "ana")
        let token = try await session.token(user: "ana")

        // The server refuses this record (no coordinates): it is set aside, and reported for the organizer as refused.
        let put = try await device([
            "device", "put", "attendance", "ana.\(today).in", "action=check_in", "day=\(today)", "note=S3CRET-PAYLOAD",
        ])
        #expect(put.stdout.contains("refused by the server"), "\(put.stdout) \(put.stderr)")
        var status = try await device(["device", "status", "--escalate-after", "1s"])
        #expect(status.stdout.contains("attention: 1 record refused by the server"), "\(status.stdout)")
        status = try await device(["device", "status", "--escalate-after", "1s"])

        var metrics = try await session.text("/metrics")
        #expect(metrics.contains("outpost_rejected_records_total 1"), "\(metrics)")
        #expect(metrics.contains("outpost_persistent_sync_failures_total 0"), "\(metrics)")
        #expect(try await session.get("/v1/monitor", as: MonitorResponse.self).persistentFailures.isEmpty)

        // A sync sends a heartbeat: the monitor shows the device under its fingerprint, with its staff name. (A
        // command waits for its heartbeat at most a second as it ends; on a loaded machine the next sync sends it.)
        var devices: [MonitorDevice] = []
        for _ in 0..<5 where devices.isEmpty {
            _ = try await device(["device", "sync"])
            devices = try await session.get("/v1/monitor", as: MonitorResponse.self).devices
        }
        #expect(devices.map(\.staffName) == ["Ana"])
        // The refused record is counted as refused, not as failed; it is listed apart, with the server's reason.
        #expect(devices.first?.failedCount == 0 && devices.first?.rejectedCount == 1)
        #expect(try await session.get("/v1/monitor", as: MonitorResponse.self).refusedRecords.count == 1)
        #expect(devices.first?.fingerprint.contains("phone") == false)

        // A record that cannot reach the server: past the threshold (1 s here, 24 h by default) the notice
        // comes up, from the record's making, with no sync tried; it cannot be dismissed.
        let logs = await session.stopServer()
        _ = try await device(["device", "put", "notes", "n1", "text=offline"])
        try await Task.sleep(for: .milliseconds(1200))
        let notice = try await device(["device", "notice", "--escalate-after", "1s"])
        #expect(notice.stdout.contains("notice: 1 record has not synced for over 1 second"), "\(notice.stdout)")
        #expect(notice.stdout.contains("Check that the device has a network connection"))
        let refused = try await device(["device", "notice", "--dismiss", "--escalate-after", "1s"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("This notice stays until those records sync"))
        try await session.startServer()
        // A device whose record waited a day while the server was reachable (it answered with errors) reports it
        // as persistent: the one kind that pages. Sent as the device sends it.
        let waited = SyncFailure(
            collection: "notes", recordId: "n1", firstAttempt: Timestamp(Date().addingTimeInterval(-26 * 3600)),
            lastError: "The server answered 503", kind: .persistent)
        #expect(try await session.post("/v1/sync-failures", SyncFailureReport(deviceId: "phone-ana", failures: [waited]), token: token) == 200)
        metrics = try await session.text("/metrics")
        #expect(metrics.contains("outpost_persistent_sync_failures_total 1"), "\(metrics)")
        #expect(try await session.get("/v1/monitor", as: MonitorResponse.self).persistentFailures.map(\.recordId) == ["n1"])
        #expect(try await device(["device", "sync"]).stdout.contains("1 synced, 0 failed"))

        let later = await session.stopServer()
        let refusals = logs.split(separator: "\n").filter { $0.contains("Rejected Record") }
        #expect(refusals.count == 1, "\(logs)")
        let refusal = try JSONSerialization.jsonObject(with: Data(refusals[0].utf8)) as? [String: Any]
        #expect(refusal?["severity"] as? String == "WARNING")
        #expect(refusal?["collection"] as? String == "attendance")
        #expect(!logs.contains("Persistent Sync Failure"), "\(logs)")
        let lines = later.split(separator: "\n").filter { $0.contains("Persistent Sync Failure") }
        #expect(lines.count == 1, "\(later)")
        let entry = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any]
        #expect(entry?["severity"] as? String == "ERROR")
        #expect(entry?["collection"] as? String == "notes")
        for secret in [token, "S3CRET-PAYLOAD", "phone-ana", "ana.\(today)", "Ana"] {
            #expect(!(logs + later).contains(secret), "the server's log holds \(secret)")
        }
    }
}
