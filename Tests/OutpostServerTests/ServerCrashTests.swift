import Foundation
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import Testing

@testable import OutpostServer

/// A real `outpost serve` killed with SIGKILL while a device pushes: what it acknowledged survives, and
/// every push is applied whole or not at all.
@Suite("Server crash")
struct ServerCrashTests {
    static let secret = "a-crash-test-secret-of-at-least-32-bytes"

    @Test(
        "a server killed with SIGKILL mid-push keeps everything it acknowledged, and no push is half-applied",
        arguments: StorageKind.allCases)
    func killMidPush(kind: StorageKind) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-crash-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let port = try TestPostgres.freePort()
        var arguments = ["serve", "--port", String(port), "--data-dir", root.appendingPathComponent("server").path]
        var database: String?
        if kind == .postgres {
            database = try await TestPostgres.shared.makeDatabase()
            arguments += ["--database-url", database!]
        }
        let environment = ["OUTPOST_JWT_SECRET": Self.secret]
        var server = try await OutpostProcess.start(arguments, environment: environment)
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        let authority = try await TokenAuthority(secret: Array(Self.secret.utf8))
        let token = try await authority.token(
            for: Identity(tenant: "acme", userId: "ana", role: .staff, name: "Ana"), lifetime: .seconds(3600), now: Date())
        let client = HTTPSyncTransport.makeDeviceClient()
        defer { _ = client.shutdown() }
        let transport = HTTPSyncTransport(
            baseURL: URL(string: "http://127.0.0.1:\(port)")!, token: token, client: client, timeout: .seconds(30))

        func batch(_ number: Int) -> PushRequest {
            let time = Timestamp(millisecondsSince1970: 1_795_251_600_000 + Int64(number))
            return PushRequest(
                deviceId: "phone-1",
                mutations: (0..<50).map { i in
                    Mutation(
                        idempotencyKey: "phone-1:b\(number)-\(i):\(time.iso8601)", collection: "notes",
                        recordId: "b\(number)-\(i)", op: .upsert, fields: ["i": .integer(Int64(i))], clientTimestamp: time)
                })
        }

        // Given a device pushing batch after batch,
        let acknowledged = LockedCounter()
        let pusher = Task { () -> Int in
            var number = 0
            while true {
                do {
                    let response = try await transport.push(batch(number))
                    #expect(response.results.allSatisfy { $0.status == .applied })
                    acknowledged.set(number + 1)
                    number += 1
                } catch {
                    return number  // the first batch without an answer
                }
            }
        }
        // when the server is killed with SIGKILL while it works,
        while acknowledged.value < 20 { try await Task.sleep(for: .milliseconds(5)) }
        _ = await server.stop(SIGKILL)
        let unanswered = await pusher.value
        let acked = acknowledged.value
        #expect(unanswered == acked)

        // then, restarted, it holds every acknowledged batch whole, and the unanswered one whole or not at all.
        server = try await OutpostProcess.start(arguments, environment: environment)
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        // On PostgreSQL the killed server's open transaction lives on in its backend until the database
        // notices the dead connection, and a pull shows no change committed after that transaction began
        // (the gap-free horizon): it is there, and visible once the backend is gone. So pull from the start
        // again until the acknowledged batches show, for at most 30 seconds.
        var counts: [Int: Int] = [:]
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        repeat {
            counts = [:]
            var cursor: String?
            while true {
                let page = try await transport.pull(collection: "notes", scope: nil, cursor: cursor, limit: 5000)
                for change in page.changes {
                    let number = Int(change.recordId.dropFirst().prefix { $0 != "-" })!
                    counts[number, default: 0] += 1
                }
                cursor = page.cursor
                if !page.hasMore { break }
            }
            if (0..<acked).allSatisfy({ counts[$0] == 50 }) { break }
            try await Task.sleep(for: .milliseconds(200))
        } while ContinuousClock.now < deadline
        for number in 0..<acked { #expect(counts[number] == 50, "batch \(number) has \(counts[number] ?? 0) of 50") }
        #expect([0, 50].contains(counts[unanswered] ?? 0), "the interrupted batch is half-applied")
        #expect(counts.keys.allSatisfy { $0 <= unanswered })

        // and the device's resend of the unanswered batch completes it exactly once.
        let resent = try await transport.push(batch(unanswered))
        #expect(resent.results.allSatisfy { $0.status == .applied || $0.status == .duplicate })
        #expect(Set(resent.results.map(\.status)).count == 1)
        #expect(await server.stop() == 0)
        if let database { await TestPostgres.shared.dropDatabase(url: database) }
    }
}

/// A number shared between tasks.
final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var current = 0

    var value: Int { lock.withLock { current } }

    func set(_ value: Int) {
        lock.withLock { current = value }
    }
}
