import Foundation

/// An instant on the device's clock, with millisecond precision, as the wire carries it.
///
/// It reads any RFC 3339 date-time: with any number of fractional digits or none, and with `Z` or an offset,
/// such as `2026-11-21T13:47:35.123Z`, `2026-11-21T15:47:35+02:00` or `2026-11-21T13:47:35.123456+00:00`.
/// Digits past the millisecond are dropped, toward the earlier instant. It always writes the canonical form, in UTC
/// with exactly three fractional digits and a `Z`, so two spellings of one instant compare, order and hash alike.
public struct Timestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public var millisecondsSince1970: Int64

    public init(millisecondsSince1970: Int64) {
        self.millisecondsSince1970 = millisecondsSince1970
    }

    /// The instant of `date`, truncated to the millisecond.
    public init(_ date: Date) {
        self.millisecondsSince1970 = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// Parses an RFC 3339 date-time; `nil` for anything else.
    public init?(iso8601 text: String) {
        guard let value = Self.parse(Array(text.utf8)) else { return nil }
        self.millisecondsSince1970 = value
    }

    public var date: Date { Date(timeIntervalSince1970: Double(millisecondsSince1970) / 1000) }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSince1970 < rhs.millisecondsSince1970
    }

    public var description: String { iso8601 }

    /// The wire form, in UTC: `YYYY-MM-DDTHH:MM:SS.sssZ`.
    public var iso8601: String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        writeISO8601(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the wire form's bytes: pages of changes write two per row.
    public func writeISO8601(to output: inout [UInt8]) {
        let ms = millisecondsSince1970
        let days = floorDiv(ms, 86_400_000)
        let msOfDay = ms - days * 86_400_000
        let (year, month, day) = civil(fromDays: days)
        func digits(_ value: Int64, _ width: Int) {
            if value < 0 || width == 4 && value > 9999 {
                // Outside the four-digit years: as many digits as it takes.
                let text = String(value)
                output.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: max(0, width - text.utf8.count)))
                output.append(contentsOf: text.utf8)
                return
            }
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                output.append(UInt8(ascii: "0") + UInt8(rest / divisor))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(year, 4)
        output.append(UInt8(ascii: "-"))
        digits(month, 2)
        output.append(UInt8(ascii: "-"))
        digits(day, 2)
        output.append(UInt8(ascii: "T"))
        digits(msOfDay / 3_600_000, 2)
        output.append(UInt8(ascii: ":"))
        digits((msOfDay / 60_000) % 60, 2)
        output.append(UInt8(ascii: ":"))
        digits((msOfDay / 1000) % 60, 2)
        output.append(UInt8(ascii: "."))
        digits(msOfDay % 1000, 3)
        output.append(UInt8(ascii: "Z"))
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let value = Timestamp(iso8601: text) else {
            throw DecodingError.dataCorruptedError(
                in: container,
                debugDescription: "expected an RFC 3339 date-time, such as 2026-11-21T13:47:35.123Z"
            )
        }
        self = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(iso8601)
    }

    // MARK: Parsing

    /// Whether `bytes` are an RFC 3339 date-time: for readers that check a time without keeping it.
    static func isValid(utf8 bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        parse(bytes) != nil
    }

    private static func parse(_ bytes: [UInt8]) -> Int64? {
        bytes.withUnsafeBufferPointer { parse($0) }
    }

    /// Reads `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` from `b`, indexed from zero; `T` and `Z` in either case.
    private static func parse(_ b: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard b.count >= 20 else { return nil }
        func digits(_ from: Int, _ count: Int) -> Int64? {
            var value: Int64 = 0
            for i in from..<(from + count) {
                let c = b[i]
                guard c >= 0x30, c <= 0x39 else { return nil }
                value = value * 10 + Int64(c - 0x30)
            }
            return value
        }
        guard b[4] == 0x2D, b[7] == 0x2D, b[10] == 0x54 || b[10] == 0x74, b[13] == 0x3A, b[16] == 0x3A,
            let year = digits(0, 4), let month = digits(5, 2), let day = digits(8, 2),
            let hour = digits(11, 2), let minute = digits(14, 2), let second = digits(17, 2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
            hour < 24, minute < 60, second < 60
        else { return nil }
        // The fraction: its first three digits are the milliseconds, those after them are dropped.
        var index = 19
        var milli: Int64 = 0
        if b[index] == 0x2E {
            index += 1
            let start = index
            while index < b.count, b[index] >= 0x30, b[index] <= 0x39 {
                if index - start < 3 { milli = milli * 10 + Int64(b[index] - 0x30) }
                index += 1
            }
            let count = index - start
            guard count > 0 else { return nil }
            for _ in count..<max(count, 3) { milli *= 10 }
        }
        var offsetMinutes: Int64 = 0
        guard index < b.count else { return nil }
        switch b[index] {
        case 0x5A, 0x7A:
            guard index + 1 == b.count else { return nil }
        case 0x2B, 0x2D:
            guard index + 6 == b.count, b[index + 3] == 0x3A,
                let oh = digits(index + 1, 2), let om = digits(index + 4, 2), oh < 24, om < 60
            else { return nil }
            offsetMinutes = (oh * 60 + om) * (b[index] == 0x2D ? -1 : 1)
        default:
            return nil
        }
        let days = daysFromCivil(year: year, month: month, day: day)
        let local = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli
        return local - offsetMinutes * 60_000
    }
}

// Howard Hinnant's civil-calendar algorithms, proleptic Gregorian.
private func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = floorDiv(y, 400)
    let yoe = y - era * 400
    let mp = (month + 9) % 12
    let doy = (153 * mp + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return era * 146_097 + doe - 719_468
}

private func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
    let z = z0 + 719_468
    let era = floorDiv(z, 146_097)
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let day = doy - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
}

private func daysIn(month: Int64, year: Int64) -> Int64 {
    switch month {
    case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
    case 4, 6, 9, 11: return 30
    default: return 31
    }
}

private func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
    a >= 0 ? a / b : -((-a + b - 1) / b)
}
