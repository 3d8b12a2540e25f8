import Foundation
import NIOConcurrencyHelpers
import OutpostProtocol

/// The bearer token a transport sends, renewed through a ``CredentialsProvider`` before it expires and when the
/// server refuses it.
///
/// `HTTPSyncTransport` (OutpostHTTP) keeps one; a transport of an app's own can share the same rule by sending its requests
/// through ``authorizing(_:)``. Safe to use from many tasks at once: the token sits behind a lock, and a renewed
/// token is the one every later request sends.
public final class BearerToken: Sendable {
    private let token: NIOLockedValueBox<String>
    private let credentials: (any CredentialsProvider)?
    private let renewBefore: Duration
    private let now: @Sendable () -> Date
    /// The token whose renewal before expiry the provider last declined: it is not asked again for it.
    private let declined = NIOLockedValueBox<String?>(nil)

    /// - Parameters:
    ///   - token: the token to send until it nears its expiry or the server refuses it.
    ///   - credentials: asked for a fresh token when the one sent expires within `renewBefore` (its JWT `exp`),
    ///     and when the server refuses one; without it a refusal ends the request.
    ///   - renewBefore: how long before its expiry a token is renewed, so that a device never sends an expired
    ///     one while its provider can give another.
    public init(
        _ token: String, credentials: (any CredentialsProvider)? = nil, renewBefore: Duration = .seconds(300),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.token = NIOLockedValueBox(token)
        self.credentials = credentials
        self.renewBefore = renewBefore
        self.now = now
    }

    /// When `token` expires, from its JWT `exp` claim; nil for a token that names none.
    static func expiry(of token: String) -> Date? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
            case .object(let claims)? = try? JSONDecoder().decode(JSONValue.self, from: Data(payload)),
            let exp = claims["exp"]
        else { return nil }
        switch exp {
        case .integer(let seconds): return Date(timeIntervalSince1970: TimeInterval(seconds))
        case .number(let seconds): return Date(timeIntervalSince1970: seconds)
        default: return nil
        }
    }

    /// Asks the provider for a token in place of the current one when it expires within ``renewBefore``; keeps
    /// the current one when the provider has none, or cannot be reached (it is still valid). A token already past
    /// its expiry by the device's clock is left to the server's answer: that clock may be wrong.
    private func renewIfExpiring() async {
        guard let credentials else { return }
        let sent = current
        guard let expiry = Self.expiry(of: sent), declined.withLockedValue({ $0 }) != sent else { return }
        let remaining = expiry.timeIntervalSince(now())
        guard remaining > 0, remaining <= renewBefore / .seconds(1) else { return }
        guard let fresh = try? await credentials.renewedToken(before: sent), !fresh.isEmpty, fresh != sent else {
            declined.withLockedValue { $0 = sent }
            return
        }
        token.withLockedValue { if $0 == sent { $0 = fresh } }
    }

    /// The token requests send now.
    public var current: String { token.withLockedValue { $0 } }

    /// Runs `request` with the current token; when the server refuses it (a ``TransportError`` with status 401),
    /// runs it once more with a fresh token from the provider, which later requests keep using.
    ///
    /// - Throws: what `request` or the provider throws. A refusal that no fresh token cures is
    ///   ``TransportError/signInRequired(wire:)``: the person must sign in again.
    public func authorizing<T>(_ request: (String) async throws -> T) async throws -> T {
        await renewIfExpiring()
        let sent = current
        do {
            return try await request(sent)
        } catch let error as TransportError where error.requiresSignIn {
            guard let fresh = try await freshToken(replacing: sent) else {
                throw TransportError.signInRequired(wire: error.wire)
            }
            do {
                return try await request(fresh)
            } catch let again as TransportError where again.requiresSignIn {
                throw TransportError.signInRequired(wire: again.wire)
            }
        }
    }

    /// A token other than `rejected`: one another request renewed meanwhile, or else the provider's.
    private func freshToken(replacing rejected: String) async throws -> String? {
        let now = current
        if now != rejected { return now }
        guard let fresh = try await credentials?.refreshedToken(after: rejected), !fresh.isEmpty, fresh != rejected
        else { return nil }
        token.withLockedValue { $0 = fresh }
        return fresh
    }
}

extension TransportError {
    /// What a refused token's error says. It names no way to sign in: an app (or the CLI) adds its own.
    public static let signInAgainMessage = "the token is invalid or expired: sign in again"

    /// The server refused the token (HTTP 401) and no fresh one could be had: the person must sign in again.
    /// Nothing queued is lost; it goes out once a token is accepted.
    public static func signInRequired(wire: WireError? = nil) -> TransportError {
        TransportError(kind: .server, status: 401, wire: wire, message: signInAgainMessage)
    }

    /// Whether the server refused the token (HTTP 401): only a new token, not a retry, gets past it.
    public var requiresSignIn: Bool { kind == .server && status == 401 }
}
