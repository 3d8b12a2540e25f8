import Foundation
import OutpostProtocol

/// Staff attendance: the `attendance` collection, one write-once record per check-in and per check-out.
///
/// A record's id says whose it is, which day, and which action: `USER.YYYY-MM-DD.in` or `.out`. So one
/// staff member has at most one check-in and one check-out per day by construction, the server can refuse
/// a record written under someone else's id, and a check-out can name the check-in it needs.
public enum Attendance {
    public static let collection = "attendance"

    /// What a record says the staff member did.
    public enum Action: String, Sendable, Hashable, Codable, CaseIterable {
        case checkIn = "check_in"
        case checkOut = "check_out"

        /// The last part of the record id.
        public var idSuffix: String { self == .checkIn ? "in" : "out" }
    }

    public enum Field {
        public static let action = "action"
        public static let day = "day"
        public static let latitude = "latitude"
        public static let longitude = "longitude"
        /// The fix's horizontal accuracy in metres, when the location provider knows it.
        public static let accuracy = "accuracy_m"
    }

    /// The id of `userId`'s record of `action` on `day`.
    public static func recordId(userId: String, day: CalendarDay, action: Action) -> String {
        "\(userId).\(day).\(action.idSuffix)"
    }

    /// The parts of an attendance record id, or nil when it is not one.
    public static func parse(recordId: String) -> (userId: String, day: CalendarDay, action: Action)? {
        let parts = recordId.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 3, let action = Action.allCases.first(where: { $0.idSuffix == parts[parts.count - 1] }),
            let day = CalendarDay(String(parts[parts.count - 2]))
        else { return nil }
        let userId = parts.dropLast(2).joined(separator: ".")
        guard Identifier.isValid(userId) else { return nil }
        return (userId, day, action)
    }

    /// Whether a latitude and longitude are a place on Earth.
    public static func isValidCoordinate(latitude: Double, longitude: Double) -> Bool {
        latitude.isFinite && longitude.isFinite && (-90...90).contains(latitude) && (-180...180).contains(longitude)
    }

    /// What is wrong with a whole attendance record's fields, or nil. Records are written once and whole,
    /// so every field is required.
    public static func problem(in fields: [String: JSONValue]) -> String? {
        guard fields[Field.action]?.stringValue.flatMap(Action.init(rawValue:)) != nil else {
            return "action must be check_in or check_out"
        }
        guard let day = fields[Field.day]?.stringValue, CalendarDay(day) != nil else {
            return "day must be a date written YYYY-MM-DD"
        }
        guard let latitude = FieldRules.number(fields[Field.latitude]),
            let longitude = FieldRules.number(fields[Field.longitude])
        else { return "a GPS location (latitude and longitude) is required" }
        guard isValidCoordinate(latitude: latitude, longitude: longitude) else {
            return "latitude must be within -90…90 and longitude within -180…180"
        }
        if let accuracy = fields[Field.accuracy], accuracy != .null {
            guard let metres = FieldRules.number(accuracy), metres >= 0, metres <= 100_000 else {
                return "accuracy_m must be a distance in metres, 0 to 100000"
            }
        }
        return nil
    }

    /// What is wrong with a record's id given its fields, or nil: the id's day and action must be the fields'.
    public static func problem(recordId: String, fields: [String: JSONValue]) -> String? {
        guard let parts = parse(recordId: recordId) else {
            return "attendance record ids are USER.YYYY-MM-DD.in or USER.YYYY-MM-DD.out"
        }
        guard fields[Field.day]?.stringValue == parts.day.description,
            fields[Field.action]?.stringValue == parts.action.rawValue
        else { return "the record id's day and action must match its fields" }
        return nil
    }
}
