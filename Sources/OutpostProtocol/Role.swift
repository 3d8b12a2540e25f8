/// What a token's holder may do. Each role may do everything the roles before it may.
public enum Role: String, Sendable, Codable, CaseIterable, Comparable {
    /// Field staff: push and pull.
    case staff
    /// Also writes reference collections and reads the audit, conflicts and monitoring.
    case organizer
    /// Everything.
    case admin

    private var rank: Int {
        switch self {
        case .staff: return 0
        case .organizer: return 1
        case .admin: return 2
        }
    }

    public static func < (lhs: Role, rhs: Role) -> Bool { lhs.rank < rhs.rank }
}
