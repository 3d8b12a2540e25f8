import Foundation
import OutpostProtocol
import Testing

/// The field apps' promises through the real CLI: a save that does not wait on a server that never answers,
/// and a refused scan shown as refused.
@Suite("Field promises end to end")
struct FieldPromisesEndToEndTests {
    /// A port that takes connections (the kernel completes them) and never answers a byte.
    final class SilentServer: @unchecked Sendable {
        let socket: Int32
        let port: Int

        init() throws {
            let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
            }
            guard bound == 0, listen(fd, 64) == 0 else {
                close(fd)
                throw CocoaError(.fileWriteUnknown)
            }
            _ = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            socket = fd
            port = Int(UInt16(bigEndian: address.sin_port))
        }

        deinit { close(socket) }
    }

    @Test("a check-in against a server that accepts and never answers is saved and said at once, and the command ends within its bounds")
    func saveDoesNotWaitOnSilence() async throws {
        let session = try AppSession()
        let silent = try SilentServer()
        let store = session.root.appendingPathComponent("phone/device.sqlite").path
        let token = try await session.token(user: "ana")
        let initialised = try await OutpostProcess.run(
            ["device", "init", "--server", "http://127.0.0.1:\(silent.port)", "--token", token, "--device-id", "phone", "--store", store])
        #expect(initialised.status == 0, "\(initialised.stderr)")
        let started = ContinuousClock.now
        let checkIn = try await OutpostProcess.run(["attendance", "check-in", "--lat", "51.5", "--lon", "-0.12", "--store", store])
        let took = ContinuousClock.now - started
        #expect(checkIn.status == 0, "\(checkIn.stderr)")
        let lines = checkIn.stdout.split(separator: "\n")
        #expect(lines.first?.contains("Checked In at") == true, "\(checkIn.stdout)")
        #expect(lines.last?.contains("not synced yet") == true, "\(checkIn.stdout)")
        // A second to ask, two to wait for the delivery: far below the 15 s the transport itself waits.
        #expect(took < .seconds(10), "took \(took)")
        let pending = try await OutpostProcess.run(["device", "records", "--pending", "--store", store])
        #expect(pending.stdout.contains("⏳ pending  attendance/ana."), "\(pending.stdout)")
    }

    @Test("a guest cancelled after the download, scanned online before a refresh, is refused at the door, listed as refused, and can be discarded")
    func refusedScan() async throws {
        let session = try AppSession()
        try await session.startServer()
        let organizer = ["OUTPOST_SERVER": session.url, "OUTPOST_TOKEN": try await session.token(user: "olga", role: "organizer")]
        let csv = session.root.appendingPathComponent("roster.csv").path
        #expect(try await OutpostProcess.run(["roster", "generate", "--guests", "20", "--output", csv]).status == 0)
        #expect(try await OutpostProcess.run(["roster", "import", "--event", "gala", csv], environment: organizer).status == 0)
        let door = try await session.device("door-1", user: "sam")
        #expect(try await door(["event", "open", "gala"]).stdout.contains("Ready for offline"))
        #expect(try await OutpostProcess.run(["roster", "cancel", "--event", "gala", "g000007"], environment: organizer).status == 0)

        let scan = try await door(["event", "scan", "g000007"])
        #expect(scan.status != 0)
        #expect(scan.stderr == "outpost: Registration cancelled — refer to organizer\n", "\(scan.stdout) \(scan.stderr)")
        #expect(!scan.stdout.contains("Checked in"))
        // Scanned again, the door still says no.
        #expect(try await door(["event", "scan", "g000007"]).stderr == "outpost: Registration cancelled — refer to organizer\n")
        let pending = try await door(["event", "pending"]).stdout
        #expect(pending.contains("0 check-ins pending sync") && pending.contains("1 check-in refused by the server"), "\(pending)")
        #expect(pending.contains("g000007") && pending.contains("Registration cancelled"))
        #expect(try await door(["device", "records", "--rejected"]).stdout.contains("⛔ rejected  checkins/gala/g000007"))
        let discarded = try await door(["device", "discard", "g000007", "--collection", "checkins"])
        #expect(discarded.stdout.contains("discarded checkins/gala/g000007"), "\(discarded.stdout) \(discarded.stderr)")
        #expect(try await door(["device", "records", "--rejected"]).stdout.contains("no refused records"))
        // A guest on the roster still checks in, synced.
        #expect(try await door(["event", "scan", "g000008"]).stdout.contains("(synced)"))
    }
}
