/// A strict reader and writer of JSON bytes for ``JSONValue``, for the paths that move pages of records.
///
/// Foundation's `JSONDecoder` spends about 15 µs per roster row decoding `[String: JSONValue]` through
/// Codable (a thrown error per failed attempt at each value's type); this reads the same bytes in about a
/// tenth of that. It accepts exactly RFC 8259 JSON: no comments, no trailing commas, no lone surrogates,
/// valid UTF-8 only, and nesting at most 512 deep (as Foundation's limit), so that hostile input cannot
/// exhaust the stack.
///
/// It reads numbers as the Codable conformance does: a whole number that fits in `Int64` (`3`, `3.0`, `1e2`)
/// is ``JSONValue/integer(_:)``, any other ``JSONValue/number(_:)``. The writer writes object keys in sorted
/// order and does not escape `/`, as the server's storage always has.
extension JSONValue {
    /// Parses one JSON document.
    ///
    /// - Throws: ``JSONSyntaxError`` with the byte offset of the first error.
    public init(parsing bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        let parsed: Result<JSONValue, JSONSyntaxError>? = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONSyntaxError) in try JSONReader.document(buffer) }
        }
        if let parsed {
            self = try parsed.get()
        } else {
            let copy = Array(bytes)
            self = try copy.withUnsafeBufferPointer { buffer in
                Result { () throws(JSONSyntaxError) in try JSONReader.document(buffer) }
            }.get()
        }
    }

    /// Parses one JSON document held in a string.
    public init(parsing text: String) throws(JSONSyntaxError) {
        var text = text
        let parsed = text.withUTF8 { buffer in Result { () throws(JSONSyntaxError) in try JSONReader.document(buffer) } }
        self = try parsed.get()
    }

    /// The value as compact JSON, keys sorted.
    ///
    /// - Throws: ``JSONSyntaxError`` for a number that is not finite, which JSON cannot express.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        try write(to: &output)
        return output
    }

    /// Appends the value as compact JSON, keys sorted.
    public func write(to output: inout [UInt8]) throws(JSONSyntaxError) {
        switch self {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let value): output.append(contentsOf: (value ? "true" : "false").utf8)
        case .integer(let value): output.append(contentsOf: String(value).utf8)
        case .number(let value):
            guard value.isFinite else { throw JSONSyntaxError(offset: output.count, reason: "a number that is not finite") }
            // As Foundation writes a double: a whole one without its ".0".
            let text = value.description
            output.append(contentsOf: text.hasSuffix(".0") ? text.utf8.dropLast(2) : text.utf8[...])
        case .string(let value): JSONWriter.string(value, to: &output)
        case .array(let values):
            try JSONWriter.array(values, to: &output) { (value, output: inout [UInt8]) throws(JSONSyntaxError) in
                try value.write(to: &output)
            }
        case .object(let object):
            try JSONWriter.object(object, to: &output)
        }
    }
}

extension JSONValue {
    /// One member of a document that is an object, read without building the others (they are stepped
    /// over, not checked): nil when the object has no such member.
    ///
    /// - Throws: ``JSONSyntaxError`` when the bytes up to that member are not a JSON object.
    public static func member(_ name: String, ofObject bytes: some Collection<UInt8>) throws(JSONSyntaxError) -> JSONValue? {
        try members([name], ofObject: bytes)[0]
    }

    /// Several members of a document that is an object, in one pass, each as ``member(_:ofObject:)`` reads it:
    /// one value per name, nil for a name the object lacks.
    public static func members(_ names: [String], ofObject bytes: some Collection<UInt8>) throws(JSONSyntaxError)
        -> [JSONValue?]
    {
        let read: (UnsafeBufferPointer<UInt8>) -> Result<[JSONValue?], JSONSyntaxError> = { buffer in
            Result { () throws(JSONSyntaxError) in
                var reader = JSONReader(bytes: buffer)
                return try reader.members(names)
            }
        }
        if let result = bytes.withContiguousStorageIfAvailable(read) { return try result.get() }
        return try Array(bytes).withUnsafeBufferPointer(read).get()
    }
}

