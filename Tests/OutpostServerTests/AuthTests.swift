import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOFoundationCompat
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

@Suite("Authentication, roles and tenancy")
struct AuthTests {
    @Test("health and the OpenAPI document need no token")
    func openRoutes() async throws {
        try await withServer(.sqlite) { client, _ in
            let health = try await client.send(.get, "/health", token: nil)
            #expect(health.status == .ok)
            #expect(try JSONDecoder().decode(HealthResponse.self, from: health.body).status == "ok")
            let document = try await client.send(.get, "/openapi.yaml", token: nil)
            #expect(document.status == .ok)
            #expect(String(buffer: document.body).hasPrefix("openapi: 3.1.0"))
        }
    }

    @Test("a missing token is 401 with a challenge")
    func missingToken() async throws {
        try await withServer(.sqlite) { client, _ in
            let response = try await client.send(.get, "/v1/pull?collection=notes", token: nil)
            #expect(response.status == .unauthorized)
            #expect(response.headers[.wwwAuthenticate] == "Bearer")
            #expect(response.wireError?.code == .unauthorized)
        }
    }

    static let badTokens: [(String, @Sendable () async throws -> String)] = [
        ("garbage", { "not-a-jwt" }),
        ("expired", { try await Fixtures.token(lifetime: .seconds(-10)) }),
        (
            "forged with another secret",
            {
                try await Fixtures.token(secret: Array("another-secret-that-is-32-bytes-long!".utf8))
            }
        ),
        (
            "unsigned (alg none)",
            {
                let header = Data(#"{"alg":"none","typ":"JWT"}"#.utf8).base64EncodedString()
                let claims = Data(#"{"tenant":"acme","sub":"ana","role":"admin","name":"x","exp":4102444800}"#.utf8)
                    .base64EncodedString()
                return "\(header).\(claims)."
            }
        ),
        (
            "HS256-signed under another alg header",
            {
                Fixtures.rawToken(header: #"{"alg":"HS512","typ":"JWT"}"#, claims: Fixtures.claims(at: 0))
            }
        ),
        (
            "issued in the future (past the leeway)",
            {
                Fixtures.rawToken(claims: Fixtures.claims(at: 0, extra: #","iat":\#(Fixtures.serverSeconds + 300)"#))
            }
        ),
        (
            "not valid before a future time",
            {
                Fixtures.rawToken(claims: Fixtures.claims(at: 0, extra: #","nbf":\#(Fixtures.serverSeconds + 300)"#))
            }
        ),
        (
            "living a million years",
            {
                Fixtures.rawToken(claims: Fixtures.claims(at: 0, expiresIn: 1_000_000 * 365 * 86400))
            }
        ),
        (
            "a critical header extension the server does not understand",
            {
                Fixtures.rawToken(header: #"{"alg":"HS256","typ":"JWT","crit":["x-outpost"],"x-outpost":1}"#, claims: Fixtures.claims(at: 0))
            }
        ),
        (
            "tampered payload",
            {
                let token = try await Fixtures.token()
                var parts = token.split(separator: ".").map(String.init)
                parts[1] = Data(#"{"tenant":"globex","sub":"ana","role":"admin","name":"x","exp":4102444800}"#.utf8)
                    .base64EncodedString().replacingOccurrences(of: "=", with: "")
                return parts.joined(separator: ".")
            }
        ),
    ]

    @Test(
        "a malformed, expired, forged, unsigned, misheaded, early, too long-lived, critically extended or tampered token is 401",
        arguments: 0..<10)
    func badToken(index: Int) async throws {
        let token = try await Self.badTokens[index].1()
        try await withServer(.sqlite) { client, storage in
            let response = try await client.send(
                .post, "/v1/push", token: token,
                body: try Fixtures.json(PushRequest(deviceId: "d", mutations: [Fixtures.upsert("r1", ["n": 1])])))
            #expect(response.status == .unauthorized, "\(Self.badTokens[index].0)")
            #expect(response.wireError?.code == .invalidToken)
            #expect(try await storage.pullAll().records.isEmpty)
        }
    }

    @Test("a hand-made token that meets every rule is accepted: the bad ones above fail for their one fault")
    func handMadeTokenAccepted() async throws {
        try await withServer(.sqlite) { client, _ in
            let token = Fixtures.rawToken(claims: Fixtures.claims(at: 0, extra: #","iat":\#(Fixtures.serverSeconds + 30)"#))
            let response = try await client.send(.get, "/v1/pull?collection=notes", token: token)
            #expect(response.status == .ok)
        }
    }

    @Test("a malformed Authorization header is 401")
    func malformedHeader() async throws {
        try await withServer(.sqlite) { client, _ in
            let response = try await client.executeRequest(
                uri: "/v1/pull?collection=notes", method: .get, headers: [.authorization: "Basic YTpi"], body: nil)
            #expect(response.status == .unauthorized)
            #expect(response.wireError?.code == .invalidToken)
        }
    }

    @Test("staff may push and pull but not read the audit or conflicts")
    func staffLimits() async throws {
        try await withServer(.sqlite) { client, _ in
            let staff = try await Fixtures.token(role: .staff)
            let organizer = try await Fixtures.token(role: .organizer)
            for path in ["/v1/audit?collection=notes&recordId=r1", "/v1/conflicts"] {
                let refused = try await client.send(.get, path, token: staff)
                #expect(refused.status == .forbidden)
                #expect(refused.wireError?.code == .forbidden)
                #expect(try await client.send(.get, path, token: organizer).status == .ok)
            }
        }
    }

    @Test("only organizers write reference collections; the rest of a staff push still applies")
    func referenceWrites() async throws {
        try await withServer(.sqlite) { client, storage in
            let staff = try await Fixtures.token(role: .staff)
            let results = try await client.push(
                [
                    Fixtures.upsert("g1", ["event_id": "ev", "name": "A"], collection: "guests"),
                    Fixtures.upsert("n1", ["n": 1]),
                ], token: staff)
            #expect(results.results.map(\.status) == [.rejected, .applied])
            #expect(results.results[0].error?.code == .forbidden)
            #expect(try await storage.pullAll(collection: "guests").records.isEmpty)
            let organizer = try await Fixtures.token(role: .organizer)
            let allowed = try await client.push(
                [Fixtures.upsert("g1", ["event_id": "ev", "name": "A"], collection: "guests")], token: organizer)
            #expect(allowed.results[0].status == .applied)
        }
    }

    @Test("a token of tenant A can never read or change tenant B's data", arguments: StorageKind.allCases)
    func crossTenant(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let acme = try await Fixtures.token(tenant: "acme", role: .organizer)
            let globex = try await Fixtures.token(tenant: "globex", role: .admin)
            let mutation = Fixtures.upsert("r1", ["owner": "acme"], key: "k1")
            _ = try await client.push([mutation], token: acme)
            _ = try await client.push(
                [
                    Fixtures.upsert("g1", ["event_id": "ev", "name": "Acme guest"], collection: "guests"),
                    Fixtures.upsert("g2", ["event_id": "ev", "name": "Another"], collection: "guests"),
                ], token: acme)
            // Globex reads nothing of Acme's, by pull, snapshot, audit or conflicts.
            #expect(try await client.pull("collection=notes", token: globex).changes.isEmpty)
            let snapshot = try await client.send(.get, "/v1/snapshot?collection=guests", token: globex)
            #expect(try JSONDecoder().decode(SnapshotResponse.self, from: snapshot.body).records.isEmpty)
            let audit = try await client.send(.get, "/v1/audit?collection=notes&recordId=r1", token: globex)
            #expect(try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries.isEmpty)
            // Globex replaying Acme's key and record id writes only Globex's own record.
            let replay = try await client.push([Fixtures.upsert("r1", ["owner": "globex"], key: "k1")], token: globex)
            #expect(replay.results[0].status == .applied)
            #expect(try await storage.pullAll(tenant: "acme").records.first?.fields["owner"] == "acme")
            // A continuation token of Acme's is refused to Globex.
            let page = try await client.send(.get, "/v1/snapshot?collection=guests&limit=1", token: acme)
            let acmePage = try JSONDecoder().decode(SnapshotResponse.self, from: page.body)
            #expect(acmePage.records.count == 1)
            let continuation = try #require(acmePage.continuation)
            let stolen = try await client.send(
                .get, "/v1/snapshot?collection=guests&limit=1&continuation=\(continuation)", token: globex)
            #expect(stolen.status == .badRequest)
        }
    }

    @Test("the TokenAuthority refuses secrets shorter than 32 bytes")
    func shortSecret() async {
        await #expect(throws: TokenAuthority.Error.self) {
            _ = try await TokenAuthority(secret: Array("short".utf8))
        }
    }
}
