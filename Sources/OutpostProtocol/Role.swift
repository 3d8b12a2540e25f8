/// What a token's holder may do. Each role may do everything the roles before it may.
public enum Role: String, Sendable, Codable, CaseIterable, Comparable {
    /// Field staff: push and pull; in collections of own records, only their own.
    case staff
    /// Also reads every record of the tenant, the collections of own records included (to review offline
    /// entries), but changes only their own, as staff do.
    case supervisor
    /// Also writes reference collections and reads the audit, conflicts and monitoring.
    case organizer
    /// Everything.
    case admin

    private var rank: Int {
        switch self {
        case .staff: return 0
        case .supervisor: return 1
        case .organizer: return 2
        case .admin: return 3
        }
    }

    public static func < (lhs: Role, rhs: Role) -> Bool { lhs.rank < rhs.rank }
}
