import Foundation
import Hummingbird
import HummingbirdTesting
import JWTKit
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Tokens of an organization's own identity provider, verified against its JWKS served over real HTTP, with
/// keys the tests make.
@Suite("Signing in with an identity provider", .timeLimit(.minutes(5)))
struct IdentityProviderTests {
    typealias Provider = TestIdentityProvider

    static func push(_ client: any TestClientProtocol, token: String, record: String) async throws -> TestResponse {
        try await client.send(
            .post, "/v1/push", token: token,
            body: try Fixtures.json(PushRequest(deviceId: "phone-\(record)", mutations: [Fixtures.upsert(record, ["n": 1])])))
    }

    @Test(
        "RS256, ES256 and EdDSA tokens of the provider sign in, mapped to tenant, user, role and name; the server's own tokens no longer do",
        arguments: StorageKind.allCases)
    func providerTokens(kind: StorageKind) async throws {
        let keys = [try await Provider.rsa("rsa-1"), try await Provider.ec("ec-1"), try await Provider.ed("ed-1")]
        let provider = try await Provider(keys: keys)
        let now = Fixtures.serverNow.date
        try await withServer(kind, configure: { $0.identityProvider = provider.configuration() }) { client, _ in
            for (index, key) in keys.enumerated() {
                let token = try await Provider.token(key, Provider.claims(now: now))
                let response = try await Self.push(client, token: token, record: "r\(index)")
                #expect(response.status == .ok, "\(key.kid): \(String(buffer: response.body))")
            }
            // The organizer reads who wrote: the user and name from the claims, in the tenant of app_metadata.
            let organizer = try await Provider.token(keys[0], Provider.claims(user: "olga", role: "organizer", now: now))
            let audit = try await client.send(.get, "/v1/audit?collection=notes&recordId=r1", token: organizer)
            let entry = try #require(try JSONDecoder().decode(AuditResponse.self, from: audit.body).entries.first)
            #expect(entry.userId == "ana" && entry.userName == "Ana")
            // Staff may not read the audit: the role came from the token.
            let staff = try await Provider.token(keys[1], Provider.claims(now: now))
            #expect(try await client.send(.get, "/v1/audit?collection=notes&recordId=r1", token: staff).status == .forbidden)
            // A role array (Keycloak's realm roles) gives its highest Outpost role, beside other applications' roles.
            let roles = try await Provider.token(
                keys[2],
                Provider.claims(
                    now: now, changes: ["app_metadata": .object(["tenant": "acme", "role": .array(["offline_access", "staff", "organizer"])])]))
            #expect(try await client.send(.get, "/v1/audit?collection=notes&recordId=r1", token: roles).status == .ok)
            // With a provider, a token signed with the server's own secret is not a way in.
            let own = try await client.send(.get, "/v1/pull?collection=notes", token: try await Fixtures.token(role: .admin))
            #expect(own.status == .unauthorized)
        }
        await provider.stop()
    }

