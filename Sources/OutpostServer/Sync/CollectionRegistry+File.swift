import Foundation
import OutpostProtocol
import Yams

/// A collections file, as an operator writes it (YAML, or JSON, which is YAML too):
///
/// ```yaml
/// collections:
///   - name: incidents
///     scopeField: site_id        # optional: the field whose value is a record's scope
///     read: own                  # own | scope | tenant (default: scope with a scope field, else tenant)
///     write: own                 # default: as read
///     kind: data                 # data | reference (organizers write reference collections)
///     merge: lastWriteWins       # lastWriteWins | firstWriteWins
///     protectedFields: [amount]  # changed only on a base version that has seen their last change
///     attachments:               # optional: the files its records carry (none without it)
///       maxBytes: 26214400       # 1 to 2 GiB
///       types: [image/jpeg, image/*, "*/*"]  # quote */*: a bare * starts a YAML alias
/// ```
extension CollectionRegistry {
    /// The standard collections plus those `url` declares.
    ///
    /// - Throws: ``CollectionsFileError`` naming the first problem: an unreadable file, bad YAML, an unknown
    ///   member, a bad value, a name declared twice or one of the standard collections.
    public static func standard(adding url: URL) throws -> CollectionRegistry {
        let text: String
        do {
            text = try String(contentsOf: url, encoding: .utf8)
        } catch {
            throw CollectionsFileError("cannot read \(url.path)")
        }
        return try standard(adding: text, source: url.lastPathComponent)
    }

    /// The standard collections plus those `text` declares; `source` names the file in errors.
    public static func standard(adding text: String, source: String) throws -> CollectionRegistry {
        let node: Node?
        do {
            node = try Yams.compose(yaml: text)
        } catch {
            throw CollectionsFileError("\(source) is not valid YAML or JSON")
        }
        guard let root = node?.mapping else { throw CollectionsFileError("\(source) must be a mapping with `collections`") }
        try Self.refuseUnknown(in: root, allowed: ["collections"], at: source)
        guard let list = root["collections"]?.sequence else {
            throw CollectionsFileError("\(source): `collections` must be a list")
        }
        var registry = CollectionRegistry.standard
        for (index, entry) in list.enumerated() {
            let place = "\(source): collections[\(index)]"
            let policy = try Self.policy(from: entry, at: place)
            guard registry[policy.name] == nil else {
                let standard = CollectionRegistry.standard[policy.name] != nil
                throw CollectionsFileError(
                    "\(place): \(policy.name) is \(standard ? "a standard collection" : "declared twice")")
            }
            registry = CollectionRegistry(Array(registry.policies.values) + [policy])
        }
        return registry
    }

    private static let members: Set<String> = [
        "name", "kind", "scopeField", "protectedFields", "merge", "read", "write", "attachments",
    ]

    private static func policy(from node: Node, at place: String) throws -> CollectionPolicy {
        guard let entry = node.mapping else { throw CollectionsFileError("\(place) must be a mapping") }
        try refuseUnknown(in: entry, allowed: members, at: place)
        func text(_ key: String) throws -> String? {
            guard let value = entry[key] else { return nil }
            guard let scalar = value.scalar?.string, !scalar.isEmpty else {
                throw CollectionsFileError("\(place).\(key) must be a non-empty string")
            }
            return scalar
        }
        func choice<T: RawRepresentable & CaseIterable>(_ key: String, _: T.Type) throws -> T?
        where T.RawValue == String {
            guard let raw = try text(key) else { return nil }
            guard let value = T(rawValue: raw) else {
                throw CollectionsFileError(
                    "\(place).\(key) must be \(T.allCases.map(\.rawValue).joined(separator: ", ").replacingLastComma())")
            }
            return value
        }
        guard let name = try text("name") else { throw CollectionsFileError("\(place) has no name") }
        guard Identifier.isValidFieldName(name) else {
            throw CollectionsFileError("\(place).name must be letters, digits or '_', starting with a letter or '_'")
        }
        let scopeField = try text("scopeField")
        if let scopeField, !Identifier.isValidFieldName(scopeField) {
            throw CollectionsFileError("\(place).scopeField must be a field name")
        }
        var protected: Set<String> = []
        if let list = entry["protectedFields"] {
            guard let items = list.sequence else { throw CollectionsFileError("\(place).protectedFields must be a list") }
            for item in items {
                guard let field = item.scalar?.string, Identifier.isValidFieldName(field) else {
                    throw CollectionsFileError("\(place).protectedFields must list field names")
                }
                protected.insert(field)
            }
        }
        let policy = CollectionPolicy(
            name: name, kind: try choice("kind", CollectionPolicy.Kind.self) ?? .data, protectedFields: protected,
            scopeField: scopeField, merge: try choice("merge", CollectionPolicy.Merge.self) ?? .lastWriteWins,
            read: try choice("read", CollectionPolicy.Access.self),
            write: try choice("write", CollectionPolicy.Access.self),
            attachments: try entry["attachments"].map { try attachments(from: $0, at: "\(place).attachments") })
        if let problem = policy.declarationProblem { throw CollectionsFileError("\(place): \(problem)") }
        return policy
    }

    private static func attachments(from node: Node, at place: String) throws -> AttachmentPolicy {
        guard let entry = node.mapping else { throw CollectionsFileError("\(place) must be a mapping with maxBytes and types") }
        try refuseUnknown(in: entry, allowed: ["maxBytes", "types"], at: place)
        let largest = AttachmentPolicy.largestMaxBytes
        guard let text = entry["maxBytes"]?.scalar?.string, let maxBytes = Int64(text), (1...largest).contains(maxBytes) else {
            throw CollectionsFileError("\(place).maxBytes must be a whole number of bytes from 1 to \(largest) (2 GiB)")
        }
        guard let list = entry["types"]?.sequence, !list.isEmpty else {
            throw CollectionsFileError("\(place).types must be a list of media types, such as [image/jpeg, image/*]")
        }
        var types: [String] = []
        for item in list {
            guard let type = item.scalar?.string, AttachmentPolicy.isTypePattern(type) else {
                throw CollectionsFileError(
                    "\(place).types must list lower-case media types such as image/jpeg, image/* or \"*/*\"")
            }
            if !types.contains(type) { types.append(type) }
        }
        return AttachmentPolicy(maxBytes: maxBytes, types: types)
    }

    private static func refuseUnknown(in mapping: Node.Mapping, allowed: Set<String>, at place: String) throws {
        for key in mapping.keys {
            guard let name = key.scalar?.string, allowed.contains(name) else {
                throw CollectionsFileError(
                    "\(place) has an unknown member \(key.scalar?.string ?? "?"); known: \(allowed.sorted().joined(separator: ", "))")
            }
        }
    }
}

extension CollectionPolicy {
    /// Why a collection declared this way cannot work, or nil.
    var declarationProblem: String? {
        if (read == .scope || write == .scope) && scopeField == nil {
            return "reading or writing by scope needs a scopeField"
        }
        if kind == .reference && (read == .own || write == .own) {
            return "a reference collection is read and written by scope or tenant, not by owner"
        }
        if merge == .firstWriteWins && !protectedFields.isEmpty {
            return "a firstWriteWins collection has no protected fields to review"
        }
        return nil
    }
}

/// Why a collections file was refused; ``description`` is one line naming the problem.
public struct CollectionsFileError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

extension String {
    fileprivate func replacingLastComma() -> String {
        guard let range = range(of: ", ", options: .backwards) else { return self }
        return replacingCharacters(in: range, with: " or ")
    }
}
