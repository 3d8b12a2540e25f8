import Foundation
import OutpostProtocol
import OutpostRecords
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The organizer's roster tools and a device's offline roster, as real `outpost` processes over a socket.
@Suite("Roster end to end")
struct RosterEndToEndTests {
    @Test(
        "import, an interrupted import run again applies nothing twice, download, find offline, walk-in after refresh, cancellation as a tombstone; a bad file imports nothing"
    )
    func rosterDay() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-roster-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let data = root.appendingPathComponent("server").path
        let store = ["--store", root.appendingPathComponent("device/device.sqlite").path]
        let server = try await OutpostProcess.start(["serve", "--port", "0", "--data-dir", data])
        let port = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        let url = "http://127.0.0.1:\(port)"
        func token(_ role: String) async throws -> String {
            try await OutpostProcess.run(["token", "--tenant", "acme", "--user", role, "--role", role, "--data-dir", data])
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let organizer = await ["OUTPOST_SERVER": url, "OUTPOST_TOKEN": try token("organizer")]

        // The organizer generates a roster; an import stopped after its first 500 rows (the same file cut
        // short here) is run again whole: the 500 are answered as already imported, nothing applies twice.
        let csv = root.appendingPathComponent("roster.csv").path
        #expect(try await OutpostProcess.run(["roster", "generate", "--guests", "1200", "--output", csv]).status == 0)
        let text = try String(contentsOfFile: csv, encoding: .utf8)
        let part = root.appendingPathComponent("part.csv").path
        try text.split(separator: "\n").prefix(501).joined(separator: "\n").appending("\n").write(toFile: part, atomically: true, encoding: .utf8)
        let saved = try FileManager.default.attributesOfItem(atPath: csv)[.modificationDate] as! Date
        try FileManager.default.setAttributes([.modificationDate: saved], ofItemAtPath: part)
        let first = try await OutpostProcess.run(["roster", "import", "--event", "gala", part], environment: organizer)
        #expect(first.stdout.contains("imported 500 guests into gala\n"), "\(first.stdout) \(first.stderr)")
        let imported = try await OutpostProcess.run(["roster", "import", "--event", "gala", csv], environment: organizer)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.stdout.contains("imported 700 guests into gala (500 already imported, left as they were)"), "\(imported.stdout)")
        let again = try await OutpostProcess.run(["roster", "import", "--event", "gala", csv], environment: organizer)
        #expect(again.stdout.contains("imported 0 guests into gala (1200 already imported, left as they were)"), "\(again.stdout)")
        var request = URLRequest(url: URL(string: url + "/v1/audit?collection=guests&scope=gala&recordId=g000000")!)
        request.setValue("Bearer \(try await token("organizer"))", forHTTPHeaderField: "Authorization")
        let audit = try JSONDecoder().decode(AuditResponse.self, from: try await URLSession.shared.data(for: request).0)
        #expect(audit.entries.count == 1)
        // The file edited and saved again: only the changed row is a change.
        let edited = text.replacingOccurrences(of: "g000001,Ben Silva 1,", with: "g000001,Ben Silva-Costa 1,")
        #expect(edited != text)
        try edited.write(toFile: csv, atomically: true, encoding: .utf8)
        let changed = try await OutpostProcess.run(["roster", "import", "--event", "gala", csv], environment: organizer)
        #expect(
            changed.stdout.contains("imported 1 guest into gala (1199 already imported, left as they were)"), "\(changed.stdout) \(changed.stderr)")

        // A file with bad rows is reported line by line and imports nothing.
        let bad = root.appendingPathComponent("bad.csv").path
        try
            (Guest.columns.joined(separator: ",")
            + "\nz1,Zed,zed@example.org,vip,registered,,\nz2,,z2@example.org,vip,registered,,\nz3,Zoe,nope,vip,registered,,\n")
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
        #expect(
            try await OutpostProcess.run(
                ["roster", "add", "--event", "gala", "guest_id=walkin-1", "name=Walk In", "email=walk@example.org"],
                environment: organizer
            ).status == 0)
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
