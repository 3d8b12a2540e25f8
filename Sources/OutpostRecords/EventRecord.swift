import OutpostProtocol

/// An event's own details: the `events` reference collection, one record per event id, written by organizers.
public enum EventRecord {
    public static let collection = "events"

    public enum Field {
        public static let name = "name"
        /// How staff reach the event's operations team: an e-mail, a phone number or an https link. The sync
        /// monitor's "Send urgent message to staff" link points there.
        public static let opsContact = "ops_contact"
    }

    /// What is wrong with an event's fields, or nil. Fields absent from an update are not checked.
    public static func problem(in fields: [String: JSONValue]) -> String? {
        if let name = fields[Field.name], name != .null, !FieldRules.isText(name, maxLength: 200) {
            return "name must be 1 to 200 characters"
        }
        if let contact = fields[Field.opsContact], contact != .null, !FieldRules.isText(contact, maxLength: 254) {
            return "ops_contact must be 1 to 254 characters"
        }
        return nil
    }
}
