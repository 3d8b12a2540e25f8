import Foundation
import OutpostApps
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

/// The HTTP transport and the device against the real application on a loopback socket, whose clock is past the
/// device's token: the token is renewed through a `CredentialsProvider`, or the device waits for a sign-in.
@Suite("Token renewal over a real socket")
struct TokenRenewalTests {
    /// The server's clock: two hours after the tokens below were minted, so that a one-hour token is expired.
    static let later = Fixtures.serverNow.date.addingTimeInterval(2 * 3600)

    /// Gives `fresh` and counts how often it was asked.
    final class Renewal: CredentialsProvider, @unchecked Sendable {
        let fresh: String?
        private let lock = NSLock()
        private var count = 0
        init(_ fresh: String?) { self.fresh = fresh }
        var asked: Int { lock.withLock { count } }

        func refreshedToken(after rejected: String) async throws -> String? {
            lock.withLock { count += 1 }
            return fresh
        }
    }

    static func expiredToken() async throws -> String { try await Fixtures.token(lifetime: .seconds(3600)) }
    static func freshToken() async throws -> String { try await Fixtures.token(lifetime: .seconds(86400)) }

    @Test("HTTPSyncTransport sends a refused request again with a fresh token, keeps it, and without one says to sign in again")
    func transportRenews() async throws {
        try await withServer(.sqlite, setup: .live, now: { Self.later }) { client, storage in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let fresh = try await Self.freshToken()

            // Given a transport whose token expired, with a provider that has a fresh one,
            let renewal = Renewal(fresh)
            let transport = HTTPSyncTransport(baseURL: base, token: try await Self.expiredToken(), credentials: renewal)

            // a push goes through after one renewal, and later calls, streams included, keep the fresh token.
            let pushed = try await transport.push(PushRequest(deviceId: "dev-a", mutations: [Fixtures.upsert("r1", ["n": 1])]))
            #expect(pushed.results.map(\.status) == [.applied])
            #expect(renewal.asked == 1)
            #expect(transport.bearer.current == fresh)
            try await storage.settle()
            let streamed = try await transport.pullStream(collection: "notes", scope: nil, cursor: nil, limit: 10, pages: 2)
                .first { _ in true }
            #expect(streamed?.changes.map(\.recordId) == ["r1"])
            #expect(renewal.asked == 1)

            // A stream refused before its first page starts again with the fresh token.
            let streaming = HTTPSyncTransport(baseURL: base, token: try await Self.expiredToken(), credentials: Renewal(fresh))
            let page = try await streaming.pullPageStream(collection: "notes", scope: nil, cursor: nil, limit: 10, pages: 2)
                .first { _ in true }
            #expect(page?.changes.map(\.recordId) == ["r1"])

            // With nothing to renew with, the call says to sign in again, and is not worth retrying.
            let stranded = HTTPSyncTransport(baseURL: base, token: try await Self.expiredToken(), credentials: Renewal(nil))
            await #expect {
                _ = try await stranded.push(PushRequest(deviceId: "dev-a", mutations: [Fixtures.upsert("r2", ["n": 2])]))
            } throws: { error in
                guard let error = error as? TransportError else { return false }
                return error.requiresSignIn && !error.isRetryable && error.message == TransportError.signInAgainMessage
                    && error.wire?.code == .invalidToken
            }
        }
    }

    @Test("a device renews its refused token through the app's provider and saves it for the next process; without one its records wait")
    func deviceSavesRenewal() async throws {
        try await withServer(.sqlite, setup: .live, now: { Self.later }) { client, _ in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-renewal-\(UUID())")
            defer { try? FileManager.default.removeItem(at: directory) }
            let url = directory.appendingPathComponent("device.sqlite")
            let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            let deviceNow: @Sendable () -> Date = { Fixtures.serverNow.date }
            try await Device.initialize(store: store, server: base, token: try await Self.expiredToken(), deviceId: "dev-r")

            // Given a device opened without a provider, whose token the server refuses,
            let stranded = try await Device.open(store: store, clock: ManualClock(), now: deviceNow)
            for id in ["a", "b", "c"] {
                try await stranded.engine.save(LocalStore.Write(collection: "notes", recordId: id, fields: ["n": 1]))
            }
            let refused = try await bounded("the refused sync") { try await stranded.engine.sync() }

            // its records wait, queued, and the store remembers that the person must sign in again;
            #expect(refused.requiresSignIn && refused.failed == 3 && refused.synced == 0)
            #expect(try await store.outbox.count() == 3)
            #expect(try await Device.needsSignIn(store: store))

            // when the app opens it with a provider that signs in again, everything syncs,
            let renewal = Renewal(try await Self.freshToken())
            let renewed = try await Device.open(store: store, credentials: renewal, clock: ManualClock(), now: deviceNow)
            let summary = try await bounded("the renewed sync") { try await renewed.engine.sync() }
            #expect(summary.synced == 3 && summary.failed == 0)
            #expect(renewal.asked == 1)
            #expect(try await !Device.needsSignIn(store: store))

            // and the next process sends the saved fresh token without asking.
            let next = try await Device.open(store: store, credentials: renewal, clock: ManualClock(), now: deviceNow)
            try await next.engine.save(LocalStore.Write(collection: "notes", recordId: "d", fields: ["n": 1]))
            #expect(try await bounded("the next sync") { try await next.engine.sync() }.synced == 1)
            #expect(renewal.asked == 1)
        }
    }
}
