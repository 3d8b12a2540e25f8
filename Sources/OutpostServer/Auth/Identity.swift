import OutpostProtocol

/// Who is calling: the verified claims of the request's bearer token.
public struct Identity: Sendable, Hashable {
    public var tenant: String
    /// The token subject: the user's id.
    public var userId: String
    public var role: Role
    /// The display name, for the audit and the sync monitor.
    public var name: String
    /// The one device id the token may speak for (its `device` claim), or nil for any the user owns.
    public var device: String?

    public init(tenant: String, userId: String, role: Role, name: String, device: String? = nil) {
        self.tenant = tenant
        self.userId = userId
        self.role = role
        self.name = name
        self.device = device
    }

    /// The caller a request counts against at admission: a user of a tenant, whatever device they use.
    var admissionKey: String { "\(tenant)\u{0}\(userId)" }

    /// Throws 403 unless this identity holds `role` or a higher one.
    func require(_ role: Role) throws {
        guard self.role >= role else {
            throw OutpostHTTPError.forbidden("this needs the \(role.rawValue) role")
        }
    }
}
