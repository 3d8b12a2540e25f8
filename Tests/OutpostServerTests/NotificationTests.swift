import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOConcurrencyHelpers
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@testable import OutpostServer

/// An organizer's notifications: settings through the API, and the watch announcing each episode once, over real
/// HTTP to a receiver on loopback, on both engines.
@Suite("Organizer notifications")
struct NotificationTests {
    /// A webhook receiver on loopback that keeps every body, or answers 500 while `failing`.
    final class Receiver: Sendable {
        private let state = NIOLockedValueBox<(bodies: [String], failing: Bool)>(([], false))
        private let task: Task<Void, any Error>
        let url: String

        var bodies: [String] { state.withLockedValue { $0.bodies } }
        func fail(_ failing: Bool) { state.withLockedValue { $0.failing = failing } }

        init() async throws {
            let router = Router()
            router.post("hook") { [state] request, _ -> Response in
                let body = String(buffer: try await request.body.collect(upTo: 1 << 20))
                let failing = state.withLockedValue { state -> Bool in
                    if !state.failing { state.bodies.append(body) }
                    return state.failing
                }
                return Response(status: failing ? .internalServerError : .ok)
            }
            router.post("moved") { _, _ -> Response in
                Response(status: .temporaryRedirect, headers: [.location: "/hook"])
            }
            let (task, port) = try await LoopbackApp.start(router, "the receiver")
            self.task = task
            url = "http://127.0.0.1:\(port)/hook"
        }

        func stop() async {
            task.cancel()
            _ = try? await task.value
        }
    }

    /// A watch of `storage` that posts for real, at the clock `now`.
    static func watch<S: SyncStorage>(_ storage: S, now: ManualNow) -> NotificationWatch<S> {
        NotificationWatch(
            storage: storage, clock: ManualClock(), now: { now.date }, logger: Fixtures.quietLogger,
            deliver: { url, body in try await NotificationWatch<S>.post(url: url, body: body) })
    }

    static func look<S: SyncStorage>(_ storage: S, now: ManualNow) async {
        await watch(storage, now: now).look()
    }

    static func decoded(_ body: String) throws -> [String: String] {
        try JSONDecoder().decode([String: String].self, from: Data(body.utf8))
    }

