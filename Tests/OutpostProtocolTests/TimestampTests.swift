import Foundation
import OutpostProtocol
import Testing

@Suite("Timestamp")
struct TimestampTests {
    @Test("parses UTC and offset forms to the same instant")
    func parsesOffsets() throws {
        let utc = try #require(Timestamp(iso8601: "2026-11-21T13:47:35.123Z"))
        let offset = try #require(Timestamp(iso8601: "2026-11-21T15:47:35.123+02:00"))
        let negative = try #require(Timestamp(iso8601: "2026-11-21T08:17:35.123-05:30"))
        #expect(utc == offset)
        #expect(utc == negative)
        #expect(utc.iso8601 == "2026-11-21T13:47:35.123Z")
    }

    @Test("agrees with Foundation on the instant")
    func agreesWithFoundation() throws {
        let timestamp = try #require(Timestamp(iso8601: "2024-02-29T23:59:59.999Z"))
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let date = try #require(formatter.date(from: "2024-02-29T23:59:59.999Z"))
        #expect(abs(timestamp.date.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.0005)
    }

    @Test("writes the same text as Foundation's formatter, for instants across the four-digit years")
    func writesAsFoundation() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        var random = SplitMix(seed: 7)
        for _ in 0..<2000 {
            // 1970 to 9999, whole milliseconds.
            let milliseconds = Int64.random(in: 0...253_402_300_799_999, using: &random)
            let timestamp = Timestamp(millisecondsSince1970: milliseconds)
            #expect(timestamp.iso8601 == formatter.string(from: timestamp.date))
        }
    }

    @Test(
        "round-trips through its wire form",
        arguments: [
            Int64(0), 1, -1, 86_399_999, 1_763_732_855_123, -62_135_596_800_000, 253_402_300_799_999,
        ])
    func roundTrips(milliseconds: Int64) throws {
        let timestamp = Timestamp(millisecondsSince1970: milliseconds)
        #expect(Timestamp(iso8601: timestamp.iso8601) == timestamp)
    }

    @Test(
        "reads every RFC 3339 spelling of an instant as that instant, written back in the canonical form",
        arguments: [
            ("2026-11-21T13:47:35.123Z", "2026-11-21T13:47:35.123Z"),
            ("2026-11-21T13:47:35Z", "2026-11-21T13:47:35.000Z"),
            ("2026-11-21T13:47:35.1Z", "2026-11-21T13:47:35.100Z"),
            ("2026-11-21T13:47:35.12Z", "2026-11-21T13:47:35.120Z"),
            ("2026-11-21T13:47:35.123456+00:00", "2026-11-21T13:47:35.123Z"),
            ("2026-11-21T13:47:35.1239999999Z", "2026-11-21T13:47:35.123Z"),
            ("2026-11-21t13:47:35.123z", "2026-11-21T13:47:35.123Z"),
            ("2026-11-21T15:47:35+02:00", "2026-11-21T13:47:35.000Z"),
            ("2026-11-21T08:17:35.5-05:30", "2026-11-21T13:47:35.500Z"),
            ("2026-11-21T13:47:35.504000-00:00", "2026-11-21T13:47:35.504Z"),
            ("1969-12-31T23:59:59.9999Z", "1969-12-31T23:59:59.999Z"),
        ])
    func readsRFC3339(text: String, canonical: String) throws {
        let timestamp = try #require(Timestamp(iso8601: text))
        #expect(timestamp.iso8601 == canonical)
        #expect(timestamp == Timestamp(iso8601: canonical))
    }

    @Test("agrees with Foundation on the instant of every fraction length and offset")
    func agreesWithFoundationOnSpellings() throws {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        var random = SplitMix(seed: 11)
        for _ in 0..<500 {
            let seconds = Int64.random(in: 946_684_800...4_102_444_799, using: &random)
            // Real zones, from -12:00 to +14:45: Foundation takes offsets of at most 18 hours.
            let offset = Int.random(in: -12...14, using: &random) * 60 + [0, 30, 45].randomElement(using: &random)!
            formatter.timeZone = TimeZone(secondsFromGMT: offset * 60)
            let whole = formatter.string(from: Date(timeIntervalSince1970: Double(seconds)))
            let digits = Int.random(in: 0...9, using: &random)
            let fraction = String((0..<digits).map { _ in Character(String(Int.random(in: 0...9, using: &random))) })
            // The formatter writes `Z` for a zero offset; insert the fraction before the zone.
            let zone = whole.firstIndex(where: { $0 == "Z" || $0 == "+" }) ?? whole.lastIndex(of: "-")!
            let text = whole[..<zone] + (digits > 0 ? "." + fraction : "") + whole[zone...]
            let milliseconds = Int64((fraction + "000").prefix(3))!
            #expect(Timestamp(iso8601: String(text))?.millisecondsSince1970 == seconds * 1000 + milliseconds, "\(text)")
        }
    }

    @Test(
        "refuses what is not an RFC 3339 date-time",
        arguments: [
            "", "2026-11-21", "2026-11-21T13:47:35", "2026-11-21T13:47:35.Z", "2026-11-21T13:47:35.123",
            "2026-13-01T00:00:00.000Z", "2026-02-30T00:00:00.000Z", "2025-02-29T00:00:00.000Z",
            "2026-11-21T24:00:00.000Z", "2026-11-21T13:60:00.000Z", "2026-11-21T13:47:60Z", "2026-11-21 13:47:35.123Z",
            "2026-11-21T13:47:35.123+0200", "2026-11-21T13:47:35+02", "2026-11-21T13:47:35+24:00", "2026-11-21T13:47:35Zz",
            "2026-11-21T13:47:35.12a3Z", "2026-11-21T13:47:35,123Z", "not a time", "１２３４-11-21T13:47:35.123Z",
        ])
    func refusesOtherForms(text: String) {
        #expect(Timestamp(iso8601: text) == nil)
    }

    @Test("decoding a bad timestamp is a decoding error, not a crash")
    func decodingError() {
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode([Timestamp].self, from: Data(#"["yesterday"]"#.utf8))
        }
    }
}
