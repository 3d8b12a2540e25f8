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
    }

    private let keys = LockedValue<Keys?>(nil)

    /// Derives every key from `secret`.
    func load(secret: [UInt8]) async throws {
        let tokens = try await TokenAuthority(secret: secret)
        // A separate key for continuation tokens, so that no JWT can ever pass for one.
        let continuation = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-snapshot-continuation".utf8), using: SymmetricKey(data: secret)))
        keys.withLock { $0 = Keys(tokens: tokens, continuation: continuation) }
    }

    func tokens() throws -> TokenAuthority {
        guard let keys = keys.withLock({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.tokens
    }

    func continuationKey() throws -> SymmetricKey {
        guard let keys = keys.withLock({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.continuation
    }
}
