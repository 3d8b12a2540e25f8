import Foundation
import OutpostProtocol
import Testing

@testable import OutpostServer

/// Property-based fuzzing of the whole API from openapi.yaml with schemathesis (from PyPI), against a real
/// `outpost serve` process: every schema-valid request is accepted, every schema-violating one refused with
/// a 4xx, no response is a 5xx or breaks its documented schema, and the server stays up.
@Suite("API fuzzing")
struct FuzzTests {
    static let secret = "a-fuzzing-secret-of-at-least-32-bytes-long"
    static var configuration: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fuzz/schemathesis.toml")
    }

    @Test(
        "schemathesis finds no failure in any operation, as an organizer and as staff",
        .requires(.schemathesis, .curl), arguments: [Role.organizer, Role.staff])
    func schemathesis(role: Role) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-fuzz-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let server = try await OutpostProcess.start(
            // The spec allows http receivers on this machine, which the server takes only when told.
            ["serve", "--port", "0", "--data-dir", root.appendingPathComponent("server").path, "--allow-loopback-receivers"],
            environment: ["OUTPOST_JWT_SECRET": Self.secret])
        let port = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        let authority = try await TokenAuthority(secret: Array(Self.secret.utf8))
        let token = try await authority.token(
            for: Identity(tenant: "acme", userId: "fuzzer", role: role, name: "Fuzzer"), lifetime: .seconds(3600),
            now: Date())

        // An organizer's monitor session, signed in as the form does, so the monitor pages are exercised too.
        var session: [String] = []
        if role == .organizer {
            let signIn = try await Tool.run(
                "curl",
                [
                    "-s", "-o", "/dev/null", "-D", "-", "-H", "Origin: http://127.0.0.1:\(port)", "-b", "outpost_csrf=fuzz",
                    "-d", "csrf=fuzz&token=\(token)", "http://127.0.0.1:\(port)/admin/session",
                ], in: root)
            let cookie = try #require(
                signIn.output.split(separator: "\r\n").first { $0.lowercased().hasPrefix("set-cookie: outpost_session=") }?
                    .dropFirst("set-cookie: ".count).split(separator: ";").first)
            session = ["-H", "Cookie: \(cookie)"]
        }
        // One seed per role, so that a run fails only for a change of the code; OUTPOST_FUZZ_SEED=random draws a
        // new one to explore, and OUTPOST_FUZZ_SEED=N replays a seed the output printed.
        let asked = ProcessInfo.processInfo.environment["OUTPOST_FUZZ_SEED"]
        let seed =
            asked == "random"
            ? UInt32.random(in: 1...UInt32.max) : asked.flatMap(UInt32.init) ?? (role == .organizer ? 3_090_472_577 : 2_675_785_903)
        print("schemathesis as \(role.rawValue): seed \(seed) (replay: OUTPOST_FUZZ_SEED=\(seed) swift test --filter FuzzTests)")
        let run = try await Tool.run(
            "schemathesis",
            [
                "--config-file", Self.configuration.path, "--no-color", "run", "http://127.0.0.1:\(port)/openapi.yaml",
                "-H", "Authorization: Bearer \(token)",
            ] + session + [
                "--max-examples", "40", "--seed", String(seed),
                "--report", "junit", "--report-dir", root.appendingPathComponent("report").path,
            ],
            in: root)
        let summary = run.output.split(separator: "\n").filter {
            $0.contains("ST") || $0.contains("failures") || $0.contains("passed") || $0.contains("issues")
        }
        #expect(run.status == 0, "schemathesis, seed \(seed):\n\(summary.joined(separator: "\n"))\n\(run.output.suffix(4000))")
        #expect(run.output.contains("passed") && !run.output.contains("Failures:"))
        // The server survived all of it.
        #expect(server.isRunning)
        #expect(await server.stop() == 0)
    }
}
