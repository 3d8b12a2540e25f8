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
        "refuses anything but ISO 8601 with milliseconds and a zone",
        arguments: [
            "", "2026-11-21", "2026-11-21T13:47:35Z", "2026-11-21T13:47:35.12Z", "2026-11-21T13:47:35.1234Z",
            "2026-11-21T13:47:35.123", "2026-13-01T00:00:00.000Z", "2026-02-30T00:00:00.000Z",
            "2025-02-29T00:00:00.000Z", "2026-11-21T24:00:00.000Z", "2026-11-21T13:60:00.000Z",
            "2026-11-21 13:47:35.123Z", "2026-11-21T13:47:35.123+0200", "not a time", "１２３４-11-21T13:47:35.123Z",
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
