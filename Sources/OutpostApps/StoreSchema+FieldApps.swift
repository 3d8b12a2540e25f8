import OutpostClient
import OutpostRecords

extension StoreSchema {
    /// What the field apps declare about their collections: an event's guests and check-ins belong to it, and
    /// a roster is searched by guest name and e-mail.
    public static let fieldApps = StoreSchema(
        scopeFields: FieldCollections.scopeFields,
        search: [
            Guest.collection: ReferenceSearch(
                words: FieldCollections.searchWordsField, exact: FieldCollections.searchExactField)
        ])
}
