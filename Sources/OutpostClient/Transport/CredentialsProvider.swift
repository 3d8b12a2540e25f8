/// Renews the bearer token a transport sends when the server refuses the one it has.
///
/// Tokens expire (after 12 h by default), sooner than a device may stay offline; a device back after a day
/// finds its token refused. An app gives ``Outpost`` (or a transport it makes itself)
/// a provider that signs in again against its identity provider, silently where it can (a refresh token it
/// keeps, for instance):
///
/// ```swift
/// struct IdentityProviderCredentials: CredentialsProvider {
///     let identity: MyIdentityClient
///     func refreshedToken(after rejected: String) async throws -> String? {
///         try await identity.renewSilently()?.accessToken  // nil: the person must sign in again
///     }
/// }
/// let device = try await Device.open(store: store, credentials: IdentityProviderCredentials(identity: identity))
/// ```
///
/// A refused token never costs the device its work: queued records stay queued until a token is accepted.
public protocol CredentialsProvider: Sendable {
    /// A token to use instead of `rejected`, which the server has just refused (HTTP 401: expired, revoked or
    /// signed with another key); nil when none can be had without the person, who must then sign in again.
    ///
    /// The refused request is sent once more with the new token, and every later request uses it. Each refusal
    /// asks again, so answer nil quickly when there is nothing to renew with; requests refused at the same time
    /// may ask concurrently with the same `rejected` token.
    ///
    /// - Throws: ends the refused request with the error thrown. Throw a ``TransportError`` of kind
    ///   ``TransportError/Kind/network`` when the identity provider cannot be reached, so that the request is
    ///   retried later like any other network failure.
    func refreshedToken(after rejected: String) async throws -> String?

    /// A token to use instead of `expiring`, which the server still takes but which expires within minutes (see
    /// ``BearerToken``); nil to go on with it. By default ``refreshedToken(after:)`` answers.
    func renewedToken(before expiring: String) async throws -> String?
}

extension CredentialsProvider {
    public func renewedToken(before expiring: String) async throws -> String? {
        try await refreshedToken(after: expiring)
    }
}
