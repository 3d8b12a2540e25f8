import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

/// The model code of the article *Building the attendance screen*, run as the article's view would run it.
@MainActor
@Suite("Getting started")
struct GettingStartedTests {
    struct FixAtTheOffice: LocationProvider {
        func currentFix() async -> LocationFix? { LocationFix(latitude: 51.5072, longitude: -0.1276, accuracy: 8) }
    }

    func makeAttendanceScreen(device: Device) throws -> AttendanceScreen {
        AttendanceScreen(log: try AttendanceLog(device: device, location: FixAtTheOffice(), timeZone: TimeZone(identifier: "UTC")!))
    }

    @Test("the article's screen, opened from a device: check in offline, then synced by run()")
    func article() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-article-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        // A token naming the user: the attendance log is that user's.
        let claims = #"{"tenant":"acme","sub":"ana","role":"staff","name":"Ana"}"#
        let token = "e30." + Data(claims.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "") + ".sig"
        try await Device.initialize(store: store, server: URL(string: "http://127.0.0.1:9")!, token: token, deviceId: "phone-1")
        let server = InMemoryTransport(server: InMemoryServer())
        server.isOnline = false
        let now = ManualNow()
        let device = try await Device.open(store: store, transport: server, clock: ManualClock(), now: now.closure)

        let screen = try makeAttendanceScreen(device: device)
        let running = Task { await screen.run() }
        defer { running.cancel() }
        await device.engine.probe()
        await screen.checkIn()
        #expect(screen.stateText == "Checked In at 09:00")
        #expect(screen.history.first?.badge.accessibilityLabel == "Record pending synchronization")
        #expect(screen.connection.text == "1 record waiting to sync")

        server.isOnline = true
        await device.engine.setOnline(true)
        try await eventually("the check-in shown synced") {
            screen.history.first?.badge.systemImage == "checkmark.icloud" && screen.connection.text == "All records synced"
        }
    }

    @Test("from the main actor, an app configures its device and names its event; the heartbeat names it for the event's monitor")
    func configureAndNameTheEvent() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-article-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        try await Device.initialize(store: store, server: URL(string: "http://127.0.0.1:9")!, token: "t", deviceId: "door-1")
        let server = InMemoryServer()
        let threshold = Duration.seconds(3600)
        let device = try await Device.open(store: store, transport: InMemoryTransport(server: server)) { configuration in
            configuration.escalation.threshold = threshold
            configuration.recordIdSettlements = [.attendance]
        }
        #expect(device.engine.configuration.escalation.threshold == threshold)
        await device.engine.probe()

        try await device.engine.setCurrentEvent("gala")
        #expect(try await device.engine.currentEvent() == "gala")
        await device.engine.awaitHeartbeat(upTo: .seconds(60))
        #expect(await server.heartbeats.last?.event == "gala")
        await #expect(throws: ClientError.self) { try await device.engine.setCurrentEvent("no spaces allowed") }
        try await device.engine.setCurrentEvent(String?.none)
        #expect(try await device.engine.currentEvent() == nil)
    }
}