    @Test(
        "settings: organizers set, read and remove an event's URL; staff, bad URLs and other tenants are refused",
        arguments: StorageKind.allCases)
    func settings(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let setting = NotificationController<SQLiteStorage>.Setting(url: "https://hooks.slack.com/services/T/B/X", format: .slack)
            let put = try await client.send(.put, "/v1/events/gala/notifications", token: organizer, body: try Fixtures.json(setting))
            #expect(put.status == .ok)
            let got = try await client.send(.get, "/v1/events/gala/notifications", token: organizer)
            #expect(try JSONDecoder().decode([String: String].self, from: got.body) == ["url": setting.url, "format": "slack"])

            let staff = try await Fixtures.token()
            #expect(try await client.send(.get, "/v1/events/gala/notifications", token: staff).status == .forbidden)
            #expect(try await client.send(.put, "/v1/events/gala/notifications", token: staff, body: try Fixtures.json(setting)).status == .forbidden)
            let stranger = try await Fixtures.token(tenant: "globex", user: "gus", role: .organizer)
            #expect(try await client.send(.get, "/v1/events/gala/notifications", token: stranger).status == .notFound)
            for url in [
                "http://hooks.example.org/x", "ftp://127.0.0.1/x", "not a url", "https://" + String(repeating: "a", count: 2100),
                "https://169.254.169.254/latest", "https://10.0.0.7/hook", "https://192.168.1.1:8443/x", "https://hooks.example.org/x?token=1",
            ] {
                let bad = NotificationController<SQLiteStorage>.Setting(url: url, format: nil)
                let refused = try await client.send(.put, "/v1/events/gala/notifications", token: organizer, body: try Fixtures.json(bad))
                #expect(refused.status == .badRequest, "\(url)")
                #expect((try? JSONDecoder().decode(WireError.self, from: refused.body)) != nil)
            }
            #expect(try await client.send(.delete, "/v1/events/gala/notifications", token: organizer).status == .noContent)
            #expect(try await client.send(.get, "/v1/events/gala/notifications", token: organizer).status == .notFound)
            #expect(try await client.send(.delete, "/v1/events/gala/notifications", token: organizer).status == .notFound)
        }
    }

    @Test(
        "a device silent for 30 minutes is announced once, its return once; two servers announce once; a receiver that fails is tried again",
        arguments: StorageKind.allCases)
    func episodes(kind: StorageKind) async throws {
        let receiver = try await Receiver()
        let now = ManualNow(Fixtures.serverNow.date)
        do {
            try await withServer(kind, now: { now.date }) { client, storage in
                let organizer = try await Fixtures.token(user: "olga", role: .organizer)
                let ana = try await Fixtures.token(user: "ana", name: "Ana Staff")
                let setting = NotificationController<SQLiteStorage>.Setting(url: receiver.url, format: .json)
                _ = try await client.send(.put, "/v1/events/gala/notifications", token: organizer, body: try Fixtures.json(setting))
                _ = try await client.post("/v1/heartbeats", MonitorTests.beat("door-2"), token: ana)
                // Another event's device, with no notifications set, is never announced.
                _ = try await client.post("/v1/heartbeats", MonitorTests.beat("door-9", event: "fair"), token: ana)

                now.advance(seconds: 29 * 60)
                await Self.look(storage, now: now)
                #expect(receiver.bodies.isEmpty)

                // Past 30 minutes, while the receiver fails: nothing is lost, the next look sends it.
                now.advance(seconds: 2 * 60)
                receiver.fail(true)
                await Self.look(storage, now: now)
                #expect(receiver.bodies.isEmpty)
                receiver.fail(false)
                // Two servers look at once: one notice.
                async let first: Void = Self.look(storage, now: now)
                async let second: Void = Self.look(storage, now: now)
                _ = await (first, second)
                await Self.look(storage, now: now)
                #expect(receiver.bodies.count == 1)
                let stale = try Self.decoded(try #require(receiver.bodies.first))
                #expect(stale["type"] == "device_stale")
                #expect(stale["event"] == "gala")
                #expect(stale["staff"] == "Ana Staff")
                #expect(stale["text"]?.hasSuffix("hasn't synced in 30 minutes.") == true)
                #expect(stale["text"]?.hasPrefix("Ana Staff's device (") == true)

                // Back: announced once.
                _ = try await client.post("/v1/heartbeats", MonitorTests.beat("door-2"), token: ana)
                await Self.look(storage, now: now)
                await Self.look(storage, now: now)
                #expect(receiver.bodies.count == 2)
                #expect(try Self.decoded(receiver.bodies[1])["type"] == "device_back_online")

                // A persistent failure, while the device reports records waiting: announced once.
                let report = SyncFailureReport(deviceId: "door-2", failures: [MonitorTests.failure("n1")])
                _ = try await client.push([Fixtures.upsert("n1", ["n": 1], device: "door-2")], token: ana, device: "door-2")
                #expect(try await client.post("/v1/sync-failures", report, token: ana).status == .ok)
                await Self.look(storage, now: now)
                #expect(receiver.bodies.count == 2)
                _ = try await client.post("/v1/heartbeats", MonitorTests.beat("door-2", failed: 1), token: ana)
                await Self.look(storage, now: now)
                await Self.look(storage, now: now)
                #expect(receiver.bodies.count == 3)
                #expect(try Self.decoded(receiver.bodies[2])["type"] == "persistent_failure")
                // Its records synced, the episode ends; failing again later is a new one.
                _ = try await client.post("/v1/heartbeats", MonitorTests.beat("door-2"), token: ana)
                await Self.look(storage, now: now)
                _ = try await client.post("/v1/heartbeats", MonitorTests.beat("door-2", pending: 2), token: ana)
                await Self.look(storage, now: now)
                #expect(receiver.bodies.count == 4)
                #expect(try Self.decoded(receiver.bodies[3])["type"] == "persistent_failure")
                // Nothing in a notice but ids, the staff name and words: no token, no record's payload.
                #expect(!receiver.bodies.joined().contains(ana))
            }
        } catch {
            await receiver.stop()
            throw error
        }
        await receiver.stop()
    }

    @Test("a receiver's redirect is not followed: the notice is not taken")
    func noRedirects() async throws {
        let receiver = try await Receiver()
        let moved = receiver.url.replacingOccurrences(of: "/hook", with: "/moved")
        await #expect(throws: (any Error).self) {
            try await NotificationWatch<SQLiteStorage>.post(url: moved, body: Array("{}".utf8))
        }
        try await NotificationWatch<SQLiteStorage>.post(url: receiver.url, body: Array("{}".utf8))
        #expect(receiver.bodies == ["{}"])
        await receiver.stop()
    }

    @Test("the Slack format is an incoming-webhook message")
    func slack() throws {
        let notice = NotificationWatch<SQLiteStorage>.Notice(
            type: "device_stale", event: "gala", device: "abc", staff: "Ana", text: "Ana's device (abc) hasn't synced in 30 minutes.",
            at: Fixtures.time(0))
        let body = try JSONDecoder().decode([String: String].self, from: Data(try notice.body(.slack)))
        #expect(body == ["text": "gala: Ana's device (abc) hasn't synced in 30 minutes."])
    }

    @Test("outpost roster event sets and stops an event's notifications; a bad URL is one line on stderr")
    func cli() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-notify-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("server").path
        let port = String(try TestPostgres.freePort())
        let server = try await OutpostProcess.start(["serve", "--port", port, "--data-dir", data])
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        let token = try await OutpostProcess.run(["token", "--tenant", "acme", "--user", "olga", "--role", "organizer", "--data-dir", data])
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let connection = ["--server", "http://127.0.0.1:\(port)", "--token", token]

        let set = try await OutpostProcess.run(
            [
                "roster", "event", "--event", "gala", "--name", "Annual Gala", "--notify-url", "https://hooks.example.org/T/B/X",
                "--notify-format", "slack",
            ] + connection)
        #expect(set.status == 0, "\(set.stderr)")
        #expect(set.stdout.contains("event gala notifies slack"))
        #expect(!set.stdout.contains("hooks.example.org"))
        let transport = HTTPSyncTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!, token: token)
        let stored = try JSONDecoder().decode(
            [String: String].self, from: try await transport.exchange(.GET, path: "/v1/events/gala/notifications"))
        #expect(stored == ["url": "https://hooks.example.org/T/B/X", "format": "slack"])

        let bad = try await OutpostProcess.run(["roster", "event", "--event", "gala", "--notify-url", "http://hooks.example.org/x"] + connection)
        #expect(bad.status != 0)
        #expect(bad.stderr.split(separator: "\n").count == 1)
        #expect(bad.stderr.contains("https"))

        for _ in 0..<2 {
            let stop = try await OutpostProcess.run(["roster", "event", "--event", "gala", "--no-notify"] + connection)
            #expect(stop.status == 0, "\(stop.stderr)")
        }
        await #expect(throws: TransportError.self) { try await transport.exchange(.GET, path: "/v1/events/gala/notifications") }
        #expect(await server.stop() == 0)
    }

    @Test(
        "the monitor page sets and stops notifications, from its own form only, never showing the whole URL",
        arguments: StorageKind.allCases)
    func monitorForm(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            _ = try await client.push(
                [Fixtures.upsert("gala", ["name": "Annual Gala"], collection: EventRecord.collection, device: "admin")],
                token: organizer, device: "admin")
            try await storage.settle()
            let browser = MonitorSessionTests.Browser(client)
            _ = try await browser.signIn(token: organizer)
            let page = String(buffer: try await browser.send(.get, "/admin/monitor?event=gala").body)
            #expect(page.contains("Notifications: off"))
            let csrf = try #require(MonitorSessionTests.Browser.field("csrf", in: page))
            let hook = "https%3A%2F%2Fhooks.slack.com%2Fservices%2FT0%2FB0%2Fsecretpart"

            // Not from the page: refused, nothing kept.
            #expect(try await browser.send(.post, "/admin/notifications", form: "csrf=wrong&event=gala&action=set&url=\(hook)").status == .forbidden)
            #expect(
                try await browser.send(
                    .post, "/admin/notifications", form: "csrf=\(csrf)&event=gala&action=set&url=\(hook)", origin: "http://evil.test"
                )
                .status == .forbidden)
            #expect(try await storage.notification(tenant: "acme", event: "gala") == nil)

            let bad = try await browser.send(
                .post, "/admin/notifications", form: "csrf=\(csrf)&event=gala&action=set&url=http%3A%2F%2Fexample.org%2Fx")
            #expect(bad.status == .badRequest)
            #expect(String(buffer: bad.body).contains("Not saved: url must be https"))
            let unknown = try await browser.send(
                .post, "/admin/notifications", form: "csrf=\(csrf)&event=gala&action=set&format=teams&url=\(hook)")
            #expect(unknown.status == .badRequest)
            #expect(String(buffer: unknown.body).contains("Not saved: the format must be slack or json."))
            #expect(try await storage.notification(tenant: "acme", event: "gala") == nil)

            let saved = String(
                buffer: try await browser.send(
                    .post, "/admin/notifications", form: "csrf=\(csrf)&event=gala&action=set&format=&url=\(hook)"
                ).body)
            #expect(saved.contains("Notifications saved."))
            #expect(saved.contains("Notifications: slack to hooks.slack.com"))
            #expect(!saved.contains("secretpart"))
            #expect(
                try await storage.notification(tenant: "acme", event: "gala")
                    == EventNotification(tenant: "acme", event: "gala", url: "https://hooks.slack.com/services/T0/B0/secretpart", format: .slack))

            let stopped = String(buffer: try await browser.send(.post, "/admin/notifications", form: "csrf=\(csrf)&event=gala&action=stop").body)
            #expect(stopped.contains("Notifications stopped."))
            #expect(stopped.contains("Notifications: off"))
            #expect(try await storage.notification(tenant: "acme", event: "gala") == nil)
        }
    }
}
