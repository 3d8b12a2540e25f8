import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import OutpostRecords

/// The keys derived from the server's secret, loaded once storage is up at start-up, and the organization's
/// identity provider when one is configured.
///
/// Until then every authenticated request is answered 503, never let through.
package final class ServerSecrets: Sendable {
    /// Verifies bearer tokens in place of the server's own HS256 tokens, when configured.
    package let identityProvider: IdentityProvider?
    private let rules: TokenRules

    package init(configuration: ServerConfiguration = ServerConfiguration(), logger: Logger = Logger(label: "outpost.identity")) {
        rules = configuration.tokenRules
        identityProvider = configuration.identityProvider.map {
            IdentityProvider(configuration: $0, rules: configuration.tokenRules, logger: logger)
        }
    }
    private struct Keys {
        var tokens: TokenAuthority
        var continuation: SymmetricKey
        var fingerprint: SymmetricKey
        var cursors: CursorSealer
        var recordIds: SymmetricKey
        var fileLinks: SymmetricKey
    }

    private let keys = NIOLockedValueBox<Keys?>(nil)

    /// Derives every key from `secret`.
    func load(secret: [UInt8]) async throws {
        let tokens = try await TokenAuthority(secret: secret, rules: rules)
        // A separate key for continuation tokens, so that no JWT can ever pass for one.
        let continuation = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-snapshot-continuation".utf8), using: SymmetricKey(data: secret)))
        // And one for device fingerprints: every server sharing the secret computes the same ones.
        let fingerprint = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-device-fingerprint".utf8), using: SymmetricKey(data: secret)))
        // And one for pull cursors, which it seals.
        let cursors = CursorSealer(secret: SymmetricKey(data: secret))
        // And one from which each user's key for record ids (`Attendance.IdKey`) is derived.
        let recordIds = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-record-ids".utf8), using: SymmetricKey(data: secret)))
        // And one that signs links to files (``FileLinks``).
        let fileLinks = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-file-links".utf8), using: SymmetricKey(data: secret)))
        keys.withLockedValue {
            $0 = Keys(
                tokens: tokens, continuation: continuation, fingerprint: fingerprint, cursors: cursors,
                recordIds: recordIds, fileLinks: fileLinks)
        }
    }

    /// Who a bearer token proves the caller is: a token of the identity provider when one is configured,
    /// else one the server signed with its secret. A venue relay's token is always one the server signed: an
    /// identity provider signs people's tokens only.
    func bearer(_ token: String, now: Date) async throws -> TokenVerdict {
        if let identityProvider {
            if let (identity, expires) = try await tokens().verified(token, now: now), identity.relay != nil {
                return .valid(identity, expires: expires)
            }
            return await identityProvider.verdict(token, now: now)
        }
        guard let (identity, expires) = try await tokens().verified(token, now: now) else { return .invalid }
        return .valid(identity, expires: expires)
    }

    /// The server's own tokens: those `outpost token` prints without an identity provider, and the monitor's
    /// sessions always.
    func tokens() throws -> TokenAuthority {
        guard let keys = keys.withLockedValue({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.tokens
    }

    func cursorSealer() throws -> CursorSealer {
        guard let keys = keys.withLockedValue({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.cursors
    }

    func fileLinkKey() throws -> SymmetricKey {
        guard let keys = keys.withLockedValue({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.fileLinks
    }

    func continuationKey() throws -> SymmetricKey {
        guard let keys = keys.withLockedValue({ $0 }) else { throw OutpostHTTPError.unavailable }
        return keys.continuation
    }

    /// The key of a user's attendance record ids: every server sharing the secret derives the same one.
    func attendanceKey(tenant: String, userId: String) throws -> Attendance.IdKey {
        guard let keys = keys.withLockedValue({ $0 }) else { throw OutpostHTTPError.unavailable }
        return Attendance.IdKey.derive(tenant: tenant, userId: userId, from: keys.recordIds)
    }

    /// A device's fingerprint in a tenant: a keyed hash of both ids, so that one physical device at two
    /// tenants' events has two unrelated fingerprints, and the id cannot be recovered from either.
    func fingerprint(tenant: String, deviceId: String) throws -> String {
        guard let keys = keys.withLockedValue({ $0 }) else { throw OutpostHTTPError.unavailable }
        let code = HMAC<SHA256>.authenticationCode(for: Array("\(tenant)\u{0}\(deviceId)".utf8), using: keys.fingerprint)
        return code.prefix(8).hexString
    }
}
