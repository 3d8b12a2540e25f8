import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOFoundationCompat
import OutpostProtocol
import Testing

@testable import OutpostServer

/// Runs the real application (the same `buildApplication` as `main`) on a fresh store, with a fixed clock.
func withServer(
    _ kind: StorageKind,
    setup: TestingSetup = .router,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    now: @escaping @Sendable () -> Date = { Fixtures.serverNow.date },
    metrics: ServerMetrics = ServerMetrics(),
    _ body: @escaping @Sendable (any TestClientProtocol, any SyncStorage) async throws -> Void
) async throws {
    var configuration = ServerConfiguration(port: 0, jwtSecret: Fixtures.secret)
    // The server's clock stands still here: tests that deliver connectors run a delivery of their own on their clock.
    configuration.deliversConnectors = false
    // The tests' receivers listen on loopback.
    configuration.allowsLoopbackReceivers = true
    // The live test client holds one connection for the whole test: it connects as the server starts, and may next
    // ask only after the test has worked elsewhere for a while, which a loaded machine stretches past the 10 s and
    // 60 s a real client is given. A test of either bound sets its own.
    configuration.requestHeadTimeout = .seconds(600)
    configuration.idleTimeout = .seconds(600)
    configure(&configuration)
    switch kind {
    case .sqlite:
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-test-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await run(SQLiteStorage(directory: directory), configuration, setup, now, metrics, body)
    case .postgres, .postgresFileDirectory:
        let url = try await TestPostgres.shared.makeDatabase()
        let (storage, files) = try kind.postgres(url: url)
        defer { if let files { try? FileManager.default.removeItem(at: files) } }
        try await run(storage, configuration, setup, now, metrics, body)
        await TestPostgres.shared.dropDatabase(url: url)
    }
}

private func run<Storage: SyncStorage>(
    _ storage: Storage, _ configuration: ServerConfiguration, _ setup: TestingSetup,
    _ now: @escaping @Sendable () -> Date, _ metrics: ServerMetrics,
    _ body: @escaping @Sendable (any TestClientProtocol, any SyncStorage) async throws -> Void
) async throws {
    let app = try buildApplication(
        configuration: configuration, storage: storage, now: now, metrics: metrics, logger: Fixtures.quietLogger)
    try await app.test(setup) { client in try await body(client, storage) }
}

extension Fixtures {
    /// The server's clock in these tests: an hour after the device-side ``now``.
    static let serverNow = time(3600)

    static func token(
        tenant: String = "acme", user: String = "ana", role: Role = .staff, name: String = "Ana Staff",
        lifetime: Duration = .seconds(3600), secret: [UInt8] = Fixtures.secret, device: String? = nil
    ) async throws -> String {
        let authority = try await TokenAuthority(secret: secret)
        return try await authority.token(
            for: Identity(tenant: tenant, userId: user, role: role, name: name, device: device), lifetime: lifetime,
            now: serverNow.date)
    }

    /// The server's clock in seconds since 1970.
    static var serverSeconds: Int64 { serverNow.millisecondsSince1970 / 1000 }

    /// A staff token's claims as JSON, issued `at` seconds after the server's now, expiring `expiresIn` after.
    static func claims(at offset: Int64, expiresIn: Int64 = 3600, extra: String = "") -> String {
        let issued = serverSeconds + offset
        return #"{"tenant":"acme","sub":"ana","role":"staff","name":"Ana","exp":\#(issued + expiresIn)\#(extra)}"#
    }

    /// A compact JWT of `header` and `claims` as given, signed with HMAC-SHA256 and `secret` whatever the header
    /// says: for tokens a well-behaved issuer would never make.
    static func rawToken(header: String = #"{"alg":"HS256","typ":"JWT"}"#, claims: String, secret: [UInt8] = Fixtures.secret) -> String {
        func base64URL(_ data: some DataProtocol) -> String {
            Data(data).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        let input = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
        let signature = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: secret))
        return input + "." + base64URL(Data(signature))
    }

    static func json(_ value: some Encodable) throws -> ByteBuffer {
        ByteBuffer(bytes: try JSONEncoder().encode(value))
    }
}

extension TestClientProtocol {
    /// Sends a request with a bearer token and an optional raw body.
    func send(
        _ method: HTTPRequest.Method, _ uri: String, token: String?, body: ByteBuffer? = nil, headers: HTTPFields = [:]
    ) async throws -> TestResponse {
        var headers = headers
        if let token { headers[.authorization] = "Bearer \(token)" }
        if body != nil, headers[.contentType] == nil { headers[.contentType] = "application/json" }
        return try await executeRequest(uri: uri, method: method, headers: headers, body: body)
    }

    /// A push as this build's devices send it, naming every ``ProtocolFeature``; with `features` nil, as a device
    /// of a build before them.
    func push(
        _ mutations: [Mutation], token: String, device: String = "dev-a", features: String? = ProtocolFeature.allNames
    ) async throws -> PushResponse {
        let response = try await send(
            .post, "/v1/push", token: token, body: try Fixtures.json(PushRequest(deviceId: device, mutations: mutations)),
            headers: features.map { [.outpostFeatures: $0] } ?? [:])
        #expect(response.status == .ok)
        return try JSONDecoder().decode(PushResponse.self, from: response.body)
    }

    /// POSTs `value` as JSON with a bearer token.
    func post(_ uri: String, _ value: some Encodable, token: String?) async throws -> TestResponse {
        try await send(.post, uri, token: token, body: try Fixtures.json(value))
    }

    func pull(_ query: String, token: String) async throws -> PullResponse {
        let response = try await send(.get, "/v1/pull?\(query)", token: token)
        #expect(response.status == .ok)
        return try JSONDecoder().decode(PullResponse.self, from: response.body)
    }
}

extension TestResponse {
    /// The wire error this response carries; records an issue when it is not one.
    var wireError: WireError? {
        #expect(headers[.contentType]?.hasPrefix("application/json") == true)
        return try? JSONDecoder().decode(WireError.self, from: body)
    }
}
