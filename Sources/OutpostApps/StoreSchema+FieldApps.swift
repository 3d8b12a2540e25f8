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

extension RecordQuery where Fields == Attendance.Record {
    /// The attendance records this device holds (the signed-in user's).
    public static var attendance: Self { RecordQuery(collection: Attendance.collection) }
}

extension RecordQuery where Fields == CheckIn.Record {
    /// An event's check-ins.
    public static func checkIns(event: String) -> Self { RecordQuery(collection: CheckIn.collection, scope: event) }
}

extension RecordQuery where Fields == Activity.Record {
    /// The activities this device holds.
    public static var activities: Self { RecordQuery(collection: Activity.collection) }
}

extension RecordQuery where Fields == Build.Record {
    /// The builds this device holds.
    public static var builds: Self { RecordQuery(collection: Build.collection) }
}
