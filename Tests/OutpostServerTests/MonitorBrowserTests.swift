import Foundation
import HummingbirdTesting
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@testable import OutpostServer

/// The sync monitor page in a real headless browser (Debian's chromium and chromium-driver, driven by
/// selenium; `.ci/run` installs them). The test owns the server's clock and moves it when the browser
/// script asks, so the pills change at 10 and 30 minutes while the page refreshes itself.
@Suite("Sync monitor in a browser")
struct MonitorBrowserTests {
    static var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Browser/monitor_page.py").path
    }

    @Test(
        "sign-in, login and logout CSRF from another site refused, rows, pills at 10 and 30 minutes without a reload, the empty state, escaping, contrast, phone width",
        .requires(.python, .selenium, .chromium, .chromedriver), .timeLimit(.minutes(3)))
    func monitorPage() async throws {
        let clock = ManualNow(Fixtures.serverNow.date)
        try await withServer(.sqlite, setup: .live, now: { clock.date }) { client, _ in
            let port = try #require(client.port)
            let organizer = try await Fixtures.token(user: "olga", role: .organizer, name: "Olga")
            let ana = try await Fixtures.token(user: "ana", name: "<img src=x onerror=window.__xss=1>")
            let ben = try await Fixtures.token(user: "ben", name: "Ben Staff")

            // The event with its ops contact, two devices reporting, and one persistent failure.
            _ = try await client.push(
                [Fixtures.upsert("gala", ["name": "Gala", "ops_contact": "ops@example.org"], collection: EventRecord.collection, device: "admin")],
                token: organizer, device: "admin")
            for (device, token) in [("phone-a", ana), ("phone-b", ben)] {
                let beat = Heartbeat(
                    deviceId: device, event: "gala", pendingCount: 2, failedCount: 0, lastRosterFetch: Fixtures.time(0),
                    appVersion: "test/1")
                #expect(try await client.post("/v1/heartbeats", beat, token: token).status == .ok)
            }
            let failure = SyncFailure(
                collection: "notes", recordId: "n-lost", firstAttempt: Fixtures.time(-26 * 3600), lastError: "The server could not be reached")
            #expect(try await client.post("/v1/sync-failures", SyncFailureReport(deviceId: "phone-b", failures: [failure]), token: ben).status == .ok)

            // Another tenant's organizer, whose token and sign-in link another site tries to sign this browser in with.
            let other = try await Fixtures.token(tenant: "globex", user: "gil", role: .organizer, name: "Gil")
            let code = try JSONDecoder().decode(SignInCode.self, from: try await client.send(.post, "/v1/sign-in-codes", token: other).body)
            let base = "http://127.0.0.1:\(port)"
            let browser = try await BrowserScript(
                arguments: [
                    Self.script, "--url", base, "--organizer", organizer, "--staff", ana, "--other-organizer", other,
                    "--other-link", base + code.path,
                ])
            try await browser.expect("STEP stale")
            clock.advance(seconds: 10 * 60 + 30)
            browser.proceed()
            try await browser.expect("STEP offline")
            clock.advance(seconds: 20 * 60)
            browser.proceed()
            try await browser.expect("DONE")
            #expect(await browser.wait() == 0, "\(browser.errors)")
        }
    }
}

/// The selenium script as a process: lines from its stdout, answers on its stdin.
struct BrowserScript {
    let child: RunningChild

    init(arguments: [String]) async throws {
        child = try await RunningChild("/usr/bin/env", ["python3"] + arguments)
    }

    var errors: String { child.stderr }

    /// Waits for `line` on the script's stdout; fails with its stderr if it exits first.
    func expect(_ line: String, timeout: Duration = .seconds(90)) async throws {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while ContinuousClock.now < deadline {
            if child.stdout.contains(line) { return }
            if !child.isRunning {
                throw TestSetupError("the browser script ended before '\(line)': \(errors)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestSetupError("no '\(line)' from the browser script within \(timeout): \(errors)")
    }

    func proceed() { child.send("go\n") }

    func wait() async -> Int32 { await child.wait() }
}