    /// Tokens the provider's keys sign (or claim to) that must not sign in, each for one fault.
    static func refusals(_ keys: [Provider.Key], now: Date) async throws -> [(String, String)] {
        let rsa = keys[0]
        let seconds = Int64(now.timeIntervalSince1970)
        var cases: [(String, String)] = []
        let faults: [(String, [String: JSONValue])] = [
            ("another issuer", ["iss": JSONValue.string("https://evil.example.org")]),
            ("another audience", ["aud": "someone-else"]),
            ("no audience", ["aud": .null]),
            ("expired", ["exp": .integer(seconds - 1)]),
            ("no expiry", ["exp": .null]),
            ("issued in the future", ["iat": .integer(seconds + 300)]),
            ("not valid yet", ["nbf": .integer(seconds + 300)]),
            ("an issue time that is text", ["iat": .string(String(seconds + 300))]),
            ("a start time that is text", ["nbf": .string(String(seconds + 300))]),
            ("an expiry that is text", ["exp": .string(String(seconds + 300))]),
            ("living a year", ["exp": .integer(seconds + 366 * 86400)]),
            ("no tenant", ["app_metadata": .object(["role": "staff"])]),
            ("an unknown role", ["app_metadata": .object(["tenant": "acme", "role": "boss"])]),
            ("no role", ["app_metadata": .object(["tenant": "acme"])]),
            (
                "roles of other applications only",
                ["app_metadata": .object(["tenant": "acme", "role": .array(["offline_access", "uma_authorization"])])]
            ),
            ("a user id that is not an identifier", ["sub": "../ana"]),
        ]
        for (name, changes) in faults {
            cases.append((name, try await Provider.token(rsa, Provider.claims(now: now, changes: changes))))
        }
        // Signed by the EC key while naming the RSA key: the header's algorithm is not that key's.
        cases.append(("another key's algorithm", try await keys[1].signer.sign(Provider.Payload(Provider.claims(now: now)), kid: "rsa-1")))
        // A critical header extension the server does not understand (RFC 7515 §4.1.11).
        var critical = JWTHeader()
        critical.crit = ["x-outpost"]
        critical.fields["x-outpost"] = .bool(true)
        cases.append(("a critical extension", try await rsa.signer.sign(Provider.Payload(Provider.claims(now: now)), kid: "rsa-1", header: critical)))
        // A key the provider does not publish.
        let rogue = try await Provider.rsa("rogue")
        cases.append(("an unpublished key", try await Provider.token(rogue, Provider.claims(now: now))))
        // HS256 with the RSA key's public JWK as the HMAC secret: symmetric algorithms are never taken from a key set.
        let claims = String(decoding: try JSONEncoder().encode(Provider.claims(now: now)), as: UTF8.self)
        cases.append(
            (
                "HS256 keyed with the public key",
                Fixtures.rawToken(header: #"{"alg":"HS256","kid":"rsa-1"}"#, claims: claims, secret: Array(rsa.jwk.utf8))
            ))
        cases.append(
            ("unsigned", Provider.base64URL(Data(#"{"alg":"none","kid":"rsa-1"}"#.utf8)) + "." + Provider.base64URL(Data(claims.utf8)) + "."))
        return cases
    }

    @Test(
        "a provider token with the wrong issuer, audience, times, claims, key or algorithm is 401 and writes nothing",
        arguments: StorageKind.allCases)
    func providerRefusals(kind: StorageKind) async throws {
        let keys = [try await Provider.rsa("rsa-1"), try await Provider.ec("ec-1")]
        let provider = try await Provider(keys: keys)
        let cases = try await Self.refusals(keys, now: Fixtures.serverNow.date)
        try await withServer(kind, configure: { $0.identityProvider = provider.configuration() }) { client, storage in
            for (name, token) in cases {
                let response = try await Self.push(client, token: token, record: "r1")
                #expect(response.status == .unauthorized, "\(name)")
                #expect(response.wireError?.code == .invalidToken, "\(name)")
            }
            #expect(try await storage.pullAll().records.isEmpty)
        }
        // With a default role, a token without one signs in as staff.
        try await withServer(kind, configure: { $0.identityProvider = provider.configuration(defaultRole: .staff) }) { client, _ in
            let roleless = try await Provider.token(
                keys[0], Provider.claims(now: Fixtures.serverNow.date, changes: ["app_metadata": .object(["tenant": "acme"])]))
            #expect(try await Self.push(client, token: roleless, record: "r2").status == .ok)
        }
        await provider.stop()
    }

    @Test(
        "a key set with keys the server cannot use (a symmetric key, an RSA key marked HS256, secp256k1, X25519) signs in with the others, before and after a rotation",
        arguments: StorageKind.allCases)
    func mixedKeySet(kind: StorageKind) async throws {
        let rsa = try await Provider.rsa("rsa-1")
        var marked = try #require(try JSONSerialization.jsonObject(with: Data(rsa.jwk.utf8)) as? [String: Any])
        marked["kid"] = "rsa-hs"
        marked["alg"] = "HS256"
        let point = Provider.base64URL(Data(repeating: 7, count: 32))
        let odd = [
            Provider.published("hmac-1", jwk: #"{"kty":"oct","kid":"hmac-1","alg":"HS256","k":"\#(point)"}"#),
            Provider.published("rsa-hs", jwk: String(decoding: try JSONSerialization.data(withJSONObject: marked), as: UTF8.self)),
            Provider.published("k1", jwk: #"{"kty":"EC","crv":"secp256k1","kid":"k1","x":"\#(point)","y":"\#(point)"}"#),
            Provider.published("x1", jwk: #"{"kty":"OKP","crv":"X25519","kid":"x1","x":"\#(point)"}"#),
        ]
        let provider = try await Provider(keys: odd + [rsa])
        let now = Fixtures.serverNow.date
        try await withServer(kind, configure: { $0.identityProvider = provider.configuration(unknownKeyInterval: .zero) }) { client, _ in
            let first = try await Self.push(client, token: try await Provider.token(rsa, Provider.claims(now: now)), record: "a")
            #expect(first.status == .ok, "\(String(buffer: first.body))")
            let rotated = try await Provider.ec("ec-2")
            provider.rotate(to: odd + [rotated])
            let second = try await Self.push(client, token: try await Provider.token(rotated, Provider.claims(now: now)), record: "b")
            #expect(second.status == .ok, "\(String(buffer: second.body))")
        }
        await provider.stop()
    }

    @Test("a rotated key is fetched on its first token; made-up key ids fetch at most once per interval; the old key stops working")
    func rotation() async throws {
        let old = try await Provider.rsa("2026-11")
        let new = try await Provider.ec("2026-12")
        let provider = try await Provider(keys: [old])
        let clock = ManualNow(Fixtures.serverNow.date)
        try await withServer(.sqlite, configure: { $0.identityProvider = provider.configuration() }, now: { clock.date }) { client, _ in
            #expect(try await Self.push(client, token: try await Provider.token(old, Provider.claims(now: clock.date)), record: "a").status == .ok)
            let fetched = provider.fetches
            #expect(fetched >= 1)

            provider.rotate(to: [new])
            #expect(try await Self.push(client, token: try await Provider.token(new, Provider.claims(now: clock.date)), record: "b").status == .ok)
            #expect(provider.fetches == fetched + 1)
            // The retired key is gone from the set: its tokens are refused.
            #expect(
                try await Self.push(client, token: try await Provider.token(old, Provider.claims(now: clock.date)), record: "c").status
                    == .unauthorized)

            // Twenty tokens naming keys nobody published, at once: no more fetches within the interval.
            for index in 0..<20 {
                let rogue = try await Provider.ed("made-up-\(index)")
                #expect(
                    try await Self.push(client, token: try await Provider.token(rogue, Provider.claims(now: clock.date)), record: "d").status
                        == .unauthorized)
            }
            #expect(provider.fetches == fetched + 1)
            // After the interval, one more unknown key id may fetch once.
            clock.advance(seconds: 31)
            let rogue = try await Provider.ed("made-up-late")
            #expect(
                try await Self.push(client, token: try await Provider.token(rogue, Provider.claims(now: clock.date)), record: "e").status
                    == .unauthorized)
            #expect(provider.fetches == fetched + 2)
        }
        await provider.stop()
    }

    @Test("a server with a key cache signs people in with the keys it kept when the provider cannot be reached")
    func keysKeptOnDisk() async throws {
        let key = try await Provider.rsa("rsa-1")
        let provider = try await Provider(keys: [key])
        let cache = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-keys-\(UUID()).json").path
        defer { try? FileManager.default.removeItem(atPath: cache) }
        var cached = provider.configuration()
        cached.cacheFile = cache
        let configuration = cached
        let token = try await Provider.token(key, Provider.claims(now: Fixtures.serverNow.date))
        // Online, the fetched set is kept, readable by this user only, and holds no private key.
        try await withServer(.sqlite, configure: { $0.identityProvider = configuration }) { client, _ async throws in
            #expect(try await Self.push(client, token: token, record: "a").status == .ok)
        }
        let kept = try String(contentsOfFile: cache, encoding: .utf8)
        #expect(kept.contains("rsa-1") && !kept.contains("\"d\""))
        let mode = try FileManager.default.attributesOfItem(atPath: cache)[.posixPermissions] as? Int
        #expect(mode == 0o600)

        // The provider gone, a server started again takes its tokens with the kept keys, and refuses others.
        await provider.stop()
        try await withServer(.sqlite, configure: { $0.identityProvider = configuration }) { client, _ in
            #expect(try await Self.push(client, token: token, record: "b").status == .ok)
            let stranger = try await Provider.rsa("rsa-2")
            let refused = try await Self.push(
                client, token: try await Provider.token(stranger, Provider.claims(now: Fixtures.serverNow.date)), record: "c")
            #expect(refused.status == .unauthorized)
        }
        // Without a cache, the same server cannot judge the token: 503, as before.
        var uncached = configuration
        uncached.cacheFile = nil
        let without = uncached
        try await withServer(.sqlite, configure: { $0.identityProvider = without }) { client, _ async throws in
            #expect(try await Self.push(client, token: token, record: "d").status == .serviceUnavailable)
        }
    }

    @Test("while the provider's keys cannot be fetched, its tokens get 503 to retry, not 401")
    func keysUnavailable() async throws {
        let key = try await Provider.rsa("rsa-1")
        let provider = try await Provider(keys: [key])
        var configuration = provider.configuration()
        await provider.stop()
        configuration.keys = .url(URL(string: "http://127.0.0.1:\(try TestPostgres.freePort())/jwks")!)
        try await withServer(.sqlite, configure: { $0.identityProvider = configuration }) { client, _ in
            let response = try await Self.push(
                client, token: try await Provider.token(key, Provider.claims(now: Fixtures.serverNow.date)), record: "a")
            #expect(response.status == .serviceUnavailable)
            #expect(response.wireError?.code == .serviceUnavailable)
            #expect(response.wireError?.message == "the identity provider's keys cannot be fetched; retry later")
            #expect(response.headers[.retryAfter] == "5")
        }
    }

    @Test("outpost serve with a JWKS file takes the provider's tokens and refuses its own; bad options are one line and exit 1")
    func serveWithProvider() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-idp-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let key = try await Provider.ed("ed-1")
        let jwks = root.appendingPathComponent("jwks.json")
        try #"{"keys":[\#(key.jwk)]}"#.write(to: jwks, atomically: true, encoding: .utf8)
        let data = root.appendingPathComponent("server").path

        for (arguments, message) in [
            (["--jwks-url", "http://id.example.org/jwks", "--issuer", "i", "--audience", "a"], "must be an https URL"),
            (["--jwks", jwks.path, "--audience", "a"], "--issuer (or $OUTPOST_JWT_ISSUER) is required"),
            (["--jwks", jwks.path, "--jwks-url", "https://id.example.org/jwks", "--issuer", "i", "--audience", "a"], "not both"),
        ] {
            let refused = try await OutpostProcess.run(["serve", "--port", "0", "--data-dir", data] + arguments)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains(message), "\(refused.stderr)")
        }

        let server = try await OutpostProcess.start([
            "serve", "--port", "0", "--data-dir", data, "--jwks", jwks.path, "--issuer", Provider.issuer, "--audience", Provider.audience,
            "--tenant-claim", "app_metadata.tenant", "--role-claim", "app_metadata.role",
        ])
        let port = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        func pull(_ token: String) async throws -> Int {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/pull?collection=notes")!)
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            return (try await URLSession.shared.data(for: request).1 as? HTTPURLResponse)?.statusCode ?? 0
        }
        #expect(try await pull(try await Provider.token(key, Provider.claims(now: Date()))) == 200)
        let own = try await OutpostProcess.run(["token", "--tenant", "acme", "--user", "ana", "--role", "admin", "--data-dir", data])
        #expect(try await pull(own.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) == 401)
        #expect(await server.stop() == 0)
    }
}
