/// A strict reader and writer of JSON bytes for ``JSONValue``, for the paths that move pages of records.
///
/// Foundation's `JSONDecoder` decodes `[String: JSONValue]` through Codable, a thrown error per failed attempt
/// at each value's type, too slow for pages of roster rows; this reads the same bytes directly. It accepts
/// exactly RFC 8259 JSON: no comments, no trailing commas, no lone surrogates, valid UTF-8 only, and nesting
/// at most 512 deep (as Foundation's limit), so that hostile input cannot exhaust the stack.
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
    public static func members(
        _ names: [String], ofObject bytes: some Collection<UInt8>
    ) throws(JSONSyntaxError)
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

/// What a look over a JSON object's bytes found, before any of it is built: see ``JSONValue/survey(_:members:maxValues:)``.
public struct JSONSurvey: Sendable, Hashable {
    /// The element count of each top-level member that is an array.
    public var arrayCounts: [String: Int] = [:]
    /// Every value in the document, the object itself included.
    public var values = 0
}

/// Why ``JSONValue/survey(_:members:maxValues:)`` refused a document.
public enum JSONSurveyError: Error, Sendable, Hashable {
    /// Not JSON, or not an object.
    case syntax(JSONSyntaxError)
    /// A top-level member the document may not have, by name.
    case unknownMember(String)
    /// More values than allowed.
    case tooManyValues(Int)
}

extension JSONValue {
    /// Steps over a JSON object document without building it, counting its values and the elements of its
    /// top-level arrays, and refusing a top-level member outside `members` or more than `maxValues` values:
    /// a body of junk is refused for the cost of reading its bytes once, before a tree of it is built.
    public static func survey(_ bytes: some Collection<UInt8>, members: Set<String>, maxValues: Int) throws(JSONSurveyError) -> JSONSurvey {
        let read: (UnsafeBufferPointer<UInt8>) -> Result<JSONSurvey, JSONSurveyError> = { buffer in
            var reader = JSONReader(bytes: buffer)
            reader.maxValues = maxValues
            var survey = JSONSurvey()
            do throws(JSONSyntaxError) {
                reader.skipWhitespace()
                guard reader.index < buffer.count, buffer[reader.index] == UInt8(ascii: "{") else { throw reader.error("expected an object") }
                reader.index += 1
                reader.values = 1
                reader.skipWhitespace()
                if reader.index < buffer.count, buffer[reader.index] == UInt8(ascii: "}") {
                    reader.index += 1
                } else {
                    while true {
                        reader.skipWhitespace()
                        guard reader.index < buffer.count, buffer[reader.index] == UInt8(ascii: "\"") else { throw reader.error("expected a key") }
                        let name = try reader.string()
                        guard members.contains(name) else { return .failure(.unknownMember(name)) }
                        reader.skipWhitespace()
                        guard reader.index < buffer.count, buffer[reader.index] == UInt8(ascii: ":") else { throw reader.error("expected ':'") }
                        reader.index += 1
                        reader.skipWhitespace()
                        let isArray = reader.index < buffer.count && buffer[reader.index] == UInt8(ascii: "[")
                        if isArray {
                            survey.arrayCounts[name] = try reader.checkArrayCountingElements()
                        } else {
                            try reader.checkValue()
                        }
                        reader.skipWhitespace()
                        guard reader.index < buffer.count else { throw reader.error("unexpected end") }
                        if buffer[reader.index] == UInt8(ascii: ",") {
                            reader.index += 1
                        } else if buffer[reader.index] == UInt8(ascii: "}") {
                            reader.index += 1
                            break
                        } else {
                            throw reader.error("expected ',' or '}'")
                        }
                    }
                }
                reader.skipWhitespace()
                guard reader.index == buffer.count else { throw reader.error("unexpected bytes after the document") }
            } catch {
                return .failure(reader.values > maxValues ? .tooManyValues(maxValues) : .syntax(error))
            }
            survey.values = reader.values
            return .success(survey)
        }
        if let result = bytes.withContiguousStorageIfAvailable(read) { return try result.get() }
        return try Array(bytes).withUnsafeBufferPointer(read).get()
    }
}

extension JSONReader {
    /// Steps over an array as ``checkValue()`` does, and returns how many elements it has.
    mutating func checkArrayCountingElements() throws(JSONSyntaxError) -> Int {
        values += 1
        if values > maxValues { throw error("more than \(maxValues) values") }
        try enter()
        defer { depth -= 1 }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return 0
        }
        var count = 0
        while true {
            skipWhitespace()
            try checkValue()
            count += 1
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return count
            } else {
                throw error("expected ',' or ']'")
            }
        }
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
