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
    /// How concurrent writes to one record resolve.
    public var merge: Merge

    /// How concurrent writes to one record resolve.
    public enum Merge: String, Sendable, Hashable, Codable {
        /// Field by field, the latest client time wins (protected fields aside).
        case lastWriteWins
        /// The record as first written, by client time, stands; a later write changes nothing, an earlier
        /// one that arrives late replaces it. A guest's check-in is the first scan.
        case firstWriteWins
    }

    public init(
        name: String, kind: Kind = .data, protectedFields: Set<String> = [], scopeField: String? = nil,
        merge: Merge = .lastWriteWins
    ) {
        self.name = name
        self.kind = kind
        self.protectedFields = protectedFields
        self.scopeField = scopeField
        self.merge = merge
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
        CollectionPolicy(name: Guest.collection, kind: .reference, scopeField: Guest.scopeField),
        CollectionPolicy(name: EventRecord.collection, kind: .reference),
        CollectionPolicy(name: CheckIn.collection, scopeField: CheckIn.scopeField, merge: .firstWriteWins),
        CollectionPolicy(name: Attendance.collection),
        CollectionPolicy(name: Activity.collection, protectedFields: Activity.financialFields),
        CollectionPolicy(name: Build.collection),
        CollectionPolicy(name: "notes"),
    ])
}