extension JSONValue {
    /// Checks that `bytes` are one JSON object that ``init(parsing:)`` would read, without building it.
    public static func checkObject(_ bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        let check: (UnsafeBufferPointer<UInt8>) -> Result<Void, JSONSyntaxError> = { buffer in
            Result { () throws(JSONSyntaxError) in
                var reader = JSONReader(bytes: buffer)
                reader.skipWhitespace()
                guard reader.index < buffer.count, buffer[reader.index] == UInt8(ascii: "{") else {
                    throw reader.error("expected an object")
                }
                try reader.checkValue()
                reader.skipWhitespace()
                guard reader.index == buffer.count else { throw reader.error("unexpected bytes after the document") }
            }
        }
        if let result = bytes.withContiguousStorageIfAvailable(check) { return try result.get() }
        return try Array(bytes).withUnsafeBufferPointer(check).get()
    }
}

extension Dictionary where Key == String, Value == JSONValue {
    /// The object as compact JSON, keys sorted.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        try JSONWriter.object(self, to: &output)
        return output
    }

    /// Parses a JSON document that must be an object.
    public init(parsingObject bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        guard case .object(let object) = try JSONValue(parsing: bytes) else {
            throw JSONSyntaxError(offset: 0, reason: "expected an object")
        }
        self = object
    }
}

/// Bytes that are not the JSON a reader expected.
public struct JSONSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Where the error was found, in bytes from the start.
    public var offset: Int
    public var reason: String

    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

/// Writing pieces of JSON, for the types that write themselves without `JSONEncoder`.
public enum JSONWriter {
    /// A string literal, with the escapes JSON requires and no others.
    public static func string(_ value: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            // Runs that need no escape, most strings whole, are copied at once.
            var run = 0
            for position in 0..<bytes.count {
                let byte = bytes[position]
                guard byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 else { continue }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<position]))
                escape(byte, to: &output)
                run = position + 1
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run...]))
        }
        output.append(UInt8(ascii: "\""))
    }

    private static func escape(_ byte: UInt8, to output: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
        case UInt8(ascii: "\\"): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
        case 0x0A: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
        case 0x0D: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
        case 0x09: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
        case 0x08: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
        case 0x0C: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
        default:
            let hex = Array("0123456789abcdef".utf8)
            output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            output.append(hex[Int(byte >> 4)])
            output.append(hex[Int(byte & 0xF)])
        }
    }

    /// An array whose elements `write` writes, commas between.
    public static func array<Element>(
        _ elements: some Sequence<Element>, to output: inout [UInt8],
        write: (Element, inout [UInt8]) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "["))
        var first = true
        for element in elements {
            if !first { output.append(UInt8(ascii: ",")) }
            first = false
            try write(element, &output)
        }
        output.append(UInt8(ascii: "]"))
    }

    /// An object, keys sorted.
    public static func object(_ object: [String: JSONValue], to output: inout [UInt8]) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "{"))
        for (position, key) in sortedKeys(object.keys).enumerated() {
            if position > 0 { output.append(UInt8(ascii: ",")) }
            string(key, to: &output)
            output.append(UInt8(ascii: ":"))
            try object[key]!.write(to: &output)
        }
        output.append(UInt8(ascii: "}"))
    }

    /// Keys in the order a sorted-key `JSONEncoder` writes them: by their UTF-8 bytes. Swift's `<` compares
    /// canonical equivalents instead, which orders a decomposed "é" differently, and the server hashes these
    /// bytes.
    public static func sortedKeys(_ keys: some Sequence<String>) -> [String] {
        keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    /// `"key":` after a `{` or a `,`, as `first` says.
    public static func key(_ key: String, first: Bool = false, to output: inout [UInt8]) {
        if !first { output.append(UInt8(ascii: ",")) }
        string(key, to: &output)
        output.append(UInt8(ascii: ":"))
    }
}

/// A recursive-descent reader over contiguous bytes.
struct JSONReader {
    static let maximumDepth = 512

    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0

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
                let text = highBits < 0x80
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

    // MARK: Checking without building

    /// Steps over one value, refusing what ``value()`` refuses, without building it: for bytes kept as they
    /// are, such as the fields of a roster page, which are sealed as received.
    mutating func checkValue() throws(JSONSyntaxError) {
        guard index < bytes.count else { throw error("unexpected end") }
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
