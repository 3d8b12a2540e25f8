import OutpostProtocol

/// What an app declares about its collections when it opens a store: the SDK knows no app of its own.
///
/// The field apps declare theirs as `StoreSchema.fieldApps` (OutpostApps).
public struct StoreSchema: Sendable, Hashable {
    /// The collections whose records belong to a scope (an event's check-ins), each with the field whose value
    /// names the scope, as the server's collection policies say.
    public var scopeFields: [String: String]
    /// How the reference collections are searched offline, by collection.
    public var search: [String: ReferenceSearch]

    public init(scopeFields: [String: String] = [:], search: [String: ReferenceSearch] = [:]) {
        self.scopeFields = scopeFields
        self.search = search
    }

    /// The scope that `fields` name for a record of `collection`, as the server reads it: the scope field's
    /// value as text. Nil when the collection has no scope or the fields leave its scope field out.
    public func scope(of fields: [String: JSONValue], in collection: String) -> String? {
        guard let field = scopeFields[collection], let value = fields[field] else { return nil }
        return value.displayText
    }
}

/// The fields a reference collection is searched by, offline, through a blind index of their words.
public struct ReferenceSearch: Sendable, Hashable {
    /// The field searched by the prefixes of its words, such as a person's name; results sort by it.
    public var words: String
    /// The field matched whole and without regard to case when a query holds an `@`, such as an e-mail.
    public var exact: String?

    public init(words: String, exact: String? = nil) {
        self.words = words
        self.exact = exact
    }
}
