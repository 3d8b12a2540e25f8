import Foundation
import OutpostProtocol

/// The rules of time and form every bearer token meets, whoever signed it.
public struct TokenRules: Sendable, Hashable {
    /// How far an issuer's clock may run ahead of the server's, for `iat` and `nbf`.
    public var leeway: Duration
    /// The longest lifetime accepted: `exp` less `iat` (less now when there is no `iat`).
    public var maxLifetime: Duration

    public init(leeway: Duration = .seconds(60), maxLifetime: Duration = .seconds(30 * 24 * 3600)) {
        self.leeway = leeway
        self.maxLifetime = maxLifetime
    }

    /// Whether a token with these times is valid at `now`: not expired, not issued or valid only from later than
    /// the leeway allows, and not longer-lived than ``maxLifetime``.
    func accepts(expires: Date, issuedAt: Date?, notBefore: Date?, now: Date) -> Bool {
        let leeway = Double(self.leeway.components.seconds)
        guard expires > now else { return false }
        if let issuedAt, issuedAt.timeIntervalSince(now) > leeway { return false }
        if let notBefore, notBefore.timeIntervalSince(now) > leeway { return false }
        let start = min(issuedAt ?? now, now)
        return expires.timeIntervalSince(start) <= Double(maxLifetime.components.seconds)
    }
}

/// A JWT's header, read before its signature is checked: which key (`kid`) and which algorithm (`alg`) it
/// names. Nothing in it is trusted until the signature by that key, under that algorithm, verifies.
///
/// A header with `crit` is no token the server takes: it names extensions the recipient must understand, and
/// the server understands none (RFC 7515 §4.1.11).
struct TokenHeader: Decodable {
    var alg: String
    var kid: String?

    private enum Key: String, CodingKey {
        case alg, kid, crit
    }

    init(from decoder: any Decoder) throws {
        let header = try decoder.container(keyedBy: Key.self)
        guard !header.contains(.crit) else {
            throw DecodingError.dataCorruptedError(forKey: .crit, in: header, debugDescription: "no critical extension is understood")
        }
        alg = try header.decode(String.self, forKey: .alg)
        kid = try header.decodeIfPresent(String.self, forKey: .kid)
    }

    /// The header of a compact JWT, or nil when it is not one, or names critical extensions.
    init?(token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let data = Base64URL.decode(parts[0]).map({ Data($0) }),
            let header = try? JSONDecoder().decode(TokenHeader.self, from: data)
        else { return nil }
        self = header
    }
}
