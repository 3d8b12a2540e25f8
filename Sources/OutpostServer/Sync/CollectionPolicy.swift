import OutpostProtocol

/// How the server treats one collection: who may write it, which fields are protected, how it is scoped.
public struct CollectionPolicy: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable {
        /// Field data that devices write: check-ins, attendance, activities, builds.
        case data
        /// Reference data that organizers write and devices download, such as an event's guest roster.
        case reference
    }

    public var name: String
    public var kind: Kind
    /// Fields that last-write-wins never resolves, such as money. Changing one that already has a value
    /// needs a `baseVersion` at least as new as that field's last change; otherwise the change is a conflict.
    public var protectedFields: Set<String>
    /// The field whose value is the record's scope (for example `event_id` for a roster), if any.
    public var scopeField: String?

    public init(name: String, kind: Kind = .data, protectedFields: Set<String> = [], scopeField: String? = nil) {
        self.name = name
        self.kind = kind
        self.protectedFields = protectedFields
        self.scopeField = scopeField
    }

    /// The role a token needs to push to this collection.
    public var writerRole: Role { kind == .reference ? .organizer : .staff }
}

/// The collections a server knows. A mutation or a read for any other collection is refused.
public struct CollectionRegistry: Sendable, Hashable {
    public private(set) var policies: [String: CollectionPolicy]

    public init(_ policies: [CollectionPolicy]) {
        self.policies = Dictionary(policies.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
    }

    public subscript(name: String) -> CollectionPolicy? { policies[name] }

    public var names: [String] { policies.keys.sorted() }

    /// The collections of Outpost's field apps, plus `notes` for scripts and tests.
    public static let standard = CollectionRegistry([
        CollectionPolicy(name: "guests", kind: .reference, scopeField: "event_id"),
        CollectionPolicy(name: "events", kind: .reference),
        CollectionPolicy(name: "checkins", scopeField: "event_id"),
        CollectionPolicy(name: "attendance"),
        CollectionPolicy(name: "activities", protectedFields: ["travel_expense", "amount"]),
        CollectionPolicy(name: "builds"),
        CollectionPolicy(name: "notes"),
    ])
}
