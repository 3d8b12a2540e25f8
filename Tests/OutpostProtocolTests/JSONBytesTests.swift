import Foundation
import OutpostProtocol
import Testing

/// The JSON reader and writer that pages of changes use instead of Codable must read and write exactly what
/// Foundation's `JSONDecoder` and `JSONEncoder` do.
@Suite("JSON bytes")
struct JSONBytesTests {
    @Test("random values read back as they were written, and as Foundation reads them", arguments: 0..<20)
    func roundTrip(seed: Int) throws {
        var random = SplitMix(seed: UInt64(seed))
        for _ in 0..<50 {
            let value = JSONValue.random(depth: 0, using: &random)
            let bytes = try value.jsonBytes()
            #expect(try JSONValue(parsing: bytes) == value.canonical)
            #expect(try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) == value.canonical)
            // And what Foundation writes, this reads as Foundation does.
            let foundation = try JSONEncoder().encode(value)
            #expect(try JSONValue(parsing: foundation) == JSONDecoder().decode(JSONValue.self, from: foundation))
        }
    }

    @Test("escapes, surrogate pairs, whitespace and number forms")
    func accepted() throws {
        let text = #" { "a" : "\u00e9\ud83d\ude00\/\\\"\n\t" , "b" : [ -0 , 12.5e-1 , 1E2 , 92233720368547758070 ] , "c" : { } , "d" : [ ] } "#
        let value = try JSONValue(parsing: Array(text.utf8))
        #expect(
            value
                == .object([
                    "a": .string("é😀/\\\"\n\t"),
                    "b": .array([.integer(0), .number(1.25), .integer(100), .number(92_233_720_368_547_758_070)]),
                    "c": .object([:]), "d": .array([]),
                ]))
        #expect(try JSONValue(parsing: "-9223372036854775808") == .integer(.min))
        #expect(try JSONValue(parsing: "9223372036854775807") == .integer(.max))
        // Whole numbers by their decimal digits, as Foundation reads them, not by the nearest Double.
        for text in ["-4.984316220921845e+18", "3.0", "1e17", "0.5e1", "120e-1", "-0.0", "12.5e-1"] {
            #expect(try JSONValue(parsing: text) == JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)))
        }
    }

    @Test("trailing commas, which Foundation lets through, are refused", arguments: ["[1,]", #"{"a":1,}"#])
    func trailingCommas(text: String) throws {
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: Array(text.utf8)) }
        _ = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }

    @Test(
        "what is not JSON is refused, as Foundation refuses it",
        arguments: [
            "", " ", "{", "}", #"{"a" 1}"#, #"{a:1}"#, "01", "-01", "1.", ".1", "-", "+1", "1e", "1e+",
            #""\x""#, "\"\u{01}\"", #""\ud800""#, #""\udc00x""#, #""\ud800\u0041""#, #""\u12""#, "tru", "nul", "falsy", "1 2",
            "[1 2]", "\"open", "1e400", "NaN", "[\"a\"]]",
        ])
    func refused(text: String) {
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: Array(text.utf8)) }
        #expect(throws: (any Error).self) { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }
    }

    @Test("checking an object without building it agrees with parsing it, on damaged and hostile bytes", arguments: 0..<20)
    func checkAgreesWithParse(seed: Int) {
        var random = SplitMix(seed: UInt64(seed) + 700)
        func agree(_ bytes: [UInt8]) {
            let parsed: Bool
            if case .object? = try? JSONValue(parsing: bytes) { parsed = true } else { parsed = false }
            let checked = (try? JSONValue.checkObject(bytes)) != nil
            #expect(checked == parsed, "\(bytes)")
        }
        for _ in 0..<50 {
            let value = JSONValue.object(["v": .random(depth: 0, using: &random), "s": "é😀\u{7F}\"\\"])
            let bytes = (try? value.jsonBytes()) ?? []
            agree(bytes)
            // Damaged: a byte replaced, removed or repeated, anywhere.
            for _ in 0..<10 where !bytes.isEmpty {
                var damaged = bytes
                let at = Int.random(in: 0..<damaged.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: damaged[at] = UInt8.random(in: 0...255, using: &random)
                case 1: damaged.remove(at: at)
                default: damaged.insert(damaged[at], at: at)
                }
                agree(damaged)
            }
        }
        // UTF-8 at its edges: overlong forms, surrogates, past U+10FFFF, cut short, and the largest valid ones.
        for sequence: [UInt8] in [
            [0xC0, 0x80], [0xC1, 0xBF], [0xC2, 0x80], [0xDF, 0xBF], [0xE0, 0x9F, 0xBF], [0xE0, 0xA0, 0x80],
            [0xED, 0x9F, 0xBF], [0xED, 0xA0, 0x80], [0xEF, 0xBF, 0xBF], [0xF0, 0x8F, 0xBF, 0xBF],
            [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF], [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80],
            [0xE2, 0x82], [0xF0, 0x9F, 0x98], [0x80], [0xBF], [0xFE], [0xFF],
        ] {
            agree(Array(#"{"a":""#.utf8) + sequence + Array(#""}"#.utf8))
            agree(Array(#"{""#.utf8) + sequence + Array(#"":1}"#.utf8))
        }
        for text in ["[1]", "1", #""a""#, "{}", " {} ", #"{"a":1}x"#, #"{"a":[1,{"b":null}]}"#, #"{"a":1e400}"#] {
            agree(Array(text.utf8))
        }
    }

    @Test("invalid UTF-8 and nesting past 512 are refused")
    func hostile() {
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: [0x22, 0xFF, 0x22]) }
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: [0x22, 0xC3, 0x22]) }
        let deep = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: deep) }
        let deepest = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        #expect(throws: Never.self) { try JSONValue(parsing: deepest) }
        #expect(throws: JSONSyntaxError.self) { try JSONValue.number(.infinity).jsonBytes() }
    }

    @Test(
        "one member, or several in one pass, is read without building the others, and is what the whole parse finds (keys compared as strings)",
        arguments: 0..<10)
    func member(seed: Int) throws {
        var random = SplitMix(seed: UInt64(seed) + 500)
        for _ in 0..<30 {
            var object: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...6, using: &random) {
                object[JSONValue.randomString(using: &random)] = JSONValue.random(depth: 0, using: &random)
            }
            let name = Bool.random(using: &random) ? "name" : JSONValue.randomString(using: &random)
            if Bool.random(using: &random) { object[name] = .string("Ana \"Q\" Silva") }
            let bytes = try JSONValue.object(object).jsonBytes()
            #expect(try JSONValue.member(name, ofObject: bytes) == object[name]?.canonical)
            // And with Foundation's spacing-free but differently escaped output.
            let foundation = try JSONEncoder().encode(JSONValue.object(object))
            #expect(try JSONValue.member(name, ofObject: foundation) == object[name]?.canonical)
            // Several at once, in one pass: the same values.
            let other = JSONValue.randomString(using: &random)
            #expect(
                try JSONValue.members([name, other, "absent\u{0}"], ofObject: bytes)
                    == [object[name]?.canonical, object[other]?.canonical, nil])
        }
        #expect(
            try JSONValue.members(["a", "b"], ofObject: Array(#"{"b": 1, "c": {"a": 3}, "a": "x", "b": 2}"#.utf8))
                == [.string("x"), .integer(1)])
        #expect(throws: JSONSyntaxError.self) { try JSONValue.members(["a"], ofObject: Array("[1]".utf8)) }
        // Keys written with escapes, or canonically equivalent to a name (the Kelvin sign is K), are that name.
        #expect(try JSONValue.members(["name", "K"], ofObject: Array(#"{"n\u0061me": 1, "\u212A": 2}"#.utf8)) == [.integer(1), .integer(2)])
        #expect(try JSONValue.members(["K"], ofObject: Array("{\"\u{212A}\": 3}".utf8)) == [.integer(3)])
        #expect(try JSONValue.members(["\u{212A}"], ofObject: Array(#"{"K": 4}"#.utf8)) == [.integer(4)])
        // Read until every name is found, as before: what follows the last one is not looked at.
        #expect(try JSONValue.members(["a"], ofObject: Array(#"{"a": 1"#.utf8)) == [.integer(1)])
        #expect(throws: JSONSyntaxError.self) { try JSONValue.members(["a"], ofObject: [0x7B, 0x22, 0x61, 0x0A, 0x22, 0x3A, 0x31, 0x7D]) }
        #expect(try JSONValue.member("a", ofObject: Array(#" { "b" : [1, {"a": 2}, "}"] , "a" : true } "#.utf8)) == .bool(true))
        #expect(try JSONValue.member("a", ofObject: Array("{}".utf8)) == nil)
        #expect(throws: JSONSyntaxError.self) { try JSONValue.member("a", ofObject: Array("[1]".utf8)) }
    }

    @Test("the writer writes the bytes Foundation's sorted-key encoder writes", arguments: 0..<100)
    func foundationBytes(seed: Int) throws {
        var random = SplitMix(seed: UInt64(seed) + 900)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for _ in 0..<50 {
            let value = JSONValue.random(depth: 0, using: &random)
            let ours = String(decoding: try value.jsonBytes(), as: UTF8.self)
            let theirs = String(decoding: try encoder.encode(value), as: UTF8.self)
            #expect(ours == theirs)
        }
    }

    @Test("the writer escapes what JSON requires and keys come out sorted")
    func writer() throws {
        let text = "a\"b\\c\u{01}\u{1F}/é"
        let value = JSONValue.object(["b": .string(text), "a": .number(0.5), "c": .integer(-3)])
        #expect(String(decoding: try value.jsonBytes(), as: UTF8.self) == #"{"a":0.5,"b":"a\"b\\c\u0001\u001f/é","c":-3}"#)
    }

    @Test("pages of changes read and write the same JSON as their Codable forms", arguments: 0..<5)
    func pages(seed: Int) throws {
        var random = SplitMix(seed: UInt64(seed) + 100)
        var changes: [Change] = []
        for index in 0..<40 {
            let tombstone = index % 7 == 0
            let fields: [String: JSONValue] =
                tombstone
                ? [:] : ["name": .string("Ana \(index)"), "extra": JSONValue.random(depth: 1, using: &random)]
            changes.append(
                Change(
                    collection: "guests", recordId: "g\(index)", scope: seed % 2 == 0 ? "" : "event-\(seed)",
                    version: Int64(index + 1), tombstone: tombstone, fields: fields,
                    createdAt: Timestamp(millisecondsSince1970: 1_795_000_000_000 + Int64(index)),
                    updatedAt: Timestamp(millisecondsSince1970: 1_795_000_100_000 + Int64(index))))
        }
        let pull = PullResponse(changes: changes, cursor: "c-\(seed)", hasMore: seed % 2 == 0)
        let snapshots = [
            SnapshotResponse(records: changes, total: 1000, continuation: "next", cursor: nil),
            SnapshotResponse(records: changes, total: 40, continuation: nil, cursor: "c"),
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]

        #expect(try PullResponse(jsonBytes: pull.jsonBytes()) == pull.canonical)
        #expect(try JSONDecoder().decode(PullResponse.self, from: Data(pull.jsonBytes())).canonical == pull.canonical)
        #expect(try PullResponse(jsonBytes: encoder.encode(pull)).canonical == pull.canonical)
        // Read with its fields kept as sent, from this writer's bytes and from JSONEncoder's, and from the decoded page.
        for page in [try PullPage(jsonBytes: pull.jsonBytes()), try PullPage(jsonBytes: Array(encoder.encode(pull))), try PullPage(pull)] {
            #expect(page.cursor == pull.cursor && page.hasMore == pull.hasMore)
            #expect(page.changes.map(\.recordId) == pull.changes.map(\.recordId))
            #expect(page.changes.map(\.version) == pull.changes.map(\.version))
            #expect(page.changes.map(\.tombstone) == pull.changes.map(\.tombstone))
            #expect(try page.changes.map { try [String: JSONValue](parsingObject: $0.fieldsJSON) } == pull.canonical.changes.map(\.fields))
        }
        for snapshot in snapshots {
            // Read with its fields kept as sent: the same records, and fields that parse to the same values.
            let page = try SnapshotPage(jsonBytes: snapshot.jsonBytes())
            #expect(page.total == snapshot.total && page.continuation == snapshot.continuation && page.cursor == snapshot.cursor)
            #expect(page.records.map(\.recordId) == snapshot.records.map(\.recordId))
            #expect(page.records.map(\.version) == snapshot.records.map(\.version))
            #expect(page.records.map(\.tombstone) == snapshot.records.map(\.tombstone))
            #expect(try page.records.map { try [String: JSONValue](parsingObject: $0.fieldsJSON) } == snapshot.canonical.records.map(\.fields))
            #expect(try SnapshotPage(jsonBytes: Array(encoder.encode(snapshot))).records.map(\.recordId) == snapshot.records.map(\.recordId))
            #expect(try SnapshotResponse(jsonBytes: snapshot.jsonBytes()) == snapshot.canonical)
            #expect(try JSONDecoder().decode(SnapshotResponse.self, from: Data(snapshot.jsonBytes())).canonical == snapshot.canonical)
            #expect(try SnapshotResponse(jsonBytes: encoder.encode(snapshot)).canonical == snapshot.canonical)
        }
    }

    @Test("a page with a member missing or of the wrong type is refused, naming the member")
    func badPages() throws {
        let change = Change(
            collection: "guests", recordId: "g1", version: 1, tombstone: false, fields: [:],
            createdAt: Timestamp(millisecondsSince1970: 0), updatedAt: Timestamp(millisecondsSince1970: 0))
        let good = String(decoding: try PullResponse(changes: [change], cursor: "c", hasMore: false).jsonBytes(), as: UTF8.self)
        for (broken, member) in [
            (good.replacingOccurrences(of: #""version":1"#, with: #""version":"1""#), "version"),
            (good.replacingOccurrences(of: #""hasMore":false"#, with: #""more":false"#), "hasMore"),
            (good.replacingOccurrences(of: "1970-01-01T00:00:00.000Z", with: "yesterday"), "createdAt"),
            (good.replacingOccurrences(of: #""fields":{}"#, with: #""fields":[]"#), "fields"),
        ] {
            #expect(broken != good)
            let error = #expect(throws: JSONSyntaxError.self) { try PullResponse(jsonBytes: Array(broken.utf8)) }
            #expect(error?.reason.contains(member) == true)
            // A pull read with its fields kept as sent refuses it too, naming the same member.
            let raw = #expect(throws: JSONSyntaxError.self) { try PullPage(jsonBytes: Array(broken.utf8)) }
            #expect(raw?.reason.contains(member) == true, "\(raw?.reason ?? "")")
        }
        // Checked in place rather than read: collection and scope must still be strings, and a time written with
        // escapes is read as its text before it is checked, as the whole reading does.
        for (broken, member) in [
            (good.replacingOccurrences(of: #""collection":"guests""#, with: #""collection":7"#), "collection"),
            (good.replacingOccurrences(of: #""scope":""#, with: #""scope":null,"x":""#), "scope"),
            (good.replacingOccurrences(of: "1970-01-01T00:00:00.000Z", with: #"1970-01-01T00:00:00.000\u005"#), "escape"),
            (good.replacingOccurrences(of: "1970-01-01T00:00:00.000Z", with: #"1970-13-01T00:00:00.000\u005A"#), "createdAt"),
        ] {
            #expect(broken != good)
            #expect(throws: JSONSyntaxError.self) { try PullResponse(jsonBytes: Array(broken.utf8)) }
            let raw = #expect(throws: JSONSyntaxError.self) { try PullPage(jsonBytes: Array(broken.utf8)) }
            #expect(raw?.reason.contains(member) == true, "\(raw?.reason ?? "")")
        }
        let escapedTime = good.replacingOccurrences(of: "1970-01-01T00:00:00.000Z", with: #"1970-01-01T00:00:00.000\u005A"#)
        #expect(escapedTime != good)
        #expect(try PullResponse(jsonBytes: Array(escapedTime.utf8)).changes.first?.createdAt == Timestamp(millisecondsSince1970: 0))
        #expect(try PullPage(jsonBytes: Array(escapedTime.utf8)).changes.map(\.recordId) == ["g1"])
        for broken in [
            good.replacingOccurrences(of: #""fields":{}"#, with: #""fields":{"a":"\x"}"#),
            good.replacingOccurrences(of: #""cursor":"c""#, with: #""cursor":1"#),
            good.replacingOccurrences(of: #""recordId":"g1","#, with: ""),
            good + " {}",
        ] {
            #expect(broken != good)
            #expect(throws: JSONSyntaxError.self) { try PullPage(jsonBytes: Array(broken.utf8)) }
            #expect(throws: JSONSyntaxError.self) { try PullResponse(jsonBytes: Array(broken.utf8)) }
        }
        // A snapshot page read with its fields kept as sent refuses what the whole reading refuses.
        let page = String(decoding: try SnapshotResponse(records: [change], total: 1, continuation: nil, cursor: "c").jsonBytes(), as: UTF8.self)
        for (broken, member) in [
            (page.replacingOccurrences(of: #""version":1"#, with: #""version":"1""#), "version"),
            (page.replacingOccurrences(of: #""total":1"#, with: #""count":1"#), "total"),
            (page.replacingOccurrences(of: "1970-01-01T00:00:00.000Z", with: "yesterday"), "createdAt"),
            (page.replacingOccurrences(of: #""fields":{}"#, with: #""fields":[]"#), "fields"),
            (page.replacingOccurrences(of: #""recordId":"g1","#, with: ""), "recordId"),
            (page.replacingOccurrences(of: #""fields":{}"#, with: #""fields":{"a":"\x"}"#), "escape"),
        ] {
            #expect(broken != page)
            let error = #expect(throws: JSONSyntaxError.self) { try SnapshotPage(jsonBytes: Array(broken.utf8)) }
            #expect(error?.reason.contains(member) == true, "\(error?.reason ?? "")")
            #expect(throws: JSONSyntaxError.self) { try SnapshotResponse(jsonBytes: Array(broken.utf8)) }
        }
    }

    @Test("a survey counts values and top-level array elements without building, and refuses unknown members and too many values")
    func survey() throws {
        let bytes = Array(#"{"deviceId":"d","mutations":[{"a":[1,2]},{"b":{"c":null}}]}"#.utf8)
        let survey = try JSONValue.survey(bytes, members: ["deviceId", "mutations"], maxValues: 100)
        #expect(survey.arrayCounts == ["mutations": 2])
        // The object, "d", the array, two objects, [1,2] and its two numbers, {"c":null} and its null.
        #expect(survey.values == 10)
        #expect(throws: JSONSurveyError.unknownMember("other")) {
            try JSONValue.survey(Array(#"{"deviceId":"d","other":[]}"#.utf8), members: ["deviceId"], maxValues: 100)
        }
        #expect(throws: JSONSurveyError.tooManyValues(9)) {
            try JSONValue.survey(bytes, members: ["deviceId", "mutations"], maxValues: 9)
        }
        for broken in [#"{"deviceId":"d""#, "[1]", #"{"deviceId":"d"} x"#, #"{"mutations":[1,]}"#] {
            #expect(throws: JSONSurveyError.self, "\(broken)") {
                try JSONValue.survey(Array(broken.utf8), members: ["deviceId", "mutations"], maxValues: 100)
            }
        }
    }
}

/// SplitMix64: the same seed gives the same values.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension JSONValue {
    static func random(depth: Int, using random: inout SplitMix) -> JSONValue {
        switch Int.random(in: 0..<(depth >= 3 ? 5 : 7), using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2: return .integer(Int64.random(in: .min ... .max, using: &random) >> Int64.random(in: 0...63, using: &random))
        case 3:
            // Finite, with and without a fraction, tiny and huge.
            let magnitude = Double.random(in: -1...1, using: &random) * pow(10, Double(Int.random(in: -300...300, using: &random)))
            return .number(Bool.random(using: &random) ? magnitude : magnitude.rounded() + 0.5)
        case 4: return .string(randomString(using: &random))
        case 5: return .array((0..<Int.random(in: 0...4, using: &random)).map { _ in JSONValue.random(depth: depth + 1, using: &random) })
        default:
            var object: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...4, using: &random) {
                object[randomString(using: &random)] = JSONValue.random(depth: depth + 1, using: &random)
            }
            return .object(object)
        }
    }

    static func randomString(using random: inout SplitMix) -> String {
        // "e\u{301}" is "é" decomposed: equal to it for Swift's `<`, not byte for byte.
        let pieces = ["a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\u{01}", "\u{1F}", "é", "e\u{301}", "f", "ß", "漢", "😀", "\u{2028}", "\u{7F}"]
        return (0..<Int.random(in: 0...8, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
    }

    /// The value as Foundation reads it back: a number whose written form is a whole number that fits in
    /// `Int64` (by its decimal digits) reads as an integer.
    var canonical: JSONValue {
        switch self {
        case .number(let value):
            return (try? JSONDecoder().decode(JSONValue.self, from: Data(value.description.utf8))) ?? self
        case .array(let values): return .array(values.map(\.canonical))
        case .object(let object): return .object(object.mapValues(\.canonical))
        default: return self
        }
    }
}

extension Change {
    var canonical: Change {
        var change = self
        change.fields = fields.mapValues(\.canonical)
        return change
    }
}

extension PullResponse {
    var canonical: PullResponse {
        var page = self
        page.changes = changes.map(\.canonical)
        return page
    }
}

extension SnapshotResponse {
    var canonical: SnapshotResponse {
        var page = self
        page.records = records.map(\.canonical)
        return page
    }

}
