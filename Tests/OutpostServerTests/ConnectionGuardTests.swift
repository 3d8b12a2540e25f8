import Foundation
import OutpostTesting
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One client address against the server's descriptors, through a real `outpost serve` limited to 256 of them.
@Suite("Connection guard")
struct ConnectionGuardTests {
    @Test(
        "260 slow connections from one address, against a server limited to 256 descriptors: it holds at most 128, serves another client, and closes the slow ones when their head is late",
        .timeLimit(.minutes(3)))
    func slowHeadsFromOneAddress() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-guard-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let port = try TestPostgres.freePort()
        let server = try await RunningChild(
            "/bin/sh",
            [
                "-c", #"ulimit -n 256 && exec "$0" "$@""#, OutpostProcess.executable.path, "serve", "--port", String(port),
                "--data-dir", root.path, "--request-head-timeout", "15",
            ], environment: OutpostProcess.environment([:]))
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)

        let slow = try await SlowHeads.open(260, to: port, from: "127.0.0.2")
        // The connections past the address's share are closed as they connect; the others are held, for now.
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

        // A head that has not come whole in 15 s closes its connection.
        while slow.openCount > 0, ContinuousClock.now < deadline.advanced(by: .seconds(45)) {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(slow.openCount == 0)
        try await slow.close()
        #expect(await server.stop(SIGTERM) == 0, "\(server.stderr)")
    }
}
