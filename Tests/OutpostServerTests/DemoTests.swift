import Foundation
import Testing

/// `outpost demo`, the README's first command, as a real process.
@Suite("Demo")
struct DemoTests {
    @Test("`demo --fast --no-serve` tells the whole day and exits 0 because it balanced, leaving no data behind")
    func demoBalances() async throws {
        // A temporary folder of its own: another demo running on the machine leaves nothing in it.
        let temporary = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-demo-test-\(UUID())")
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: temporary) }
        let run = try await OutpostProcess.run(["demo", "--fast", "--no-serve"], environment: ["TMPDIR": temporary.path])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        for act in [
            "1. A server on an embedded SQLite store", "imports 1000 guests", "roster: 1000/1000",
            "The venue network fails", "150 check-ins pending", "force-quit and relaunched",
            "150 of 150 pending check-ins still there", "chunk 3, 150/150 delivered", "Registration cancelled — refer to organizer",
            "1 record refused by the server", "the server's check-ins equal the devices' (509), each guest exactly once",
            "/admin/monitor?event=gala", "/admin/session?code=", "The day balanced.",
        ] {
            #expect(run.stdout.contains(act), "missing: \(act)")
        }
        // In a pipe: plain lines, no terminal escapes.
        #expect(!run.stdout.contains("\u{1B}["))
        // The cancelled guest's scan is reported as a refusal, never as a record that failed for a day.
        #expect(!run.stderr.contains("Persistent Sync Failure"), "\(run.stderr)")
        #expect(run.stdout.contains("WARNING \"Rejected Record\" line for each refusal"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary.path).isEmpty)
    }
}
