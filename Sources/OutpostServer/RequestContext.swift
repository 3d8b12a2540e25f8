import Foundation
import Hummingbird
import OutpostProtocol

/// The request context of every Outpost route: Hummingbird's core storage plus the caller's identity.
public struct OutpostRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Set by the auth middleware on every `/v1` route.
    public var identity: Identity?
    /// When the bearer token of ``identity`` expires.
    public var tokenExpires: Date?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.identity = nil
    }

    /// The authenticated person; the auth middleware guarantees a caller on `/v1`. A relay's token is refused
    /// here, so that a route serves a relay only where it says so.
    func requireIdentity() throws -> Identity {
        guard let identity else { throw OutpostHTTPError.unauthorized(.unauthorized, "missing bearer token") }
        guard identity.relay == nil else {
            throw OutpostHTTPError.forbidden("a relay token only forwards a venue's writes and reads its events' records")
        }
        return identity
    }

    /// The calling relay and what its token allows; 403 for any other caller.
    func requireRelay() throws -> (identity: Identity, grant: RelayGrant) {
        guard let identity else { throw OutpostHTTPError.unauthorized(.unauthorized, "missing bearer token") }
        guard let grant = identity.relay else { throw OutpostHTTPError.forbidden("this needs a relay token") }
        return (identity, grant)
    }

    /// Who reads `collection` in `scope`: the person calling, or a relay reading one of its own scopes of a
    /// scoped collection, which reads as a supervisor does (every record of the scope).
    func requireReader(of collection: CollectionPolicy, scope: String?) throws -> Identity {
        guard let identity, let grant = identity.relay else { return try requireIdentity() }
        guard collection.scopeField != nil, let scope, grant.scopes.contains(scope) else {
            throw OutpostHTTPError.forbidden("a relay reads only the scopes its token names")
        }
        return Identity(tenant: identity.tenant, userId: identity.userId, role: .supervisor, name: identity.name)
    }
}
