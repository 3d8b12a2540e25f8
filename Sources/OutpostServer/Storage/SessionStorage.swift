import Foundation
import OutpostProtocol

/// A sign-in to the sync monitor, or a single-use code that starts one, stored under the SHA-256 of its
/// secret: a copy of the store cannot be used to sign in.
package struct AdminGrant: Sendable, Hashable {
    package enum Kind: String, Sendable {
        /// A browser session, named by the opaque id in its cookie.
        case session
        /// A sign-in link's code: used once, within minutes.
        case code
    }

    package var kind: Kind
    /// The SHA-256 of the secret, hex.
    package var hash: String
    package var identity: Identity
    /// The token that must accompany a state-changing form of this session (sign-out), random; empty for a code.
    package var csrf: String
    /// Milliseconds since 1970: the grant is void at and after it.
    package var expiresAt: Int64
    /// For a code, when the session it starts must end (the token it was made with expires); for a session, equal
    /// to ``expiresAt``.
    package var sessionExpiresAt: Int64

    package init(kind: Kind, hash: String, identity: Identity, csrf: String, expiresAt: Int64, sessionExpiresAt: Int64) {
        self.kind = kind
        self.hash = hash
        self.identity = identity
        self.csrf = csrf
        self.expiresAt = expiresAt
        self.sessionExpiresAt = sessionExpiresAt
    }
}

/// The monitor's sessions and sign-in codes.
package protocol SessionStorage: Sendable {
    /// Stores `grant`, and forgets grants that expired before `now`.
    func storeGrant(_ grant: AdminGrant, now: Int64) async throws

    /// The grant of `kind` stored under `hash`, unless it expired at `now`.
    func grant(_ kind: AdminGrant.Kind, hash: String, now: Int64) async throws -> AdminGrant?

    /// Removes the grant of `kind` under `hash` and returns it, unless it had expired at `now`: a code is used once,
    /// a session ends.
    func takeGrant(_ kind: AdminGrant.Kind, hash: String, now: Int64) async throws -> AdminGrant?
}
