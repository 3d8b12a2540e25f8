import OutpostProtocol

/// Crews' build logs: the `builds` collection. A build has a name; any other fields are the crew's own.
public enum Build {
    public static let collection = "builds"

    public enum Field {
        public static let name = "name"
    }

    public static let maxNameLength = 200

    /// The field of a build's photo at `index` (from 0): `photo`, then `photo_2`, `photo_3`, ….
    public static func photoField(_ index: Int) -> String { index == 0 ? "photo" : "photo_\(index + 1)" }

    /// The order of a photo field among a build's photos: `photo` first, then `photo_2`, …; other fields last.
    public static func photoIndex(_ field: String) -> Int {
        if field == "photo" { return 0 }
        guard field.hasPrefix("photo_"), let number = Int(field.dropFirst(6)), number >= 2 else { return Int.max }
        return number - 1
    }

    /// What is wrong with a build's fields, or nil. Fields absent from an edit are not checked.
    public static func problem(in fields: [String: JSONValue]) -> String? {
        if let name = fields[Field.name] {
            guard FieldRules.isText(name, maxLength: maxNameLength) else {
                return "name must be 1 to \(maxNameLength) characters"
            }
        }
        return nil
    }

    /// What a new build lacks, or nil.
    public static func missingOnCreate(_ fields: [String: JSONValue]) -> String? {
        fields[Field.name] == nil ? "a new build needs a name" : nil
    }
}

extension Build {
    /// A build's fields, as a typed query reads them: its name, and the crew's own fields as they are.
    public struct Record: Sendable, Hashable, Codable {
        public var name: String
        /// Every field but the name.
        public var other: [String: JSONValue]

        public init(name: String, other: [String: JSONValue] = [:]) {
            self.name = name
            self.other = other
        }

        public init(from decoder: any Decoder) throws {
            var fields = try [String: JSONValue](from: decoder)
            guard let name = fields.removeValue(forKey: Field.name)?.stringValue else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a build has a name"))
            }
            self.init(name: name, other: fields)
        }

        public func encode(to encoder: any Encoder) throws {
            var fields = other
            fields[Field.name] = .string(name)
            try fields.encode(to: encoder)
        }
    }
}
