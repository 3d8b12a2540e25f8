import OutpostProtocol

/// Who is calling: the verified claims of the request's bearer token.
public struct Identity: Sendable, Hashable {
    public var tenant: String
    /// The token subject: the user's id.
    public var userId: String
    public var role: Role
    /// The display name, for the audit and the sync monitor.
    public var name: String

    public init(tenant: String, userId: String, role: Role, name: String) {
        self.tenant = tenant
        self.userId = userId
        self.role = role
        self.name = name
    }

    /// Throws 403 unless this identity holds `role` or a higher one.
    func require(_ role: Role) throws {
        guard self.role >= role else {
            throw OutpostHTTPError.forbidden("this needs the \(role.rawValue) role")
        }
    }
}
