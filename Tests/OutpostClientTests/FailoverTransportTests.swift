import Foundation
import NIOConcurrencyHelpers
import OutpostProtocol
import Testing

@testable import OutpostClient

/// A server and a fallback: calls go where they can be answered, and no cursor crosses from one to the other.
@Suite("Failover transport")
struct FailoverTransportTests {
    /// An endpoint that answers, or cannot be reached; it records the cursors it is given.
    final class Endpoint: SyncTransport, @unchecked Sendable {
        let name: String
        let reachable = NIOLockedValueBox(true)
        let refusing = NIOLockedValueBox(false)
        let cursors = NIOLockedValueBox<[String?]>([])
        let pushes = NIOLockedValueBox(0)

        init(_ name: String) { self.name = name }

        func check() throws {
            guard reachable.withLockedValue({ $0 }) else { throw TransportError.unreachable() }
            if refusing.withLockedValue({ $0 }) {
                throw TransportError(kind: .server, status: 503, message: "the server is busy")
            }
        }
        func push(_ request: PushRequest) async throws -> PushResponse {
            try check()
            pushes.withLockedValue { $0 += 1 }
            return PushResponse(results: request.mutations.map { MutationResult(idempotencyKey: $0.idempotencyKey, status: .applied) })
        }
        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            try check()
            cursors.withLockedValue { $0.append(cursor) }
            return PullResponse(changes: [], cursor: "\(name)-c\(cursors.withLockedValue { $0.count })", hasMore: false)
        }
        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            try check()
            cursors.withLockedValue { $0.append(continuation) }
            return SnapshotResponse(records: [], total: 0, continuation: "\(name)-k", cursor: "\(name)-s")
        }
        func health() async throws -> HealthResponse {
            try check()
            return HealthResponse(status: name, storage: "ok")
        }
    }

    final class Clock: @unchecked Sendable {
        let time = NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
        func advance(_ seconds: Double) { time.withLockedValue { $0 = $0.addingTimeInterval(seconds) } }
    }

    static func push(_ transport: FailoverTransport) async throws {
        let mutation = Mutation(
            idempotencyKey: "k", collection: "notes", recordId: "n", op: .upsert, fields: ["text": "hi"],
            clientTimestamp: Timestamp(millisecondsSince1970: 1))
        _ = try await transport.push(PushRequest(deviceId: "d", mutations: [mutation]))
    }

    @Test("the server first; the fallback while the server cannot be reached; the server again after the retry time")
    func failsOverAndBack() async throws {
        let (server, relay, clock) = (Endpoint("server"), Endpoint("relay"), Clock())
        let transport = FailoverTransport(primary: server, fallback: relay, primaryRetry: .seconds(30), now: { clock.time.withLockedValue { $0 } })
        try await Self.push(transport)
        #expect(server.pushes.withLockedValue { $0 } == 1 && relay.pushes.withLockedValue { $0 } == 0)
        #expect(try await transport.health().status == "server")

        server.reachable.withLockedValue { $0 = false }
        try await Self.push(transport)
        #expect(relay.pushes.withLockedValue { $0 } == 1)
        #expect(transport.preferred == .fallback)
        // Back within the retry time, the fallback still goes first;
        server.reachable.withLockedValue { $0 = true }
        clock.advance(29)
        try await Self.push(transport)
        #expect(relay.pushes.withLockedValue { $0 } == 2 && server.pushes.withLockedValue { $0 } == 1)
        // after it, the server does again.
        clock.advance(2)
        #expect(transport.preferred == .primary)
        try await Self.push(transport)
        #expect(server.pushes.withLockedValue { $0 } == 2)

        // An answer is the answer: a busy server is not failed over.
        server.refusing.withLockedValue { $0 = true }
        await #expect(throws: TransportError.self) { try await Self.push(transport) }
        #expect(relay.pushes.withLockedValue { $0 } == 2)

        // Neither reachable: the server's failure is thrown.
        server.refusing.withLockedValue { $0 = false }
        server.reachable.withLockedValue { $0 = false }
        relay.reachable.withLockedValue { $0 = false }
        await #expect(throws: TransportError.self) { try await Self.push(transport) }
    }

    @Test("a cursor goes back only to the endpoint that issued it; on the other, the pull starts over")
    func cursorsStayWithTheirEndpoint() async throws {
        let (server, relay, clock) = (Endpoint("server"), Endpoint("relay"), Clock())
        let transport = FailoverTransport(primary: server, fallback: relay, now: { clock.time.withLockedValue { $0 } })
        // A cursor of the server from before the device had a fallback goes to the server as it is.
        let first = try await transport.pull(collection: "checkins", scope: "gala", cursor: "old", limit: nil)
        #expect(server.cursors.withLockedValue { $0 } == ["old"])
        #expect(first.cursor == "0|server-c1")
        let second = try await transport.pull(collection: "checkins", scope: "gala", cursor: first.cursor, limit: nil)
        #expect(server.cursors.withLockedValue { $0 } == ["old", "server-c1"])

        // The server out of reach: the relay pulls from its own start, not from the server's position.
        server.reachable.withLockedValue { $0 = false }
        let third = try await transport.pull(collection: "checkins", scope: "gala", cursor: second.cursor, limit: nil)
        #expect(relay.cursors.withLockedValue { $0 } == [nil])
        #expect(third.cursor == "1|relay-c1")
        _ = try await transport.pull(collection: "checkins", scope: "gala", cursor: third.cursor, limit: nil)
        #expect(relay.cursors.withLockedValue { $0 } == [nil, "relay-c1"])

        // Back on the server, the relay's cursor starts the server's pull over too; so do continuations.
        server.reachable.withLockedValue { $0 = true }
        clock.advance(60)
        _ = try await transport.pull(collection: "checkins", scope: "gala", cursor: third.cursor, limit: nil)
        #expect(server.cursors.withLockedValue { $0.last } == .some(nil))
        let snapshot = try await transport.snapshot(collection: "guests", scope: "gala", continuation: "1|relay-k", limit: nil)
        #expect(server.cursors.withLockedValue { $0.last } == .some(nil))
        #expect(snapshot.continuation == "0|server-k" && snapshot.cursor == "0|server-s")
        let page = try await transport.pullPage(collection: "checkins", scope: "gala", cursor: "0|server-c9", limit: nil)
        #expect(server.cursors.withLockedValue { $0.last } == "server-c9")
        #expect(page.cursor.hasPrefix("0|"))
    }
}
