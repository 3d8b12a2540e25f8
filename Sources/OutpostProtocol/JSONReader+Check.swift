/// Checking JSON without building it: for bytes kept as they are, such as the fields of a roster page, which
/// are sealed as received.
extension JSONReader {
    /// Steps over one value, refusing what ``value()`` refuses, without building it: for bytes kept as they
    /// are, such as the fields of a roster page, which are sealed as received.
    mutating func checkValue() throws(JSONSyntaxError) {
        guard index < bytes.count else { throw error("unexpected end") }
        values += 1
        if values > maxValues { throw error("more than \(maxValues) values") }
        switch bytes[index] {
        case UInt8(ascii: "\""): try checkString()
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            let isObject = bytes[index] == UInt8(ascii: "{")
            let close = isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")
            try enter()
            defer { depth -= 1 }
            index += 1
            skipWhitespace()
            if index < bytes.count, bytes[index] == close {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                if isObject {
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a key") }
                    try checkString()
                    skipWhitespace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
                    index += 1
                    skipWhitespace()
                }
                try checkValue()
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == close {
                    index += 1
                    return
                } else {
                    throw error(isObject ? "expected ',' or '}'" : "expected ',' or ']'")
                }
            }
        default:
            _ = try value()
        }
    }

    /// Steps over a string, refusing what ``string()`` refuses.
    mutating func checkString() throws(JSONSyntaxError) {
        index += 1
        var run = index
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                try checkUTF8(run..<index)
                index += 1
                return
            case UInt8(ascii: "\\"):
                try checkUTF8(run..<index)
                index += 1
                guard index < bytes.count else { throw error("unexpected end") }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "n"), UInt8(ascii: "r"),
                    UInt8(ascii: "t"), UInt8(ascii: "b"), UInt8(ascii: "f"):
                    break
                case UInt8(ascii: "u"):
                    _ = try unicodeEscape()
                default: throw error("an unknown escape")
                }
                run = index
            default:
                if byte < 0x20 { throw error("a control character in a string") }
                index += 1
            }
        }
        throw error("an unterminated string")
    }

    /// Whether `range` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
    /// U+10FFFF), as `String(validating:)` decides, without making a string.
    func checkUTF8(_ range: Range<Int>) throws(JSONSyntaxError) {
        var position = range.lowerBound
        while position < range.upperBound {
            let lead = bytes[position]
            if lead < 0x80 {
                position += 1
                continue
            }
            let length: Int
            var low: UInt8 = 0x80
            var high: UInt8 = 0xBF
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; low = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; high = 0x9F
            case 0xF0: length = 4; low = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; high = 0x8F
            default: throw JSONSyntaxError(offset: position, reason: "a string that is not valid UTF-8")
            }
            guard range.upperBound - position >= length, (low...high).contains(bytes[position + 1]),
                (1..<length).dropFirst().allSatisfy({ (0x80...0xBF).contains(bytes[position + $0]) })
            else { throw JSONSyntaxError(offset: position, reason: "a string that is not valid UTF-8") }
            position += length
        }
    }
}
