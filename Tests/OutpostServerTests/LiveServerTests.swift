import Foundation
import HummingbirdTesting
import OutpostClient
import OutpostProtocol
import Testing

@testable import OutpostServer

/// The client SDK's HTTP transport against the real application on a real loopback socket.
@Suite("Over a real socket")
struct LiveServerTests {
    @Test("push, pull, snapshot and health through HTTPSyncTransport", arguments: StorageKind.allCases)
    func transportRoundTrip(kind: StorageKind) async throws {
        try await withServer(kind, setup: .live) { client, storage in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let staff = HTTPSyncTransport(baseURL: base, token: try await Fixtures.token(role: .staff))
            let organizer = HTTPSyncTransport(baseURL: base, token: try await Fixtures.token(role: .organizer))
            #expect(try await staff.health().status == "ok")
            let mutation = Fixtures.upsert("r1", ["title": "über + 🚀 & more"], at: 1)
            let pushed = try await staff.push(PushRequest(deviceId: "dev-a", mutations: [mutation]))
            #expect(pushed.results.map(\.status) == [.applied])
            let replayed = try await staff.push(PushRequest(deviceId: "dev-a", mutations: [mutation]))
            #expect(replayed.results.map(\.status) == [.duplicate])
            try await storage.settle()
            let pulled = try await staff.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            #expect(pulled.changes.first?.fields["title"] == "über + 🚀 & more")
            _ = try await organizer.push(
                PushRequest(deviceId: "org", mutations: [
                    Fixtures.upsert("g1", ["event_id": "ev.1:a@b", "name": "A"], collection: "guests", device: "org")
                ]))
            try await storage.settle()
            let snapshot = try await staff.snapshot(collection: "guests", scope: "ev.1:a@b", continuation: nil, limit: 10)
            #expect(snapshot.records.map(\.recordId) == ["g1"])
            #expect(snapshot.cursor != nil)
        }
    }

    @Test("server errors come back as the wire error, with their status")
    func errorsDecode() async throws {
        try await withServer(.sqlite, setup: .live) { client, _ in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let forged = HTTPSyncTransport(baseURL: base, token: "forged")
            await #expect {
                _ = try await forged.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            } throws: { error in
                guard let error = error as? TransportError else { return false }
                return error.status == 401 && error.wire?.code == .invalidToken && !error.isRetryable
            }
        }
    }

    @Test("an unreachable server is a retryable network error")
    func unreachable() async throws {
        let transport = HTTPSyncTransport(baseURL: URL(string: "http://127.0.0.1:1")!, token: "t", timeout: .seconds(5))
        await #expect {
            _ = try await transport.health()
        } throws: { error in
            (error as? TransportError)?.kind == .network && (error as? TransportError)?.isRetryable == true
        }
    }
}
