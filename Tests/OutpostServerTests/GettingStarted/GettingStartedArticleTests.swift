import Foundation
import HummingbirdTesting
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting
import OutpostURLSession
import Testing

@testable import OutpostArticleApp
@testable import OutpostServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The article *Building the attendance screen*, followed literally: its code is `AttendanceApp`'s, and that app
/// syncs against the real server on a loopback socket, through URLSession, behind the project's fault proxy.
@Suite("Getting started article", .timeLimit(.minutes(5)))
struct GettingStartedArticleTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// Each line of `text`, trimmed, blank lines left out.
    static func lines(_ text: String) -> [String] {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    @Test("every Swift block of the article but the SwiftUI view is code of the app the test runs")
    func articleIsTheAppsCode() throws {
        let article = try String(
            contentsOf: Self.root.appendingPathComponent("Sources/OutpostApps/Documentation.docc/BuildingTheAttendanceScreen.md"),
            encoding: .utf8)
        let app = Self.lines(
            try String(contentsOf: Self.root.appendingPathComponent("Tests/ArticleApp/AttendanceApp.swift"), encoding: .utf8))
        let blocks: [String] = article.components(separatedBy: "```swift\n").dropFirst().map { tail in
            String(tail.components(separatedBy: "\n```")[0])
        }
        let checked = blocks.filter { !$0.contains("import SwiftUI") }
        #expect(checked.count >= 3, "the article's blocks: \(blocks.count)")
        for block in checked {
            let wanted = Self.lines(block)
            let found = app.indices.contains { (start: Int) -> Bool in
                let end = start + wanted.count
                return end <= app.count && Array(app[start..<end]) == wanted
            }
            #expect(found, "not in AttendanceApp.swift:\n\(block)")
        }
    }

    /// The app's identity provider: a fresh token each time it is asked, counted by how it was asked.
    final class IdentityProvider: CredentialsProvider, @unchecked Sendable {
        private let lock = NSLock()
        private var renewals = 0
        private var refusals = 0
        let issue: @Sendable () async throws -> String

        init(issue: @escaping @Sendable () async throws -> String) { self.issue = issue }

        var counts: (renewals: Int, refusals: Int) { lock.withLock { (renewals, refusals) } }

        func renewedToken(before expiring: String) async throws -> String? {
            lock.withLock { renewals += 1 }
            return try await issue()
        }

        func refreshedToken(after rejected: String) async throws -> String? {
            lock.withLock { refusals += 1 }
            return try await issue()
        }
    }

    static func token(_ role: Role, lifetime: Duration) async throws -> String {
        let name = role == .staff ? "Ana" : "Olu"
        return try await TokenAuthority(secret: Fixtures.secret).token(
            for: Identity(tenant: "acme", userId: name.lowercased(), role: role, name: name), lifetime: lifetime, now: Date())
    }

    @Test(
        "the article's app: checked in offline, relaunched, synced when the line returns, on the monitor with its site, its token renewed before expiry, signed out and wiped"
    )
    func articleAppSyncs() async throws {
        try await withServer(.sqlite, setup: .live, now: { Date() }) { @MainActor client, _ in
            let port = try #require(client.port)
            let proxy = try await FaultProxy.start(upstreamPort: port)
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-article-\(UUID())")
            defer { try? FileManager.default.removeItem(at: folder) }
            let server = try #require(URL(string: "http://127.0.0.1:\(proxy.port)"))
            // Tokens last two minutes: inside the five before expiry in which the device renews them.
            let identity = IdentityProvider { try await Self.token(.staff, lifetime: .seconds(120)) }

            // Offline from the start: the line to the server is down.
            proxy.inject(.drop)
            let app = try await AttendanceApp.launch(storeFolder: folder, server: server, identity: identity)
            #expect(await app.outpost.status.signIn == .signedOut)
            #expect(app.screen == nil)
            try await app.signIn(token: try await Self.token(.staff, lifetime: .seconds(120)))
            try await app.workAt(site: "site-7")
            let screen = try #require(app.screen)
            let watching = Task { await screen.run() }
            await screen.checkIn()
            #expect(screen.stateText.hasPrefix("Checked In at "), "\(screen.stateText)")
            try await eventually("the check-in pending on screen") {
                screen.history.first?.badge.accessibilityLabel == "Record pending synchronization"
            }
            watching.cancel()

            // The app is killed offline and opens again: the person is still signed in, the check-in still waits.
            await app.outpost.close()
            let relaunched = try await AttendanceApp.launch(storeFolder: folder, server: server, identity: identity)
            let again = try #require(relaunched.screen)
            let running = Task { await again.run() }
            defer { running.cancel() }
            try await eventually("the check-in still pending after the relaunch") {
                again.history.first?.badge.accessibilityLabel == "Record pending synchronization"
            }

            // The line returns: the runtime notices by itself, and the screen shows the check-in synced.
            proxy.inject(nil)
            do {
                try await eventually("the check-in synced") {
                    again.history.first?.badge.systemImage == "checkmark.icloud" && again.connection.text == "All records synced"
                }
            } catch {
                let status = await relaunched.outpost.status
                let stored = try await relaunched.outpost.openDevice.store.records(.all).map { "\($0.recordId) \($0.syncStatus)" }
                let shown = again.history.map { "\($0.entry.recordId) \($0.badge.systemImage)" }
                Issue.record("the runtime's status: \(status); the screen: \(again.connection.text) \(shown); stored: \(stored)")
                throw error
            }
            let renewed = identity.counts
            #expect(renewed.renewals >= 1 && renewed.refusals == 0, "\(renewed)")

            // The organizer sees the phone on the site's monitor, with its app's version.
            let organizer = try await Self.token(.organizer, lifetime: .seconds(3600))
            let monitor = try await bounded("the phone on the monitor, with nothing waiting") {
                while true {
                    // A connection of its own: the server closes one whose first request does not come within 10 s, as the
                    // test client's, opened at the start, may not have.
                    var request = URLRequest(url: try #require(URL(string: "http://127.0.0.1:\(port)/v1/monitor?event=site-7")))
                    request.setValue("Bearer \(organizer)", forHTTPHeaderField: "Authorization")
                    let (body, _) = try await URLSessionSyncTransport.uncachedSession.data(for: request)
                    let decoded = try JSONDecoder().decode(MonitorResponse.self, from: body)
                    // The heartbeat after the sync says nothing waits.
                    if decoded.devices.first?.pendingCount == 0 { return decoded }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(monitor.devices.map(\.staffName) == ["Ana"])
            #expect(monitor.devices.first?.appVersion == "attendance-ios/1.0")

            // Signed out with a wipe: nothing of Ana's is left on the phone.
            try await relaunched.signOut()
            #expect(await relaunched.outpost.status.signIn == .signedOut)
            let left = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix("user-") }
            #expect(left.isEmpty, "\(left)")
            await relaunched.outpost.close()
            try await proxy.stop()
        }
    }
}
