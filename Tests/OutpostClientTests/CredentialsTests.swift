import Foundation
import OutpostHTTP
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// A refused token never strands a device: it is renewed through a `CredentialsProvider`, or its records wait,
/// queued, for a sign-in.
@Suite("Credentials", .timeLimit(.minutes(5)))
struct CredentialsTests {
    /// A server that takes only the tokens in `accepted`, reached through a `BearerToken` as `HTTPSyncTransport`
    /// reaches the real one; `health` needs no token, as on the real server.
    struct TokenCheckingTransport: ForwardingTransport {
        let inner: any SyncTransport
        let accepted: Set<String>
        let bearer: BearerToken
        let sent = Tokens()

        private func authorized<T>(_ call: () async throws -> T) async throws -> T {
            try await bearer.authorizing { token in
                sent.append(token)
                guard accepted.contains(token) else {
                    let wire = WireError(code: .invalidToken, message: "the token is invalid or expired")
                    throw TransportError(kind: .server, status: 401, wire: wire, message: wire.message)
                }
                return try await call()
            }
        }

        func push(_ request: PushRequest) async throws -> PushResponse {
            try await authorized { try await inner.push(request) }
        }

        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            try await authorized { try await inner.pull(collection: collection, scope: scope, cursor: cursor, limit: limit) }
        }

