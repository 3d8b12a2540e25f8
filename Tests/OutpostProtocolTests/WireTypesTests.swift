import Foundation
import OutpostProtocol
import Testing

@Suite("Wire types")
struct WireTypesTests {
    @Test("JSON values keep integers exact and round-trip")
    func jsonValues() throws {
        let text = #"{"a":9007199254740993,"b":1.5,"c":"x","d":[true,null],"e":{"f":-3}}"#
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        guard case .object(let object) = value else {
            Issue.record("not an object")
            return
        }
        #expect(object["a"] == .integer(9_007_199_254_740_993))
        #expect(object["b"] == .number(1.5))
        #expect(object["d"] == .array([.bool(true), .null]))
        let again = try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(value))
        #expect(again == value)
        #expect(value.depth == 2)
    }

    @Test("a value's weight is the bytes it takes as JSON, a number counted at its longest")
    func encodedSize() throws {
        let strings: [JSONValue] = [
            "", "plain", "Zoë \"Q\" Ångström 漢😀", "a\\b/c", "\n\r\t\u{8}\u{C}", "\u{1}\u{1F}x",
        ]
        for value in strings {
            #expect(try value.encodedSizeBound == value.jsonBytes().count, "\(value)")
        }
        let nested: JSONValue = .object([
            "list": .array([.null, .bool(true), .bool(false), "x\n", .array([]), .object([:])]),
            "object": .object(["k\"ey": "v", "empty": ""]), "none": .null,
        ])
        #expect(try nested.encodedSizeBound == nested.jsonBytes().count)
        let numbers: JSONValue = .array([.integer(1), .integer(Int64.min), .number(-2.2250738585072014e-308)])
        #expect(try numbers.encodedSizeBound >= numbers.jsonBytes().count)
        #expect(numbers.encodedSizeBound == 2 + 2 + 3 * 24)
    }

    @Test("a failure's reason is made one a server keeps: control characters blanked, cut at 1,000 scalars")
    func reportableError() {
        #expect(SyncFailure.isValidError("GPS signal required\nretry outside\t(2)\r"))
        for refused in [
            "", "a\u{0}b", "bell\u{7}", "del\u{7F}", "c1\u{85}", String(repeating: "x", count: 1001),
            "e" + String(repeating: "\u{301}", count: 1000),
        ] {
            #expect(!SyncFailure.isValidError(refused), "\(refused.unicodeScalars.count) scalars")
            #expect(SyncFailure.isValidError(SyncFailure.reportableError(refused)))
        }
        #expect(SyncFailure.reportableError("a\u{0}b\nc") == "a b\nc")
        #expect(SyncFailure.reportableError("") == "unknown error")
        let long = SyncFailure.reportableError(String(repeating: "x", count: 5000))
        #expect(long.unicodeScalars.count == 1000 && long.hasSuffix("x…"))
        #expect(SyncFailure.reportableError("already fine") == "already fine")
    }

    @Test("a mutation decodes with optional fields absent")
    func mutationDefaults() throws {
        let text = #"{"idempotencyKey":"k","collection":"notes","recordId":"r1","op":"delete","clientTimestamp":"2026-11-21T09:00:00.000Z"}"#
        let mutation = try JSONDecoder().decode(Mutation.self, from: Data(text.utf8))
        #expect(mutation.fields.isEmpty)
        #expect(mutation.baseVersion == nil)
        #expect(mutation.op == .delete)
    }

    @Test("the wire error has the documented shape")
    func wireErrorShape() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let data = try encoder.encode(WireError(code: .forbidden, message: "no"))
        #expect(String(decoding: data, as: UTF8.self) == #"{"error":{"code":"forbidden","message":"no"}}"#)
    }

    @Test(
        "identifiers refuse path traversal, separators and control characters",
        arguments: [
            "", "..", "a/../b", "../etc/passwd", "a/b", "a\\b", "a b", "a\u{0}b", ".hidden", "-dash", "a..b",
            String(repeating: "x", count: 129), "é", "a\nb", "a;DROP", "<script>",
        ])
    func identifierRefuses(text: String) {
        #expect(!Identifier.isValid(text))
    }

    @Test(
        "identifiers accept ordinary ids",
        arguments: [
            "r1", "guest-0042", "dev.a", "user@example.org", "2026-11-21T09:00:00.000Z", "a_b:c",
            String(repeating: "x", count: 128),
        ])
    func identifierAccepts(text: String) {
        #expect(Identifier.isValid(text))
    }

    @Test("roles are ordered staff < organizer < admin")
    func roleOrder() {
        #expect(Role.staff < .organizer)
        #expect(Role.organizer < .admin)
    }
}
