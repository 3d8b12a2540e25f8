import OutpostProtocol
import OutpostRecords

/// How the server treats one collection: who may read and write it, which fields are protected, how it is
/// scoped.
public struct CollectionPolicy: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
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
    /// Which of the collection's records a member of staff may read. Supervisors read every record of the
    /// tenant, organizers and admins too.
    public var read: Access
    /// Which of the collection's records a member of staff (or a supervisor) may change. Organizers and admins
    /// may change any; a reference collection is written by organizers alone.
    public var write: Access
    /// The files its records may carry; nil when it takes none.
    public var attachments: AttachmentPolicy?

    /// Whose records a member of staff may read or change.
    public enum Access: String, Sendable, Hashable, Codable, CaseIterable {
        /// Only the records they created (attendance, activities, builds).
        case own
        /// The records of a scope they name (an event's check-ins: a second door sees who is in).
        case scope
        /// Every record of the tenant (notes).
        case tenant
    }

    /// How concurrent writes to one record resolve.
    public enum Merge: String, Sendable, Hashable, Codable, CaseIterable {
        /// Field by field, the latest client time wins (protected fields aside).
        case lastWriteWins
        /// The record as first written, by client time, stands; a later write changes nothing, an earlier
        /// one that arrives late replaces it. A guest's check-in is the first scan.
        case firstWriteWins
    }

    public init(
        name: String, kind: Kind = .data, protectedFields: Set<String> = [], scopeField: String? = nil,
        merge: Merge = .lastWriteWins, read: Access? = nil, write: Access? = nil, attachments: AttachmentPolicy? = nil
    ) {
        self.name = name
        self.kind = kind
        self.protectedFields = protectedFields
        self.scopeField = scopeField
        self.merge = merge
        self.read = read ?? (scopeField == nil ? .tenant : .scope)
        self.write = write ?? self.read
        self.attachments = attachments
    }

    /// The role a token needs to push to this collection.
    public var writerRole: Role { kind == .reference ? .organizer : .staff }
}

// MARK: Access

extension CollectionPolicy {
    /// The owner a read by `identity` is narrowed to, or nil when it may read every owner's records.
    func readOwner(for identity: Identity) -> String? {
        read == .own && identity.role < .supervisor ? identity.userId : nil
    }

    /// Why `identity` may not read this collection as asked (`scope` nil: every scope), or nil when it may.
    func readRefusal(for identity: Identity, scope: String?) -> String? {
        if read == .scope, scope == nil, identity.role < .supervisor {
            return "reading \(name) needs a scope: name the event with scope="
        }
        return nil
    }

    /// Why a caller with `role` may write none of this collection's records (a reference collection below the
    /// organizer role), or nil when they may write some.
    func writerRefusal(for role: Role) -> String? {
        role >= writerRole ? nil : "writing \(name) needs the \(writerRole.rawValue) role"
    }

    /// Why a user with `role` may not change `existing` (nil when the record is new), or nil when they may.
    func writeRefusal(role: Role, userId: String, existing: StoredRecord?) -> String? {
        guard write == .own, role < .organizer, let existing, existing.owner != userId else { return nil }
        return "\(name) records are changed only by the member of staff who created them"
    }
}

// MARK: Scope

extension CollectionPolicy {
    /// The scope `mutation` names: its `scope`, or its scope field's value. Empty for a collection without a
    /// scope.
    ///
    /// - Returns: the scope, or why the mutation names none the server can use.
    func scope(of mutation: Mutation) -> Result<String, ScopeProblem> {
        guard let scopeField else {
            guard mutation.scope == nil || mutation.scope == "" else {
                return .failure(ScopeProblem("\(name) has no scope; leave scope out"))
            }
            return .success("")
        }
        let field = mutation.fields[scopeField].map(\.displayText)
        if let named = mutation.scope, let field, named != field {
            return .failure(ScopeProblem("scope \(named) and \(scopeField) \(field) differ"))
        }
        guard let scope = mutation.scope ?? field, Identifier.isValid(scope) else {
            return .failure(
                ScopeProblem("a \(name) mutation names its scope, an identifier, in scope or \(scopeField)"))
        }
        return .success(scope)
    }

    /// Why a mutation's scope cannot be used.
    struct ScopeProblem: Error, Sendable {
        var message: String
        init(_ message: String) { self.message = message }
    }
}

/// The collections a server knows. A mutation or a read for any other collection is refused.
public struct CollectionRegistry: Sendable, Hashable {
    public private(set) var policies: [String: CollectionPolicy]

    public init(_ policies: [CollectionPolicy]) {
        self.policies = Dictionary(policies.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
    }

    public subscript(name: String) -> CollectionPolicy? { policies[name] }

    public var names: [String] { policies.keys.sorted() }

    /// The collections of Outpost's field apps, plus `notes` for scripts and tests. Builds carry photos and
    /// drawings, attendance a photo, notes any file.
    public static let standard = CollectionRegistry([
        CollectionPolicy(name: Guest.collection, kind: .reference, scopeField: Guest.scopeField),
        CollectionPolicy(name: EventRecord.collection, kind: .reference),
        CollectionPolicy(name: CheckIn.collection, scopeField: CheckIn.scopeField, merge: .firstWriteWins),
        CollectionPolicy(
            name: Attendance.collection, merge: .firstWriteWins, read: .own,
            attachments: AttachmentPolicy(maxBytes: 10 * mebibyte, types: ["image/*"])),
        CollectionPolicy(name: Activity.collection, protectedFields: Activity.financialFields, read: .own),
        CollectionPolicy(
            name: Build.collection, read: .own,
            attachments: AttachmentPolicy(maxBytes: 50 * mebibyte, types: ["image/*", "application/pdf"])),
        CollectionPolicy(name: "notes", attachments: AttachmentPolicy(maxBytes: 50 * mebibyte, types: ["*/*"])),
    ])

    private static let mebibyte: Int64 = 1024 * 1024
}
