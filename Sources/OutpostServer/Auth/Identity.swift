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
    /// Set for a venue relay's token: the relay itself, not a person. Such a token reads and forwards within its
    /// scopes through the relay routes only; every other route refuses it, whatever ``role`` says.
    public var relay: RelayGrant?

    public init(tenant: String, userId: String, role: Role, name: String, device: String? = nil) {
        self.tenant = tenant
        self.userId = userId
        self.role = role
        self.name = name
        self.device = device
    }

    /// A venue relay's identity: `relayId` is the token's subject, and it acts in `scopes` only.
    public static func relay(tenant: String, relayId: String, name: String, scopes: [String]) -> Identity {
        var identity = Identity(tenant: tenant, userId: relayId, role: .staff, name: name)
        identity.relay = RelayGrant(scopes: scopes)
        return identity
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

/// What a relay token allows: reading the records of its scopes (the rosters of its events and what was written
/// in them) and forwarding the writes the tenant's people made in those scopes at the venue, in their name.
public struct RelayGrant: Sendable, Hashable {
    /// The scopes (events) the relay serves; never empty.
    public var scopes: [String]

    public init(scopes: [String]) {
        self.scopes = scopes
    }

    /// The most a relay may claim for a person whose writes it forwards: a relay at a venue carries the writes of
    /// staff, supervisors and organizers, never an admin's.
    public static let highestForwardedRole = Role.organizer
}
