/// A JSON value: the type of every record field on the wire and in storage.
///
/// Integers that fit in `Int64` stay exact (`.integer`); other numbers are `.number`.
/// Money should travel as integer minor units or as a decimal string, never as a float.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        // Most common first: every failed attempt costs a thrown error, and strings dominate records.
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

extension JSONValue {
    /// The string, when this value is one.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// A plain rendering for scopes and terminals: strings unquoted, numbers and booleans as JSON.
    public var displayText: String {
        switch self {
        case .null: return "null"
        case .bool(let value): return String(value)
        case .integer(let value): return String(value)
        case .number(let value): return String(value)
        case .string(let value): return value
        case .array(let values): return "[" + values.map(\.displayText).joined(separator: ", ") + "]"
        case .object(let object):
            return "{" + object.keys.sorted().map { "\($0): \(object[$0]!.displayText)" }.joined(separator: ", ") + "}"
        }
    }

    /// Whether any string or key anywhere inside holds a NUL character, which no SQL text column accepts.
    public var containsNUL: Bool {
        switch self {
        case .null, .bool, .integer, .number: return false
        case .string(let value): return value.utf8.contains(0)
        case .array(let values): return values.contains { $0.containsNUL }
        case .object(let object): return object.contains { $0.key.utf8.contains(0) || $0.value.containsNUL }
        }
    }

    /// The bytes this value takes written as JSON, counting a number as the longest a number can be
    /// written: what a server weighs a record by.
    public var encodedSizeBound: Int {
        switch self {
        case .null: return 4
        case .bool(let value): return value ? 4 : 5
        case .integer, .number: return 24
        case .string(let value): return Self.encodedSizeBound(of: value)
        case .array(let values): return values.reduce(1 + max(values.count, 1)) { $0 + $1.encodedSizeBound }
        case .object(let object):
            return object.reduce(1 + max(object.count, 1)) {
                $0 + Self.encodedSizeBound(of: $1.key) + 1 + $1.value.encodedSizeBound
            }
        }
    }

    /// The bytes `value` takes as a JSON string, as ``JSONWriter/string(_:to:)`` writes it: its quotes, its
    /// UTF-8, one more for each `"`, `\` and short escape (`\n`), five more for any other control character.
    public static func encodedSizeBound(of value: String) -> Int {
        var size = 2
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09, 0x08, 0x0C: size += 2
            case ..<0x20: size += 6
            default: size += 1
            }
        }
        return size
    }

    /// How deeply arrays and objects nest inside this value (a scalar is 0).
    public var depth: Int {
        switch self {
        case .null, .bool, .integer, .number, .string: return 0
        case .array(let values): return 1 + (values.map(\.depth).max() ?? 0)
        case .object(let object): return 1 + (object.values.map(\.depth).max() ?? 0)
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByStringInterpolation, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByFloatLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(nilLiteral: ()) { self = .null }
}
