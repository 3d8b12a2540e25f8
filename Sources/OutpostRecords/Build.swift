import OutpostProtocol

/// Crews' build logs: the `builds` collection. A build has a name; any other fields are the crew's own.
public enum Build {
    public static let collection = "builds"

    public enum Field {
        public static let name = "name"
    }

    public static let maxNameLength = 200

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
