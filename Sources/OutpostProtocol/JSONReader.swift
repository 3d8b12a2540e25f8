/// A recursive-descent reader over contiguous bytes.
struct JSONReader {
    static let maximumDepth = 512

    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0
    /// Values stepped over by ``checkValue()``, and the most it steps over before it refuses the document.
    var values = 0
    var maxValues = Int.max

    static func document(_ bytes: UnsafeBufferPointer<UInt8>) throws(JSONSyntaxError) -> JSONValue {
        var reader = JSONReader(bytes: bytes)
        reader.skipWhitespace()
        let value = try reader.value()
        reader.skipWhitespace()
        guard reader.index == bytes.count else { throw reader.error("unexpected bytes after the document") }
        return value
    }

    func error(_ reason: String) -> JSONSyntaxError { JSONSyntaxError(offset: index, reason: reason) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func value() throws(JSONSyntaxError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "{"): return .object(try object())
        case UInt8(ascii: "["): return .array(try array())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw error("unexpected character")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONSyntaxError) {
        let length = word.utf8CodeUnitCount
        guard bytes.count - index >= length else { throw error("unexpected end") }
        for offset in 0..<length where bytes[index + offset] != word.utf8Start[offset] {
            throw error("unexpected character")
        }
        index += length
    }

    mutating func enter() throws(JSONSyntaxError) {
        depth += 1
        if depth > Self.maximumDepth { throw error("nested deeper than \(Self.maximumDepth)") }
    }

    mutating func object() throws(JSONSyntaxError) -> [String: JSONValue] {
        try enter()
        defer { depth -= 1 }
        var object: [String: JSONValue] = [:]
        try members { reader, key throws(JSONSyntaxError) in
            object[key] = try reader.value()
            return true
        }
        return object
    }

    /// Walks the object at the reader: after each key, `visit` reads or steps over the value and says whether
    /// to go on. Stopped early, the reader stays just after the value `visit` read.
    mutating func members(
        _ visit: (inout JSONReader, String) throws(JSONSyntaxError) -> Bool
    ) throws(JSONSyntaxError) {
        try keyedMembers { reader, key throws(JSONSyntaxError) in try visit(&reader, reader.text(of: key)) }
    }

    /// A member's key as read: the range of its bytes when they are plain ASCII with no escape (almost every
    /// key), its text otherwise.
    enum Key {
        case plain(Range<Int>)
        case text(String)
    }

    /// The text of `key`.
    func text(of key: Key) -> String {
        switch key {
        case .plain(let range): String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
        case .text(let text): text
        }
    }

