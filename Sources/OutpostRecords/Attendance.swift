import Crypto
import Foundation
import OutpostProtocol

/// Staff attendance: the `attendance` collection, one write-once record per check-in and per check-out.
///
/// A record's id stands for whose it is, which day, and which action, without naming any of them: it is a
/// keyed digest of the day and the action under the staff member's ``IdKey``, which the server derives from
/// its secret and gives to that user's devices (`GET /v1/record-id-key`). Every device of one user computes
/// the same id, so one staff member has at most one check-in and one check-out per day by construction, and a
/// check-out can name the check-in it needs; yet the id read in a device's store or a database log names no
/// one, and without the key no day can be tried against it.
///
/// A device that has not yet reached the server holds no key; it writes the id's provisional form,
/// `USER.YYYY-MM-DD.in` or `.out` (``provisionalRecordId(userId:day:action:)``), which the server stores under
/// the derived id, and which the device renames once it holds the key.
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
        /// Whose record it is: the id no longer says, so the record does. The server fills it in when a device
        /// leaves it out, and refuses any other user's.
        public static let userId = "user_id"
        public static let action = "action"
        public static let day = "day"
        public static let latitude = "latitude"
        public static let longitude = "longitude"
        /// The fix's horizontal accuracy in metres, when the location provider knows it.
        public static let accuracy = "accuracy_m"
        /// An optional photo taken with the action, such as the signed sheet: a file (`FileReference`).
        public static let photo = "photo"
    }

    /// A staff member's key for attendance record ids: 32 bytes the server derives from its secret, the
    /// tenant and the user, so that each user's ids are unrelated to everyone else's.
    public struct IdKey: Sendable, Hashable {
        public let bytes: [UInt8]

        public init?(bytes: [UInt8]) {
            guard bytes.count == 32 else { return nil }
            self.bytes = bytes
        }

        /// The key written as 64 lowercase hex digits, as `GET /v1/record-id-key` answers it.
        public init?(hex: String) {
            guard let bytes = [UInt8](hex: hex) else { return nil }
            self.init(bytes: bytes)
        }

        public var hex: String { bytes.hexString }

        /// The key of `userId` in `tenant`, from the server's key for record ids.
        public static func derive(tenant: String, userId: String, from secret: SymmetricKey) -> IdKey {
            let code = HMAC<SHA256>.authenticationCode(for: Array("\(tenant)\u{0}\(userId)".utf8), using: secret)
            return IdKey(bytes: Array(code))!
        }
    }

    /// What every derived id starts with; no provisional id does, as those end in a day and an action.
    public static let derivedIdPrefix = "att-"

    /// The id of the record of `action` on `day` of the user whose key is `key`: `att-` and 32 hex digits.
    public static func recordId(key: IdKey, day: CalendarDay, action: Action) -> String {
        let code = HMAC<SHA256>.authenticationCode(
            for: Array("\(collection)\u{0}\(day)\u{0}\(action.idSuffix)".utf8), using: SymmetricKey(data: key.bytes))
        return derivedIdPrefix + code.prefix(16).hexString
    }

    /// The provisional id of `userId`'s record of `action` on `day`, for a device without its key yet.
    public static func provisionalRecordId(userId: String, day: CalendarDay, action: Action) -> String {
        "\(userId).\(day).\(action.idSuffix)"
    }

    /// The derived id a record id stands for, given the fields' day and action: the id itself when derived, the
    /// derived form of a provisional id of `userId`, nil for a provisional id of anyone else or no attendance id.
    public static func derivedRecordId(
        of recordId: String, userId: String, key: IdKey
    ) -> String? {
        if recordId.hasPrefix(derivedIdPrefix) { return recordId }
        guard let parts = parse(recordId: recordId), parts.userId == userId else { return nil }
        return self.recordId(key: key, day: parts.day, action: parts.action)
    }

    /// The parts of a provisional attendance record id, or nil when it is not one.
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
        // A write naming neither is an edit of a stored record's fields.
        if fields[Field.action] == nil && fields[Field.day] == nil {
            return "attendance records are written once, whole: a check-in or check-out cannot be edited"
        }
        if let user = fields[Field.userId], user.stringValue.map(Identifier.isValid) != true {
            return "user_id must be a user id"
        }
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

    /// The day and action a record's fields name, or nil when they name none.
    public static func dayAndAction(in fields: [String: JSONValue]) -> (day: CalendarDay, action: Action)? {
        guard let day = fields[Field.day]?.stringValue.flatMap(CalendarDay.init),
            let action = fields[Field.action]?.stringValue.flatMap(Action.init(rawValue:))
        else { return nil }
        return (day, action)
    }

    /// What is wrong with a record's id given its fields, or nil: a derived id in form, or a provisional id
    /// whose day and action are the fields'. (Whether a derived id is the user's is checked with the key.)
    public static func problem(recordId: String, fields: [String: JSONValue]) -> String? {
        if recordId.hasPrefix(derivedIdPrefix) {
            let digits = recordId.dropFirst(derivedIdPrefix.count)
            guard digits.utf8.count == 32, [UInt8](hex: digits) != nil else {
                return "derived attendance record ids are att- and 32 hex digits"
            }
            return nil
        }
        guard let parts = parse(recordId: recordId) else {
            return "attendance record ids are att- and 32 hex digits, or USER.YYYY-MM-DD.in or .out"
        }
        guard fields[Field.day]?.stringValue == parts.day.description,
            fields[Field.action]?.stringValue == parts.action.rawValue
        else { return "the record id's day and action must match its fields" }
        return nil
    }
}

extension Attendance {
    /// An attendance record's fields, as a typed query reads them.
    public struct Record: Sendable, Hashable, Codable {
        /// Whose record it is; nil in records stored before ids were derived, whose id names the user.
        public var userId: String?
        public var action: Action
        public var day: CalendarDay
        public var latitude: Double
        public var longitude: Double
        /// The fix's accuracy in metres, when the device gave one.
        public var accuracy: Double?

        public init(
            userId: String?, action: Action, day: CalendarDay, latitude: Double, longitude: Double, accuracy: Double? = nil
        ) {
            self.userId = userId
            self.action = action
            self.day = day
            self.latitude = latitude
            self.longitude = longitude
            self.accuracy = accuracy
        }

        enum CodingKeys: String, CodingKey {
            case userId = "user_id"
            case action, day, latitude, longitude
            case accuracy = "accuracy_m"
        }
    }
}
