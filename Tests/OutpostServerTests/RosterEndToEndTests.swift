import Foundation
import OutpostProtocol
import Testing

/// The organizer's roster tools and a device's offline roster, as real `outpost` processes over a socket.
@Suite("Roster end to end")
struct RosterEndToEndTests {
    @Test("import, download, find offline, walk-in after refresh, cancellation as a tombstone; a bad file imports nothing")
    func rosterDay() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-roster-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let data = root.appendingPathComponent("server").path
        let store = ["--store", root.appendingPathComponent("device/device.sqlite").path]
        let server = try OutpostProcess.Running(["serve", "--port", "0", "--data-dir", data])
        let port = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        let url = "http://127.0.0.1:\(port)"
        func token(_ role: String) async throws -> String {
            try await OutpostProcess.run(["token", "--tenant", "acme", "--user", role, "--role", role, "--data-dir", data])
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let organizer = await ["OUTPOST_SERVER": url, "OUTPOST_TOKEN": try token("organizer")]

        // The organizer generates and imports a roster.
        let csv = root.appendingPathComponent("roster.csv").path
        #expect(try await OutpostProcess.run(["roster", "generate", "--guests", "1200", "--output", csv]).status == 0)
        let imported = try await OutpostProcess.run(["roster", "import", "--event", "gala", csv], environment: organizer)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.stdout.contains("imported 1200 guests"))

        // A file with bad rows is reported line by line and imports nothing.
        let bad = root.appendingPathComponent("bad.csv").path
        try (Guest.columns.joined(separator: ",") + "\nz1,Zed,zed@example.org,vip,registered,,\nz2,,z2@example.org,vip,registered,,\nz3,Zoe,nope,vip,registered,,\n")
            .write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try await OutpostProcess.run(["roster", "import", "--event", "gala", bad], environment: organizer)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("line 3:"))
        #expect(refused.stderr.contains("line 4:"))
        #expect(refused.stderr.contains("nothing was imported"))

        // A device opens the event: the whole roster downloads, then works offline.
        #expect(try await OutpostProcess.run(["device", "init", "--server", url, "--token", try token("staff")] + store).status == 0)
        let opened = try await OutpostProcess.run(["event", "open", "gala"] + store)
        #expect(opened.status == 0, "\(opened.stderr)")
        #expect(opened.stdout.contains("1200/1200"))
        #expect(opened.stdout.contains("Ready for offline"))
        let found = try await OutpostProcess.run(["event", "find", "Ana Silva 0"] + store)
        #expect(found.stdout.contains("g000000"))
        #expect(try await OutpostProcess.run(["event", "find", "z2@example.org"] + store).stdout.contains("Guest not in roster"))

        // A walk-in is not found until the next refresh; a cancellation arrives as a tombstone.
        #expect(try await OutpostProcess.run(
            ["roster", "add", "--event", "gala", "guest_id=walkin-1", "name=Walk In", "email=walk@example.org"],
            environment: organizer).status == 0)
        #expect(try await OutpostProcess.run(["roster", "cancel", "--event", "gala", "g000007"], environment: organizer).status == 0)
        let before = try await OutpostProcess.run(["event", "lookup", "walkin-1"] + store)
        #expect(before.status != 0)
        #expect(before.stderr.contains("Guest not in roster — refresh and try again"))
        let refreshed = try await OutpostProcess.run(["event", "refresh"] + store)
        #expect(refreshed.stdout.contains("1 updated, 1 removed"), "\(refreshed.stdout) \(refreshed.stderr)")
        #expect(try await OutpostProcess.run(["event", "lookup", "walkin-1"] + store).stdout.contains("Walk In"))
        let cancelled = try await OutpostProcess.run(["event", "lookup", "g000007"] + store)
        #expect(cancelled.status != 0)
        #expect(cancelled.stderr.contains("Registration cancelled — refer to organizer"))

        #expect(await server.stop() == 0)
        // With the server gone, lookups still work from the device.
        #expect(try await OutpostProcess.run(["event", "lookup", "walkin-1"] + store).status == 0)
    }
}
