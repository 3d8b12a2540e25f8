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

    /// The authenticated caller; the auth middleware guarantees it on `/v1`.
    func requireIdentity() throws -> Identity {
        guard let identity else { throw OutpostHTTPError.unauthorized(.unauthorized, "missing bearer token") }
        return identity
    }
}
