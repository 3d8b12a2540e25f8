import Foundation
import JWTKit
import OutpostProtocol

/// Signs and verifies Outpost's bearer tokens: HS256 JWTs with the claims `tenant`, `sub`, `role`, `name`, `exp`,
/// and optionally `device`. A venue relay's token has the role `relay` and names its `scopes`; only this
/// authority issues one, never an identity provider.
public struct TokenAuthority: Sendable {
    /// The shortest secret accepted. Shorter HMAC keys are weak, and jwt-kit traps on them in debug builds.
    public static let minimumSecretLength = 32

    public struct Error: Swift.Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    private let keys: JWTKeyCollection
    private let rules: TokenRules

    /// - Throws: `TokenAuthority.Error` when the secret is shorter than ``minimumSecretLength`` bytes.
    public init(secret: [UInt8], rules: TokenRules = TokenRules()) async throws {
        guard secret.count >= Self.minimumSecretLength else {
            throw Error(description: "the JWT secret must be at least \(Self.minimumSecretLength) bytes long")
        }
        self.rules = rules
        self.keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
    }

    /// A signed token for `identity`, valid for `lifetime` from `now`.
    public func token(for identity: Identity, lifetime: Duration, now: Date) async throws -> String {
        let seconds = Double(lifetime.components.seconds) + Double(lifetime.components.attoseconds) / 1e18
        let claims = Claims(
            tenant: identity.tenant,
            sub: SubjectClaim(value: identity.userId),
            role: identity.relay == nil ? identity.role.rawValue : Self.relayRole,
            name: identity.name,
            device: identity.device,
            scopes: identity.relay?.scopes,
            iat: IssuedAtClaim(value: now),
            nbf: nil,
            exp: ExpirationClaim(value: now.addingTimeInterval(seconds))
        )
        return try await keys.sign(claims)
    }

    /// The identity a token proves, or `nil` when it is forged, malformed, expired or carries bad claims.
    public func identity(fromToken token: String, now: Date) async -> Identity? {
        await verified(token, now: now)?.identity
    }

    /// The identity a token proves and when the token expires, or `nil` as for ``identity(fromToken:now:)``.
    ///
    /// The header must name HS256, the one algorithm of this key; the times must meet the ``TokenRules``.
    public func verified(_ token: String, now: Date) async -> (identity: Identity, expires: Date)? {
        guard TokenHeader(token: token)?.alg == "HS256", let claims = try? await keys.verify(token, as: Claims.self) else { return nil }
        guard rules.accepts(expires: claims.exp.value, issuedAt: claims.iat?.value, notBefore: claims.nbf?.value, now: now),
            Identifier.isValid(claims.tenant),
            Identifier.isValid(claims.sub.value),
            claims.device.map(Identifier.isValid) ?? true
        else { return nil }
        if claims.role == Self.relayRole {
            guard let scopes = claims.scopes, !scopes.isEmpty, scopes.count <= Self.maxRelayScopes,
                scopes.allSatisfy(Identifier.isValid), claims.device == nil
            else { return nil }
            let identity = Identity.relay(
                tenant: claims.tenant, relayId: claims.sub.value, name: claims.name ?? claims.sub.value, scopes: scopes)
            return (identity, claims.exp.value)
        }
        guard let role = Role(rawValue: claims.role), claims.scopes == nil else { return nil }
        let identity = Identity(
            tenant: claims.tenant, userId: claims.sub.value, role: role, name: claims.name ?? claims.sub.value,
            device: claims.device)
        return (identity, claims.exp.value)
    }

    /// A fresh random secret of 32 bytes, for a server that was given none.
    public static func generateSecret() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    /// The `role` claim of a relay's token.
    static let relayRole = "relay"
    /// The most scopes one relay token names: a venue's events of a day.
    public static let maxRelayScopes = 64

    struct Claims: JWTPayload {
        var tenant: String
        var sub: SubjectClaim
        var role: String
        var name: String?
        /// The device id the token is bound to, if any.
        var device: String?
        /// A relay's scopes; absent from a person's token.
        var scopes: [String]?
        var iat: IssuedAtClaim?
        var nbf: NotBeforeClaim?
        var exp: ExpirationClaim

        // Expiry is checked against the injected clock in `identity(fromToken:now:)`.
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }
}
