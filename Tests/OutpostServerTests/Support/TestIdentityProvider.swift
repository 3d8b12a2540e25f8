import Foundation
import Hummingbird
import JWTKit
import NIOConcurrencyHelpers
import OutpostProtocol
import _CryptoExtras

@testable import OutpostServer

/// An identity provider for tests: RS256, ES256 and EdDSA keys made here, their public JWKS served over real
/// HTTP on loopback (counting fetches), and tokens signed the way Firebase, Supabase or Auth0 sign them.
final class TestIdentityProvider: Sendable {
    static let issuer = "https://id.example.org/acme-app"
    static let audience = "outpost-acme"

    /// A signing key: its key id, the JWK of its public half, and the private key in a collection.
    struct Key: Sendable {
        var kid: String
        var jwk: String
        var signer: JWTKeyCollection
    }

    private let served = NIOLockedValueBox<(keys: [String], fetches: Int)>(([], 0))
    private let task: Task<Void, any Error>
    let url: URL

    var fetches: Int { served.withLockedValue { $0.fetches } }

    /// Serves `keys` as the JWKS until ``stop()``.
    init(keys: [Key]) async throws {
        served.withLockedValue { $0.keys = keys.map(\.jwk) }
        let router = Router()
        router.get("jwks") { [served] _, _ -> Response in
            let body = served.withLockedValue { state -> String in
                state.fetches += 1
                return #"{"keys":[\#(state.keys.joined(separator: ","))]}"#
            }
            return Response(
                status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        let (task, port) = try await LoopbackApp.start(router, "the JWKS server")
        self.task = task
        url = URL(string: "http://127.0.0.1:\(port)/jwks")!
    }

    /// Serves `keys` from now on: a rotation.
    func rotate(to keys: [Key]) {
        served.withLockedValue { $0.keys = keys.map(\.jwk) }
    }

    func stop() async {
        task.cancel()
        _ = try? await task.value
    }

    func configuration(
        tenantClaim: String = "app_metadata.tenant", defaultRole: Role? = nil, unknownKeyInterval: Duration = .seconds(30)
    ) -> IdentityProviderConfiguration {
        IdentityProviderConfiguration(
            keys: .url(url), issuer: Self.issuer, audience: Self.audience, tenantClaim: tenantClaim, roleClaim: "app_metadata.role",
            defaultRole: defaultRole, unknownKeyInterval: unknownKeyInterval)
    }

    // MARK: Keys

    /// A key published as `jwk` with no private half here: one of the keys a provider's set holds for others.
    static func published(_ kid: String, jwk: String) -> Key {
        Key(kid: kid, jwk: jwk, signer: JWTKeyCollection())
    }

    static func rsa(_ kid: String) async throws -> Key {
        let key = try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
        let (modulus, exponent) = try key.publicKey.getKeyPrimitives()
        let signer = JWTKeyCollection()
        await signer.add(rsa: key, digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid))
        return Key(
            kid: kid, jwk: #"{"kty":"RSA","alg":"RS256","use":"sig","kid":"\#(kid)","n":"\#(base64URL(modulus))","e":"\#(base64URL(exponent))"}"#,
            signer: signer)
    }

    static func ec(_ kid: String) async throws -> Key {
        let key = ES256PrivateKey()
        guard let parameters = key.publicKey.parameters else { throw TestSetupError("no EC parameters") }
        let signer = JWTKeyCollection()
        await signer.add(ecdsa: key, kid: JWKIdentifier(string: kid))
        return Key(
            kid: kid, jwk: #"{"kty":"EC","alg":"ES256","crv":"P-256","kid":"\#(kid)","x":"\#(parameters.x)","y":"\#(parameters.y)"}"#,
            signer: signer)
    }

    static func ed(_ kid: String) async throws -> Key {
        let key = try EdDSA.PrivateKey(curve: .ed25519)
        let signer = JWTKeyCollection()
        await signer.add(eddsa: key, kid: JWKIdentifier(string: kid))
        return Key(
            kid: kid, jwk: #"{"kty":"OKP","alg":"EdDSA","crv":"Ed25519","kid":"\#(kid)","x":"\#(base64URL(key.publicKey.rawRepresentation))"}"#,
            signer: signer)
    }

    static func base64URL(_ data: some DataProtocol) -> String {
        Data(data).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    // MARK: Tokens

    /// A provider's token payload, any claims.
    struct Payload: JWTPayload {
        var claims: [String: JSONValue]

        init(_ claims: [String: JSONValue]) { self.claims = claims }
        init(from decoder: any Decoder) throws { claims = try decoder.singleValueContainer().decode([String: JSONValue].self) }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(claims)
        }
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// The claims of a good token for `user` at `now`, as Supabase lays them out; `changes` replaces or adds
    /// claims (`.null` removes one).
    static func claims(
        user: String = "ana", role: String? = "staff", now: Date, lifetime: TimeInterval = 3600, changes: [String: JSONValue] = [:]
    ) -> [String: JSONValue] {
        var metadata: [String: JSONValue] = ["tenant": "acme"]
        if let role { metadata["role"] = .string(role) }
        var claims: [String: JSONValue] = [
            "iss": .string(issuer), "aud": .array(["other-app", .string(audience)]), "sub": .string(user),
            "name": .string(user.capitalized), "iat": .integer(Int64(now.timeIntervalSince1970)),
            "exp": .integer(Int64(now.timeIntervalSince1970 + lifetime)), "app_metadata": .object(metadata),
        ]
        for (name, value) in changes {
            if value == .null { claims[name] = nil } else { claims[name] = value }
        }
        return claims
    }

    static func token(_ key: Key, _ claims: [String: JSONValue]) async throws -> String {
        try await key.signer.sign(Payload(claims), kid: JWKIdentifier(string: key.kid))
    }
}
