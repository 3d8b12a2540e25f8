import Foundation
import OutpostTesting
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One client address against the server's descriptors, through real `outpost serve` processes limited to 256.
@Suite("Connection guard")
struct ConnectionGuardTests {
    /// `outpost serve` under `ulimit -n 256` on a free port, with `options`; its port.
    static func serve(_ options: [String], in root: URL) async throws -> (RunningChild, Int) {
        let port = try TestPostgres.freePort()
        let server = try await RunningChild(
            "/bin/sh",
            [
                "-c", #"ulimit -n 256 && exec "$0" "$@""#, OutpostProcess.executable.path, "serve", "--port", String(port),
                "--data-dir", root.appendingPathComponent(UUID().uuidString).path,
            ] + options, environment: OutpostProcess.environment([:]))
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        return (server, port)
    }

    @Test(
        "260 slow connections from one address, against a server limited to 256 descriptors: it holds at most 128, serves another client, and closes the slow ones when their head is late",
        .timeLimit(.minutes(3)))
    func slowHeadsFromOneAddress() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-guard-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }

        // No head deadline within the test's time: every close comes from the address's bound.
        let (server, port) = try await Self.serve(["--request-head-timeout", "3600"], in: root)
        let slow = try await SlowHeads.open(260, to: port, from: "127.0.0.2")
        // The connections past the address's share are closed as they connect; the others are held.
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        var held = slow.openCount
        while held > 128, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            held = slow.openCount
        }
        #expect(held <= 128 && held >= 100, "\(held) held")

        // Another address is served meanwhile.
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/health")!, timeoutInterval: 10)
        request.httpMethod = "GET"
        let answer = try await URLSession.shared.data(for: request)
        #expect((answer.1 as? HTTPURLResponse)?.statusCode == 200)
        #expect(slow.openCount >= 100, "served only once the slow heads were closed")
        try await slow.close()
        #expect(await server.stop(SIGTERM) == 0, "\(server.stderr)")

        // A head that has not come whole in 2 s closes its connection.
        let (timed, timedPort) = try await Self.serve(["--request-head-timeout", "2"], in: root)
        let late = try await SlowHeads.open(10, to: timedPort, from: "127.0.0.3")
        let closing = ContinuousClock.now.advanced(by: .seconds(60))
        while late.openCount > 0, ContinuousClock.now < closing {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(late.openCount == 0)
        try await late.close()
        #expect(await timed.stop(SIGTERM) == 0, "\(timed.stderr)")
    }
}
