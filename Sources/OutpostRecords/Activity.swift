import Foundation
import OutpostProtocol

/// Peer mentors' activities: the `activities` collection.
///
/// Every field but the money is last-write-wins, field by field. Money fields are protected: a change to
/// one that already has a value needs a base version at least as new as its last change, or it is kept
/// for review as a conflict instead of being applied.
public enum Activity {
    public static let collection = "activities"

    public enum Field {
        public static let type = "type"
        public static let date = "date"
        public static let durationMinutes = "duration_minutes"
        public static let participants = "participants"
        public static let notes = "notes"
        public static let travelExpense = "travel_expense"
    }

    /// The money fields: protected from last-write-wins. Declare a new financial field here.
    public static let financialFields: Set<String> = [Field.travelExpense, "amount"]

    /// The fields a new activity must have.
    public static let requiredFields = [Field.type, Field.date, Field.durationMinutes]

    /// The longest activity: a day.
    public static let maxDurationMinutes: Int64 = 24 * 60
    public static let maxParticipants: Int64 = 10_000
    public static let maxNotesLength = 2_000

    /// What is wrong with an activity's fields, or nil. Fields absent from an edit are not checked.
    public static func problem(in fields: [String: JSONValue]) -> String? {
        if let type = fields[Field.type] {
            guard FieldRules.isText(type, maxLength: 64) else { return "type must be 1 to 64 characters" }
        }
        if let date = fields[Field.date] {
            guard let text = date.stringValue, CalendarDay(text) != nil else {
                return "date must be a date written YYYY-MM-DD"
            }
        }
        if let duration = fields[Field.durationMinutes] {
            guard let minutes = FieldRules.integer(duration), minutes >= 1, minutes <= maxDurationMinutes else {
                return "duration_minutes must be a whole number of minutes, 1 to \(maxDurationMinutes)"
            }
        }
        if let participants = fields[Field.participants], participants != .null {
            guard let count = FieldRules.integer(participants), count >= 1, count <= maxParticipants else {
                return "participants must be a whole number, 1 to \(maxParticipants)"
            }
        }
        if let notes = fields[Field.notes], notes != .null {
            guard let text = notes.stringValue, text.count <= maxNotesLength else {
                return "notes must be at most \(maxNotesLength) characters"
            }
        }
        for name in financialFields.sorted() {
            if let money = fields[name], money != .null {
                guard let text = money.stringValue, parseMoney(text) == text else {
                    return "\(name) must be an amount written as a decimal string with two decimals, such as \"12.50\""
                }
            }
        }
        return nil
    }

    /// What a new activity lacks, or nil.
    public static func missingOnCreate(_ fields: [String: JSONValue]) -> String? {
        let missing = requiredFields.filter { fields[$0] == nil || fields[$0] == .null }
        return missing.isEmpty ? nil : "a new activity needs \(missing.joined(separator: ", "))"
    }

    /// An amount of money in its canonical form, two decimals (`"12.5"` → `"12.50"`), or nil when `text`
    /// is not a non-negative amount below ten million. Money never travels as a floating-point number.
    public static func parseMoney(_ text: String) -> String? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let whole = parts.first, (1...7).contains(whole.count),
            whole.allSatisfy({ $0.isASCII && $0.isNumber })
        else { return nil }
        var cents = "00"
        if parts.count == 2 {
            let fraction = parts[1]
            guard (1...2).contains(fraction.count), fraction.allSatisfy({ $0.isASCII && $0.isNumber }) else {
                return nil
            }
            cents = fraction.count == 1 ? "\(fraction)0" : String(fraction)
        }
        let trimmed = whole.drop(while: { $0 == "0" })
        return "\(trimmed.isEmpty ? "0" : trimmed).\(cents)"
    }

    /// Minutes in a duration written `90`, `45m`, `2h` or `1h30m`, or nil.
    public static func parseDuration(_ text: String) -> Int64? {
        let text = text.lowercased().replacingOccurrences(of: " ", with: "")
        if let minutes = Int64(text) { return minutes }
        var total: Int64 = 0
        var number = ""
        var sawUnit = false
        for character in text {
            if character.isASCII && character.isNumber {
                number.append(character)
                continue
            }
            guard let value = Int64(number), number.count <= 5 else { return nil }
            switch character {
            case "h": total += value * 60
            case "m": total += value
            default: return nil
            }
            number = ""
            sawUnit = true
        }
        guard number.isEmpty, sawUnit else { return nil }
        return total
    }
}

extension Activity {
    /// An activity's fields, as a typed query reads them.
    public struct Record: Sendable, Hashable, Codable {
        public var type: String
        public var date: CalendarDay
        public var durationMinutes: Int64
        public var participants: Int64?
        public var notes: String?
        /// A decimal string with two decimals, such as "12.50" (see ``Activity/parseMoney(_:)``): money is never a
        /// binary fraction.
        public var travelExpense: String?

        public init(
            type: String, date: CalendarDay, durationMinutes: Int64, participants: Int64? = nil, notes: String? = nil,
            travelExpense: String? = nil
        ) {
            self.type = type
            self.date = date
            self.durationMinutes = durationMinutes
            self.participants = participants
            self.notes = notes
            self.travelExpense = travelExpense
        }

        enum CodingKeys: String, CodingKey {
            case type, date, participants, notes
            case durationMinutes = "duration_minutes"
            case travelExpense = "travel_expense"
        }
    }
}
