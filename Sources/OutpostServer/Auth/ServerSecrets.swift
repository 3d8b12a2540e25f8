import Crypto
import Foundation

/// The keys derived from the server's secret, loaded once storage is up at start-up.
///
/// Until then every authenticated request is answered 503, never let through.
package final class ServerSecrets: Sendable {
    package init() {}
    private struct Keys {
        var tokens: TokenAuthority
        var continuation: SymmetricKey
        var fingerprint: SymmetricKey
        var cursors: CursorSealer
    }

    private let keys = LockedValue<Keys?>(nil)

    /// Derives every key from `secret`.
    func load(secret: [UInt8]) async throws {
        let tokens = try await TokenAuthority(secret: secret)
        // A separate key for continuation tokens, so that no JWT can ever pass for one.
        let continuation = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-snapshot-continuation".utf8), using: SymmetricKey(data: secret)))
        // And one for device fingerprints: every server sharing the secret computes the same ones.
        let fingerprint = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-device-fingerprint".utf8), using: SymmetricKey(data: secret)))
        // And one for pull cursors, which it seals.
        let cursors = CursorSealer(secret: SymmetricKey(data: secret))
        keys.withLock {
            $0 = Keys(tokens: tokens, continuation: continuation, fingerprint: fingerprint, cursors: cursors)
        }
    }

    func tokens() throws -> TokenAuthority {
        guard let keys = keys.withLock({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.tokens
    }

    func cursorSealer() throws -> CursorSealer {
        guard let keys = keys.withLock({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.cursors
    }

    func continuationKey() throws -> SymmetricKey {
        guard let keys = keys.withLock({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.continuation
    }

    /// A device's fingerprint in a tenant: a keyed hash of both ids, so that one physical device at two
    /// tenants' events has two unrelated fingerprints, and the id cannot be recovered from either.
    func fingerprint(tenant: String, deviceId: String) throws -> String {
        guard let keys = keys.withLock({ $0 }) else { throw OutpostHTTPError.unavailable }
        let code = HMAC<SHA256>.authenticationCode(for: Array("\(tenant)\u{0}\(deviceId)".utf8), using: keys.fingerprint)
        return code.prefix(8).hexString
    }
}