        func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
            try await authorized { try await inner.monitorHeartbeat(heartbeat) }
        }
    }

    /// The tokens a transport sent, in order.
    final class Tokens: @unchecked Sendable {
        private let lock = NSLock()
        private var tokens: [String] = []
        var all: [String] { lock.withLock { tokens } }
        func append(_ token: String) { lock.withLock { tokens.append(token) } }
    }

    /// An app's provider: it has `fresh` to give, or nil until the person signs in.
    final class AppCredentials: CredentialsProvider, @unchecked Sendable {
        private let lock = NSLock()
        private var token: String?
        private var rejected: [String] = []

        init(fresh: String?) { token = fresh }

        var fresh: String? {
            get { lock.withLock { token } }
            set { lock.withLock { token = newValue } }
        }
        /// The tokens it was asked to replace, in order.
        var asked: [String] { lock.withLock { rejected } }

        func refreshedToken(after rejected: String) async throws -> String? {
            lock.withLock {
                self.rejected.append(rejected)
                return token
            }
        }
    }

    /// An engine whose transport takes only `accepted`, sending `token` and renewing it through `credentials`.
    func withEngine(
        token: String, accepted: Set<String>, credentials: (any CredentialsProvider)?,
        _ body: (LocalStore, SyncEngine, TokenCheckingTransport, InMemoryServer) async throws -> Void
    ) async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let transport = TokenCheckingTransport(
                inner: InMemoryTransport(server: server), accepted: accepted,
                bearer: BearerToken(token, credentials: credentials))
            let engine = SyncEngine(
                store: store, transport: transport, configuration: SyncConfiguration(deviceId: "dev-1", deliversAfterSave: false),
                clock: ManualClock())
            try await body(store, engine, transport, server)
        }
    }

    @Test("records saved offline with a token that expired meanwhile sync after one renewal, and the fresh token stays")
    func renewedOnce() async throws {
        let app = AppCredentials(fresh: "fresh")
        try await withEngine(token: "expired", accepted: ["fresh"], credentials: app) { store, engine, transport, server in
            // Given three records saved offline,
            for id in ["a", "b", "c"] { try await engine.save(note(id)) }

            // when the device syncs and the server refuses its token,
            let summary = try await bounded("the sync") { try await engine.sync() }

            // then the provider is asked once, the push goes again with its token, and everything syncs;
            #expect(summary.synced == 3 && summary.failed == 0 && !summary.requiresSignIn)
            #expect(app.asked == ["expired"])
            #expect(Array(transport.sent.all.prefix(2)) == ["expired", "fresh"])
            #expect(await server.applied.map(\.mutation.recordId) == ["a", "b", "c"])
            #expect(try await store.outbox.count() == 0)

            // and later requests send the fresh token without asking again.
            try await engine.save(note("d"))
            #expect(try await bounded("the second sync") { try await engine.sync() }.synced == 1)
            #expect(app.asked == ["expired"])
            #expect(transport.bearer.current == "fresh")
            #expect(transport.sent.all.dropFirst().allSatisfy { $0 == "fresh" })
        }
    }

    @Test("with no fresh token, the records stay queued, failed with a reason that says to sign in again, and go after a sign-in")
    func waitForSignIn() async throws {
        let app = AppCredentials(fresh: nil)
        try await withEngine(token: "expired", accepted: ["fresh"], credentials: app) { store, engine, transport, server in
            // Given three records saved offline and a provider that has nothing to renew with,
            for id in ["a", "b", "c"] { try await engine.save(note(id)) }

            // when the server refuses the token,
            let refused = try await bounded("the refused sync") { try await engine.sync() }

            // then nothing is lost: every record is failed with the sign-in reason, and every entry still queued;
            #expect(refused.requiresSignIn)
            #expect(refused.synced == 0 && refused.failed == 3)
            #expect(refused.reasons == ["The token is invalid or expired: sign in again"])
            #expect(await engine.status.needsSignIn)
            #expect(try await store.outbox.count() == 3)
            let records = try await store.records(.failed)
            #expect(records.count == 3)
            #expect(records.allSatisfy { $0.syncError == "The token is invalid or expired: sign in again" })
            #expect(await server.applied.isEmpty)
            // a call outside a sync says the same, and is not worth retrying;
            await #expect {
                _ = try await transport.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            } throws: { error in
                guard let error = error as? TransportError else { return false }
                return error.requiresSignIn && !error.isRetryable && error.message == TransportError.signInAgainMessage
                    && error.wire?.code == .invalidToken
            }

            // and once the person has signed in, the next sync sends them all.
            app.fresh = "fresh"
            let resumed = try await bounded("the sync after the sign-in") { try await engine.sync() }
            #expect(resumed.synced == 3 && resumed.failed == 0 && !resumed.requiresSignIn)
            #expect(await engine.status.needsSignIn == false)
            #expect(await server.applied.map(\.mutation.recordId) == ["a", "b", "c"])
            #expect(try await store.outbox.count() == 0)
            #expect(try await store.records(.failed).isEmpty)
        }
    }

    @Test("a fresh token refused too is not asked for again in the same request")
    func refusedTwice() async throws {
        let app = AppCredentials(fresh: "also-expired")
        try await withEngine(token: "expired", accepted: [], credentials: app) { store, engine, transport, _ in
            try await engine.save(note("a"))
            let summary = try await bounded("the sync") { try await engine.sync() }
            #expect(summary.requiresSignIn)
            #expect(Array(transport.sent.all.prefix(2)) == ["expired", "also-expired"])
            #expect(app.asked == ["expired"])
            #expect(try await store.outbox.count() == 1)
        }
    }

    /// An unsigned JWT with Outpost's claims: the device reads claims without checking signatures.
    static func jwt(tenant: String = "acme", user: String = "ana", name: String = "Ana", serial: Int = 1) -> String {
        func base64URL(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let claims = #"{"tenant":"\#(tenant)","sub":"\#(user)","role":"staff","name":"\#(name)","exp":\#(serial)}"#
        return base64URL(#"{"alg":"HS256","typ":"JWT"}"#) + "." + base64URL(claims) + ".c2ln"
    }

    @Test("a device takes a token signed in from elsewhere, saves its app's fresh token, and refuses another user's")
    func deviceCredentials() async throws {
        try await withStore { store, _ in
            let first = Self.jwt(serial: 1)
            try await Device.initialize(
                store: store, server: URL(string: "http://127.0.0.1:1")!, token: first, deviceId: "dev-1")

            // The app's provider renews the token: the store keeps the fresh one, sealed, for the next process.
            let second = Self.jwt(serial: 2)
            let renewed = StoredCredentials(store: store, app: AppCredentials(fresh: second))
            #expect(try await renewed.refreshedToken(after: first) == second)
            #expect(try await store.setting(Device.SettingName.token) == second)
            #expect(try await !Device.needsSignIn(store: store))

            // A token for another user is not taken: the person signs in again.
            let bob = Self.jwt(user: "bob", name: "Bob", serial: 3)
            let wrongUser = StoredCredentials(store: store, app: AppCredentials(fresh: bob))
            #expect(try await wrongUser.refreshedToken(after: second) == nil)
            #expect(try await store.setting(Device.SettingName.token) == second)
            #expect(try await Device.needsSignIn(store: store))
            await #expect {
                try await Device.signIn(store: store, token: bob)
            } throws: { ($0 as? ClientError)?.code == .otherUser }
            await #expect {
                try await Device.signIn(store: store, token: Self.jwt(tenant: "globex", serial: 4))
            } throws: { ($0 as? ClientError)?.code == .otherUser }
            #expect(try await store.setting(Device.SettingName.token) == second)

            // A sign-in saved by another process is what the next refused request takes, with no provider at all.
            let third = Self.jwt(serial: 5)
            #expect(try await Device.signIn(store: store, token: third)?.name == "Ana")
            #expect(try await !Device.needsSignIn(store: store))
            #expect(try await StoredCredentials(store: store, app: nil).refreshedToken(after: second) == third)
            // Refused with nothing to renew it, the token is remembered as refused until another replaces it.
            #expect(try await StoredCredentials(store: store, app: nil).refreshedToken(after: third) == nil)
            #expect(try await Device.needsSignIn(store: store))
        }
    }

    @Test("records queued on a device whose token was refused go out with the token a sign-in saves")
    func signInFromElsewhere() async throws {
        try await withStore { store, _ in
            let expired = Self.jwt(serial: 1)
            let signedIn = Self.jwt(serial: 2)
            try await Device.initialize(
                store: store, server: URL(string: "http://127.0.0.1:1")!, token: expired, deviceId: "dev-1")
            let server = InMemoryServer()
            let transport = TokenCheckingTransport(
                inner: InMemoryTransport(server: server), accepted: [signedIn],
                bearer: BearerToken(expired, credentials: StoredCredentials(store: store, app: nil)))
            let device = try await Device.open(store: store, transport: transport, clock: ManualClock())

            // Given records saved offline and a sync the server refused,
            for id in ["a", "b"] { try await device.engine.save(note(id)) }
            #expect(try await bounded("the refused sync") { try await device.engine.sync() }.requiresSignIn)
            #expect(try await Device.needsSignIn(store: store))
            #expect(try await store.outbox.count() == 2)

            // when the person signs in (here, as another process would, through the store),
            try await Device.signIn(store: store, token: signedIn)

            // then the next sync sends everything with the new token.
            let summary = try await bounded("the sync after the sign-in") { try await device.engine.sync() }
            #expect(summary.synced == 2 && !summary.requiresSignIn)
            #expect(await server.applied.map(\.mutation.recordId) == ["a", "b"])
            #expect(transport.bearer.current == signedIn)
            #expect(try await !Device.needsSignIn(store: store))
        }
    }
}
