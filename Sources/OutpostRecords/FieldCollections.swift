/// The field apps' collections as a device store needs to know them: the OutpostClient SDK knows no app, so
/// the apps declare these when they open a store (`StoreSchema.fieldApps` in OutpostApps).
public enum FieldCollections {
    /// The collections whose records belong to an event, each with the field naming it.
    public static let scopeFields: [String: String] = [
        Guest.collection: Guest.scopeField,
        CheckIn.collection: CheckIn.scopeField,
    ]

    /// A roster is searched offline by the prefixes of a guest's name words, and by a whole e-mail.
    public static let searchWordsField = "name"
    public static let searchExactField = "email"
}
