import Foundation
import OutpostProtocol

/// Small checks the record rules of the field apps share.
public enum FieldRules {
    /// The number a field holds, integer or not.
    public static func number(_ value: JSONValue?) -> Double? {
        switch value {
        case .integer(let number): return Double(number)
        case .number(let number) where number.isFinite: return number
        default: return nil
        }
    }

    /// A whole number, also when sent as `12.0`.
    public static func integer(_ value: JSONValue?) -> Int64? {
        switch value {
        case .integer(let number): return number
        case .number(let number) where number.isFinite && number.rounded() == number && abs(number) < 1e15:
            return Int64(number)
        default: return nil
        }
    }

    /// Text of 1 to `maxLength` characters that is not only spaces.
    public static func isText(_ value: JSONValue?, maxLength: Int) -> Bool {
        guard let text = value?.stringValue else { return false }
        return !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty && text.count <= maxLength
    }

    /// A calendar day written `YYYY-MM-DD` that exists (no 30 February).
    public static func day(_ text: String) -> CalendarDay? {
        CalendarDay(text)
    }
}

/// A calendar day, as the apps write it: `YYYY-MM-DD`, with no time zone.
public struct CalendarDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int

    /// Parses `YYYY-MM-DD`; nil for any other shape or a day that does not exist.
    public init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard text.utf8.count == 10, parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
            let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
            (1...12).contains(month), day >= 1, day <= Self.length(ofMonth: month, year: year)
        else { return nil }
        self.year = year
        self.month = month
        self.day = day
    }

    /// The day `date` falls on in `timeZone`.
    public init(_ date: Date, timeZone: TimeZone) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.year, .month, .day], from: date)
        self.year = parts.year ?? 1970
        self.month = parts.month ?? 1
        self.day = parts.day ?? 1
    }

    public var description: String {
        func pad(_ n: Int, _ width: Int) -> String {
            let text = String(n)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
    }

    /// Days since 1970-01-01 (proleptic Gregorian), for distances between days.
    public var ordinal: Int {
        // Howard Hinnant's days_from_civil.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    public static func < (lhs: CalendarDay, rhs: CalendarDay) -> Bool { lhs.ordinal < rhs.ordinal }

    static func length(ofMonth month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

extension CalendarDay: Codable {
    /// Reads `YYYY-MM-DD`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        guard let day = CalendarDay(try container.decode(String.self)) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected a date written YYYY-MM-DD")
        }
        self = day
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
