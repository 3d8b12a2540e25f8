import OutpostProtocol

/// Event check-in: the `checkins` collection, scoped by `event_id`, one record per guest.
///
/// A record's id is the guest's id, so every scan of one guest lands on one record. The first scan, by the device's scan time, wins: a later
/// scan from another device changes nothing, and an earlier one that arrives late takes its place.
public enum CheckIn {
    public static let collection = "checkins"
    public static let scopeField = "event_id"

    public enum Field {
        public static let eventId = "event_id"
        public static let guestId = "guest_id"
        /// The device that scanned.
        public static let scannedBy = "scanned_by"
        /// The device's time of the scan, ISO 8601; equal to the mutation's client timestamp.
        public static let scannedAt = "scanned_at"
    }

    /// What is wrong with a check-in's fields, or nil. Check-ins are written whole.
    public static func problem(in fields: [String: JSONValue]) -> String? {
        for name in [Field.eventId, Field.guestId, Field.scannedBy] {
            guard let text = fields[name]?.stringValue, Identifier.isValid(text) else {
                return "\(name) must be an identifier"
            }
        }
        guard let text = fields[Field.scannedAt]?.stringValue, Timestamp(iso8601: text) != nil else {
            return "scanned_at must be an RFC 3339 date-time, such as 2026-05-01T09:30:00.000Z"
        }
        return nil
    }
}

extension CheckIn {
    /// A check-in's fields, as a typed query reads them.
    public struct Record: Sendable, Hashable, Codable {
        public var guestId: String
        public var eventId: String
        /// The device that scanned.
        public var scannedBy: String
        /// The device's time of the scan.
        public var scannedAt: Timestamp

        public init(guestId: String, eventId: String, scannedBy: String, scannedAt: Timestamp) {
            self.guestId = guestId
            self.eventId = eventId
            self.scannedBy = scannedBy
            self.scannedAt = scannedAt
        }

        enum CodingKeys: String, CodingKey {
            case guestId = "guest_id"
            case eventId = "event_id"
            case scannedBy = "scanned_by"
            case scannedAt = "scanned_at"
        }
    }
}