    /// The walk of the visiting `members`, with each key as read (``Key``): for readers that compare keys
    /// without making them into strings.
    mutating func keyedMembers(
        _ visit: (inout JSONReader, Key) throws(JSONSyntaxError) -> Bool
    ) throws(JSONSyntaxError) {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { throw error("expected an object") }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a key") }
            let key = try self.key()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            guard try visit(&self, key) else { return }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end") }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): index += 1; return
            default: throw error("expected ',' or '}'")
            }
        }
    }

    /// Reads the key at the reader, refusing what ``string()`` refuses.
    private mutating func key() throws(JSONSyntaxError) -> Key {
        let start = index + 1
        var end = start
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") {
                index = end + 1
                return .plain(start..<end)
            }
            // An escape, a byte past ASCII or a control character: read as a string, which checks it.
            if byte == UInt8(ascii: "\\") || byte >= 0x80 || byte < 0x20 { break }
            end += 1
        }
        return .text(try string())
    }

    mutating func array() throws(JSONSyntaxError) -> [JSONValue] {
        try enter()
        defer { depth -= 1 }
        index += 1
        var array: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return array
        }
        while true {
            skipWhitespace()
            array.append(try value())
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end") }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"): index += 1; return array
            default: throw error("expected ',' or ']'")
            }
        }
    }

    mutating func string() throws(JSONSyntaxError) -> String {
        index += 1
        let start = index
        // The common case: no escape, read in place. All-ASCII text, most keys and ids, needs no UTF-8 check.
        var highBits: UInt8 = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text =
                    highBits < 0x80
                    ? String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                    : String(validating: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                guard let text else { throw JSONSyntaxError(offset: start, reason: "a string that is not valid UTF-8") }
                index += 1
                return text
            }
            highBits |= byte
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("a control character in a string") }
            index += 1
        }
        var decoded = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: decoded, as: UTF8.self) else {
                    throw JSONSyntaxError(offset: start, reason: "a string that is not valid UTF-8")
                }
                index += 1
                return text
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw error("unexpected end") }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escaped)
                case UInt8(ascii: "n"): decoded.append(0x0A)
                case UInt8(ascii: "r"): decoded.append(0x0D)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0C)
                case UInt8(ascii: "u"):
                    decoded.append(contentsOf: UTF8.encode(Unicode.Scalar(try unicodeEscape())!)!)
                default: throw error("an unknown escape")
                }
            default:
                if byte < 0x20 { throw error("a control character in a string") }
                decoded.append(byte)
                index += 1
            }
        }
        throw error("an unterminated string")
    }

    /// The scalar of a `\\u` escape, its four hex digits at the reader: a high surrogate must be followed by
    /// an escaped low one, and they make one scalar; a lone surrogate is refused.
    mutating func unicodeEscape() throws(JSONSyntaxError) -> UInt32 {
        let scalar = try hex4()
        if (0xD800..<0xDC00).contains(scalar) {
            guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            else { throw error("a lone surrogate") }
            index += 2
            let low = try hex4()
            guard (0xDC00..<0xE000).contains(low) else { throw error("a lone surrogate") }
            return 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
        }
        if (0xDC00..<0xE000).contains(scalar) { throw error("a lone surrogate") }
        return scalar
    }

    mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw error("unexpected end") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("a bad \\u escape")
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    mutating func number() throws(JSONSyntaxError) -> JSONValue {
        let start = index
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw error("a number without digits") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw error("a number with a leading zero") }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("a fraction without digits") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("an exponent without digits") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if let integer = wholeNumber(start..<index, negative: negative, plainInteger: isInteger) {
            return .integer(integer)
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw JSONSyntaxError(offset: start, reason: "a number out of range") }
        return .number(value)
    }

    /// The literal's exact value when it is a whole number that fits in `Int64`, however it is written
    /// (`3`, `3.0`, `1.5e3`): the decimal digits decide, not the nearest `Double`, as the Codable reading does.
    func wholeNumber(_ range: Range<Int>, negative: Bool, plainInteger: Bool) -> Int64? {
        var digits: [UInt8] = []
        var exponent = 0
        var position = negative ? range.lowerBound + 1 : range.lowerBound
        while position < range.upperBound, isDigit(bytes[position]) {
            digits.append(bytes[position] - UInt8(ascii: "0"))
            position += 1
        }
        if !plainInteger {
            if position < range.upperBound, bytes[position] == UInt8(ascii: ".") {
                position += 1
                while position < range.upperBound, isDigit(bytes[position]) {
                    digits.append(bytes[position] - UInt8(ascii: "0"))
                    exponent -= 1
                    position += 1
                }
            }
            if position < range.upperBound {
                position += 1  // e or E
                var sign = 1
                if bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                    sign = bytes[position] == UInt8(ascii: "-") ? -1 : 1
                    position += 1
                }
                var stated = 0
                while position < range.upperBound {
                    stated = stated * 10 + Int(bytes[position] - UInt8(ascii: "0"))
                    if stated > 400 { return nil }  // far outside Int64 either way
                    position += 1
                }
                exponent += sign * stated
            }
            while exponent < 0, digits.last == 0 {
                digits.removeLast()
                exponent += 1
            }
            if exponent < 0 { return nil }
            while let first = digits.first, first == 0, digits.count > 1 { digits.removeFirst() }
            if digits.count + exponent > 19 { return nil }
            digits.append(contentsOf: repeatElement(0, count: exponent))
        }
        var value: Int64 = 0
        for digit in digits {
            let (shifted, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) = negative ? shifted.subtractingReportingOverflow(Int64(digit)) : shifted.addingReportingOverflow(Int64(digit))
            if o1 || o2 { return nil }
            value = next
        }
        return value
    }

    /// Reads the object's members until each of `names` was seen, stepping over the others; the first value
    /// of each name. Keys compare as the whole parse's dictionary compares them: as Swift strings, canonically
    /// equivalent spellings equal.
    ///
    /// A key of plain ASCII (``Key/plain(_:)``), almost every key, is compared with an ASCII name as bytes,
    /// without being made into a string: for ASCII text the two comparisons agree.
    mutating func members(_ names: [String]) throws(JSONSyntaxError) -> [JSONValue?] {
        skipWhitespace()
        var found = [JSONValue?](repeating: nil, count: names.count)
        var missing = names.count
        let asciiNames = names.map { $0.utf8.allSatisfy { $0 < 0x80 } }
        try keyedMembers { reader, key throws(JSONSyntaxError) in
            var value: JSONValue?
            var text: String?
            for position in names.indices where found[position] == nil {
                let matches: Bool
                if case .plain(let range) = key, asciiNames[position] {
                    matches = names[position].utf8.elementsEqual(UnsafeBufferPointer(rebasing: reader.bytes[range]))
                } else {
                    if text == nil { text = reader.text(of: key) }
                    matches = names[position] == text
                }
                guard matches else { continue }
                if value == nil { value = try reader.value() }
                found[position] = value
                missing -= 1
            }
            if value == nil { try reader.skipValue() }
            return missing > 0
        }
        return found
    }

    /// Steps over one value without building it.
    mutating func skipValue() throws(JSONSyntaxError) {
        guard index < bytes.count else { throw error("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "\""):
            index += 1
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\""): index += 1; return
                case UInt8(ascii: "\\"): index += 2
                default: index += 1
                }
            }
            throw error("an unterminated string")
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            let close = bytes[index] == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
            try enter()
            defer { depth -= 1 }
            index += 1
            skipWhitespace()
            if index < bytes.count, bytes[index] == close { index += 1; return }
            while true {
                skipWhitespace()
                try skipValue()
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end") }
                if close == UInt8(ascii: "}"), bytes[index] == UInt8(ascii: ":") {
                    index += 1
                    skipWhitespace()
                    try skipValue()
                    skipWhitespace()
                    guard index < bytes.count else { throw error("unexpected end") }
                }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == close { index += 1; return }
                throw error("expected ',' or a closing bracket")
            }
        default:
            // A literal or a number: its characters up to the next delimiter.
            let start = index
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x09, 0x0A, 0x0D: break
                default: index += 1; continue
                }
                break
            }
            if index == start { throw error("unexpected character") }
        }
    }

    func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
