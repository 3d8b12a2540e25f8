import Foundation
import Testing

/// The README's sample output is what the commands print: its device, attendance, activity and build samples are
/// run as a real session, and every line they print is a line of the README, times, dates, ids and ports aside.
@Suite("README samples")
struct ReadmeSamplesTests {
    /// The output lines of the README's shell samples (not the commands), with times, dates, ids and ports masked.
    static func readmeLines() throws -> Set<String> {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        var lines = Set<String>()
        var inSample = false
        for line in readme.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inSample = line == "```sh"
                continue
            }
            if inSample && !line.hasPrefix("$ ") { lines.insert(masked(String(line))) }
        }
        return lines
    }

    /// `text` with what changes from run to run masked: times, dates, record ids, ports, guest names.
    static func masked(_ text: String) -> String {
        var text = text
        for (pattern, mask) in [
            (#"\d{4}-\d{2}-\d{2}"#, "DATE"), (#"\d{2}:\d{2}(:\d{2})?"#, "TIME"), (#"(act|build)-[0-9a-f]{8}-[0-9a-f]{4}"#, "ID"),
            (#"127\.0\.0\.1:\d+"#, "HOST"), (#"/[^ ]*/device\.sqlite"#, "STORE"),
        ] {
            text = text.replacingOccurrences(of: pattern, with: mask, options: .regularExpression)
        }
        return text.trimmingCharacters(in: .whitespaces)
    }

    @Test("every line the README's device, attendance, activity and build samples print is in the README")
    func samplesMatch() async throws {
        let readme = try Self.readmeLines()
        let session = try AppSession()
        try await session.startServer()
        let phone = try await session.device("phone-1", user: "ana")
        var printed: [(command: String, line: String)] = []
        func run(_ arguments: [String]) async throws {
            let output = try await phone(arguments)
            for line in (output.stdout + output.stderr).split(separator: "\n") {
                printed.append((arguments.prefix(2).joined(separator: " "), String(line)))
            }
        }
        await session.stopServer()
        try await run(["device", "put", "notes", "n2", "text=gate C closed", "priority=2"])
        try await run(["device", "status"])
        try await session.startServer()
        try await run(["device", "sync"])
        try await run(["device", "records"])

        try await run(["attendance", "check-in", "--no-fix"])
        try await run(["attendance", "check-in", "--lat", "51.5072", "--lon", "-0.1276"])
        await session.stopServer()
        try await run(["attendance", "check-out", "--lat", "51.5072", "--lon", "-0.1276"])
        try await run(["attendance", "status"])
        try await run(["attendance", "history"])

        try await run(["activity", "register", "--type", "home-visit", "--date", "2026-11-20", "--duration", "1h30m", "--travel-expense", "12.50"])
        try await session.startServer()
        try await run(["activity", "list"])
        let activity = try #require(printed.last?.line.split(separator: " ").first.map(String.init))
        try await run(["activity", "edit", activity, "--notes", "garden", "--participants", "3"])

        await session.stopServer()
        try await run(["builds", "save", "--name", "Shed", "floor=2", "permit=P-114"])
        try await run(["builds", "sync-all"])
        try await run(["builds", "list"])
        let build = try #require(printed.last { $0.command == "builds list" && $0.line.hasPrefix("build-") }?.line.split(separator: " ").first)
        try await session.startServer()
        try await run(["builds", "retry", String(build)])

        for (command, line) in printed where !line.hasPrefix("device:") && !line.hasPrefix("server:") {
            // A save's first line says what the device knew of the server at that instant: with the server down,
            // whether its check had already failed ("saved offline") or not ("saved on this device") is a race the
            // sample cannot fix, and both are true.
            let known = line.replacingOccurrences(of: "— saved offline, pending sync", with: "— saved on this device")
            let shown = Self.masked(known.replacingOccurrences(of: "outpost: ", with: ""))
            #expect(
                readme.contains(shown) || readme.contains("outpost: " + shown),
                "`outpost \(command)` printed a line the README does not show: \(line)")
        }
        #expect(printed.count >= 20, "\(printed)")
    }
}
