/// Pages of changes read and written without `JSONEncoder` and `JSONDecoder`: they carry every record of a
/// roster download and of a pull, where Codable's cost per value dominated (see ``JSONValue/init(parsing:)``).
/// The bytes are the same JSON the Codable conformances read and write.
extension Change {
    /// Reads a change from its parsed JSON object.
    public init(json: JSONValue) throws(JSONSyntaxError) {
        guard case .object(let object) = json else { throw JSONShape.error("a change must be an object") }
        self.init(
            collection: try JSONShape.string(object, "collection"),
            recordId: try JSONShape.string(object, "recordId"),
            scope: try JSONShape.string(object, "scope"),
            version: try JSONShape.integer(object, "version"),
            tombstone: try JSONShape.bool(object, "tombstone"),
            fields: try JSONShape.object(object, "fields"),
            createdAt: try JSONShape.timestamp(object, "createdAt"),
            updatedAt: try JSONShape.timestamp(object, "updatedAt"))
    }

    /// Appends the change as a JSON object, keys sorted.
    public func writeJSON(to output: inout [UInt8]) throws(JSONSyntaxError) {
        try Self.writeJSON(
            collection: collection, recordId: recordId, scope: scope, version: version, tombstone: tombstone,
            createdAt: createdAt, updatedAt: updatedAt, to: &output
        ) { (output: inout [UInt8]) throws(JSONSyntaxError) in
            try JSONWriter.object(fields, to: &output)
        }
    }

    /// Appends a change whose fields `writeFields` writes: a server sends the JSON text it stores as it is.
    public static func writeJSON(
        collection: String, recordId: String, scope: String, version: Int64, tombstone: Bool,
        createdAt: Timestamp, updatedAt: Timestamp, to output: inout [UInt8],
        writeFields: (inout [UInt8]) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("collection", first: true, to: &output)
        JSONWriter.string(collection, to: &output)
        JSONWriter.key("createdAt", to: &output)
        output.append(UInt8(ascii: "\""))
        createdAt.writeISO8601(to: &output)
        output.append(UInt8(ascii: "\""))
        JSONWriter.key("fields", to: &output)
        try writeFields(&output)
        JSONWriter.key("recordId", to: &output)
        JSONWriter.string(recordId, to: &output)
        JSONWriter.key("scope", to: &output)
        JSONWriter.string(scope, to: &output)
        JSONWriter.key("tombstone", to: &output)
        output.append(contentsOf: (tombstone ? "true" : "false").utf8)
        JSONWriter.key("updatedAt", to: &output)
        output.append(UInt8(ascii: "\""))
        updatedAt.writeISO8601(to: &output)
        output.append(UInt8(ascii: "\""))
        JSONWriter.key("version", to: &output)
        output.append(contentsOf: String(version).utf8)
        output.append(UInt8(ascii: "}"))
    }
}

extension PullResponse {
    /// Parses the JSON answer of `GET /v1/pull`.
    public init(jsonBytes bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        guard case .object(let object) = try JSONValue(parsing: bytes) else {
            throw JSONShape.error("a pull response must be an object")
        }
        self.init(
            changes: try JSONShape.changes(object, "changes"),
            cursor: try JSONShape.string(object, "cursor"),
            hasMore: try JSONShape.bool(object, "hasMore"))
    }

    /// The answer as JSON, keys sorted.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        try Self.jsonBytes(count: changes.count, cursor: cursor, hasMore: hasMore) {
            (output: inout [UInt8]) throws(JSONSyntaxError) in
            try JSONShape.write(changes, to: &output)
        }
    }

    /// A page whose changes array `writeChanges` writes.
    public static func jsonBytes(
        count: Int, cursor: String, hasMore: Bool, writeChanges: (inout [UInt8]) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(64 + count * 320)
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("changes", first: true, to: &output)
        try writeChanges(&output)
        JSONWriter.key("cursor", to: &output)
        JSONWriter.string(cursor, to: &output)
        JSONWriter.key("hasMore", to: &output)
        output.append(contentsOf: (hasMore ? "true" : "false").utf8)
        output.append(UInt8(ascii: "}"))
        return output
    }
}

extension SnapshotResponse {
    /// Parses the JSON answer of `GET /v1/snapshot`.
    public init(jsonBytes bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        guard case .object(let object) = try JSONValue(parsing: bytes) else {
            throw JSONShape.error("a snapshot response must be an object")
        }
        let total = try JSONShape.integer(object, "total")
        guard let count = Int(exactly: total) else { throw JSONShape.error("total is out of range") }
        self.init(
            records: try JSONShape.changes(object, "records"),
            total: count,
            continuation: try JSONShape.optionalString(object, "continuation"),
            cursor: try JSONShape.optionalString(object, "cursor"))
    }

    /// The answer as JSON, keys sorted; absent optionals are left out, as `JSONEncoder` leaves them.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        try Self.jsonBytes(count: records.count, total: total, continuation: continuation, cursor: cursor) {
            (output: inout [UInt8]) throws(JSONSyntaxError) in
            try JSONShape.write(records, to: &output)
        }
    }

    /// A page whose records array `writeRecords` writes.
    public static func jsonBytes(
        count: Int, total: Int, continuation: String?, cursor: String?,
        writeRecords: (inout [UInt8]) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(128 + count * 320)
        output.append(UInt8(ascii: "{"))
        var first = true
        if let continuation {
            JSONWriter.key("continuation", first: first, to: &output)
            JSONWriter.string(continuation, to: &output)
            first = false
        }
        if let cursor {
            JSONWriter.key("cursor", first: first, to: &output)
            JSONWriter.string(cursor, to: &output)
            first = false
        }
        JSONWriter.key("records", first: first, to: &output)
        try writeRecords(&output)
        JSONWriter.key("total", to: &output)
        output.append(contentsOf: String(total).utf8)
        output.append(UInt8(ascii: "}"))
        return output
    }
}

/// Reading typed members out of a parsed object, with errors that name the member: `path` (such as
/// `mutations[3].`) prefixes the name.
enum JSONShape {
    static func error(_ reason: String) -> JSONSyntaxError { JSONSyntaxError(offset: 0, reason: reason) }

    static func member(
        _ object: [String: JSONValue], _ key: String, in path: String = ""
    ) throws(JSONSyntaxError)
        -> JSONValue
    {
        guard let value = object[key] else { throw error("\(path)\(key) is missing") }
        return value
    }

    /// The member `key` as `read` takes it (nil for a value of another type); `kind` names what it must be.
    static func required<T>(
        _ object: [String: JSONValue], _ key: String, in path: String, mustBe kind: String, _ read: (JSONValue) -> T?
    ) throws(JSONSyntaxError) -> T {
        guard let value = read(try member(object, key, in: path)) else { throw error("\(path)\(key) must be \(kind)") }
        return value
    }

    /// As ``required(_:_:in:mustBe:_:)``, but an absent or null member is nil.
    static func optional<T>(
        _ object: [String: JSONValue], _ key: String, in path: String, mustBe kind: String, _ read: (JSONValue) -> T?
    ) throws(JSONSyntaxError) -> T? {
        guard let member = object[key], member != .null else { return nil }
        guard let value = read(member) else { throw error("\(path)\(key) must be \(kind)") }
        return value
    }

    static func string(
        _ object: [String: JSONValue], _ key: String, in path: String = ""
    ) throws(JSONSyntaxError)
        -> String
    {
        try required(object, key, in: path, mustBe: "a string", { if case .string(let value) = $0 { value } else { nil } })
    }

    static func optionalString(
        _ object: [String: JSONValue], _ key: String, in path: String = ""
    )
        throws(JSONSyntaxError) -> String?
    {
        try optional(object, key, in: path, mustBe: "a string", { if case .string(let value) = $0 { value } else { nil } })
    }

    static func integer(
        _ object: [String: JSONValue], _ key: String, in path: String = ""
    ) throws(JSONSyntaxError)
        -> Int64
    {
        try required(object, key, in: path, mustBe: "an integer", { if case .integer(let value) = $0 { value } else { nil } })
    }

    static func optionalInteger(
        _ object: [String: JSONValue], _ key: String, in path: String = ""
    )
        throws(JSONSyntaxError) -> Int64?
    {
        try optional(object, key, in: path, mustBe: "an integer", { if case .integer(let value) = $0 { value } else { nil } })
    }

    static func bool(
        _ object: [String: JSONValue], _ key: String, in path: String = ""
    ) throws(JSONSyntaxError)
        -> Bool
    {
        try required(object, key, in: path, mustBe: "true or false", { if case .bool(let value) = $0 { value } else { nil } })
    }

    static func object(
        _ object: [String: JSONValue], _ key: String, in path: String = ""
    ) throws(JSONSyntaxError)
        -> [String: JSONValue]
    {
        try required(object, key, in: path, mustBe: "an object", { if case .object(let value) = $0 { value } else { nil } })
    }

    /// The array `key`, each element read by `element` with its own path (such as `mutations[3].`).
    static func array<T>(
        _ object: [String: JSONValue], _ key: String, in path: String = "",
        _ element: (JSONValue, String) throws(JSONSyntaxError) -> T
    ) throws(JSONSyntaxError) -> [T] {
        let values = try required(object, key, in: path, mustBe: "an array", { if case .array(let value) = $0 { value } else { nil } })
        var elements: [T] = []
        elements.reserveCapacity(values.count)
        for (index, value) in values.enumerated() {
            elements.append(try element(value, "\(path)\(key)[\(index)]."))
        }
        return elements
    }

    static func timestamp(
        _ object: [String: JSONValue], _ key: String, in path: String = ""
    ) throws(JSONSyntaxError)
        -> Timestamp
    {
        guard let value = Timestamp(iso8601: try string(object, key, in: path)) else {
            throw error("\(path)\(key) must be an RFC 3339 date-time, such as 2026-11-21T13:47:35.123Z")
        }
        return value
    }

    static func changes(_ object: [String: JSONValue], _ key: String) throws(JSONSyntaxError) -> [Change] {
        try array(object, key) { (value, _) throws(JSONSyntaxError) in try Change(json: value) }
    }

    static func write(_ changes: [Change], to output: inout [UInt8]) throws(JSONSyntaxError) {
        try JSONWriter.array(changes, to: &output) { (change, output: inout [UInt8]) throws(JSONSyntaxError) in
            try change.writeJSON(to: &output)
        }
    }
}

/// A page of `GET /v1/snapshot` whose records keep their fields as the JSON text the server sent: checked
/// to be one object (``JSONValue/checkObject(_:)``), not built. A device seals those bytes as they are, and
/// reads only the few members it indexes, instead of building every record's values and writing them again.
public struct SnapshotPage: Sendable {
    public struct Record: Sendable {
        public var recordId: String
        public var version: Int64
        public var tombstone: Bool
        /// One JSON object, as sent.
        public var fieldsJSON: ArraySlice<UInt8>

        public init(recordId: String, version: Int64, tombstone: Bool, fieldsJSON: ArraySlice<UInt8>) {
            self.recordId = recordId
            self.version = version
            self.tombstone = tombstone
            self.fieldsJSON = fieldsJSON
        }
    }

    public var records: [Record]
    /// How many records the whole snapshot holds, as counted when it started.
    public var total: Int
    public var continuation: String?
    public var cursor: String?

    /// Reads the JSON answer of `GET /v1/snapshot`, refusing what ``SnapshotResponse/init(jsonBytes:)`` would.
    public init(jsonBytes bytes: [UInt8]) throws(JSONSyntaxError) {
        var total: Int64?
        var continuation: String?
        var cursor: String?
        var records: [RawRecord]?
        try RawRecords.object(bytes) { reader, key throws(JSONSyntaxError) in
            switch key {
            case "records": records = try RawRecords.array(&reader, key: key)
            case "total":
                guard case .integer(let value) = try reader.value() else { throw JSONShape.error("total must be an integer") }
                total = value
            case "continuation": continuation = try Self.optionalString(&reader, key)
            case "cursor": cursor = try Self.optionalString(&reader, key)
            default: try reader.checkValue()
            }
        }
        guard let total else { throw JSONShape.error("total is missing") }
        guard let records else { throw JSONShape.error("records is missing") }
        guard let count = Int(exactly: total) else { throw JSONShape.error("total is out of range") }
        self.total = count
        self.continuation = continuation
        self.cursor = cursor
        self.records = records.map { $0.record(in: bytes) }
    }

    /// From a page already decoded (a transport with no bytes, such as a test double).
    public init(_ response: SnapshotResponse) throws(JSONSyntaxError) {
        total = response.total
        continuation = response.continuation
        cursor = response.cursor
        records = try RawRecords.records(response.records)
    }

    private static func optionalString(_ reader: inout JSONReader, _ key: String) throws(JSONSyntaxError) -> String? {
        switch try reader.value() {
        case .null: return nil
        case .string(let value): return value
        default: throw JSONShape.error("\(key) must be a string")
        }
    }
}

/// A page of `GET /v1/pull` whose changes keep their fields as the JSON text the server sent, as
/// ``SnapshotPage`` does for a download: a device refreshing reference data seals those bytes as they are.
public struct PullPage: Sendable {
    /// Changes after the request's cursor, in commit order; a tombstone's fields are `{}`.
    public var changes: [SnapshotPage.Record]
    /// Where the next pull continues; opaque.
    public var cursor: String
    /// True when more changes are ready now.
    public var hasMore: Bool

    /// Reads the JSON answer of `GET /v1/pull`, refusing what ``PullResponse/init(jsonBytes:)`` would.
    public init(jsonBytes bytes: [UInt8]) throws(JSONSyntaxError) {
        var cursor: String?
        var hasMore: Bool?
        var changes: [RawRecord]?
        try RawRecords.object(bytes) { reader, key throws(JSONSyntaxError) in
            switch key {
            case "changes": changes = try RawRecords.array(&reader, key: key)
            case "cursor":
                guard case .string(let value) = try reader.value() else { throw JSONShape.error("cursor must be a string") }
                cursor = value
            case "hasMore":
                guard case .bool(let value) = try reader.value() else { throw JSONShape.error("hasMore must be true or false") }
                hasMore = value
            default: try reader.checkValue()
            }
        }
        guard let changes else { throw JSONShape.error("changes is missing") }
        guard let cursor else { throw JSONShape.error("cursor is missing") }
        guard let hasMore else { throw JSONShape.error("hasMore is missing") }
        self.cursor = cursor
        self.hasMore = hasMore
        self.changes = changes.map { $0.record(in: bytes) }
    }

    /// From a page already decoded (a transport with no bytes, such as a test double).
    public init(_ response: PullResponse) throws(JSONSyntaxError) {
        cursor = response.cursor
        hasMore = response.hasMore
        changes = try RawRecords.records(response.changes)
    }
}

/// One record as read: its id, version and tombstone, and where its fields are in the document.
struct RawRecord {
    var recordId: String
    var version: Int64
    var tombstone: Bool
    var range: Range<Int>

    func record(in bytes: [UInt8]) -> SnapshotPage.Record {
        SnapshotPage.Record(recordId: recordId, version: version, tombstone: tombstone, fieldsJSON: bytes[range])
    }
}

/// Reading arrays of records whose fields stay JSON text, for ``SnapshotPage`` and ``PullPage``.
enum RawRecords {
    /// Reads `bytes` as one JSON object, giving each member to `member`, which must read its value; refuses
    /// anything after the object.
    static func object(
        _ bytes: [UInt8], member: (inout JSONReader, String) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) {
        let read: (UnsafeBufferPointer<UInt8>) -> Result<Void, JSONSyntaxError> = { buffer in
            Result { () throws(JSONSyntaxError) in
                var reader = JSONReader(bytes: buffer)
                reader.skipWhitespace()
                // The document itself is one level, as the full reading counts it.
                try reader.enter()
                try reader.members { reader, key throws(JSONSyntaxError) in
                    try member(&reader, key)
                    return true
                }
                reader.skipWhitespace()
                guard reader.index == buffer.count else { throw reader.error("unexpected bytes after the document") }
            }
        }
        try bytes.withUnsafeBufferPointer(read).get()
    }

    /// Changes already decoded, their fields written out again.
    static func records(_ changes: [Change]) throws(JSONSyntaxError) -> [SnapshotPage.Record] {
        var records: [SnapshotPage.Record] = []
        records.reserveCapacity(changes.count)
        for change in changes {
            let fields = try change.fields.jsonBytes()
            records.append(
                SnapshotPage.Record(
                    recordId: change.recordId, version: change.version, tombstone: change.tombstone, fieldsJSON: fields[...]))
        }
        return records
    }

    /// The array member `key`: each record's id, version, tombstone and the byte range of its fields.
    static func array(_ reader: inout JSONReader, key: String) throws(JSONSyntaxError) -> [RawRecord] {
        guard reader.index < reader.bytes.count, reader.bytes[reader.index] == UInt8(ascii: "[") else {
            throw JSONShape.error("\(key) must be an array")
        }
        try reader.enter()
        defer { reader.depth -= 1 }
        reader.index += 1
        var records: [RawRecord] = []
        reader.skipWhitespace()
        if reader.index < reader.bytes.count, reader.bytes[reader.index] == UInt8(ascii: "]") {
            reader.index += 1
            return records
        }
        while true {
            reader.skipWhitespace()
            records.append(try record(&reader, in: key, at: records.count))
            reader.skipWhitespace()
            guard reader.index < reader.bytes.count else { throw reader.error("unexpected end") }
            switch reader.bytes[reader.index] {
            case UInt8(ascii: ","): reader.index += 1
            case UInt8(ascii: "]"): reader.index += 1; return records
            default: throw reader.error("expected ',' or ']'")
            }
        }
    }

    /// One record of the array member `key`, the `position`th. Its collection, scope and times are checked, not
    /// kept: they are stepped over in place instead of made into strings.
    private static func record(
        _ reader: inout JSONReader, in key: String, at position: Int
    ) throws(JSONSyntaxError)
        -> RawRecord
    {
        // Only errors name the record: the path is made for them alone.
        var path: String { "\(key)[\(position)]." }
        var recordId: String?
        var version: Int64?
        var tombstone: Bool?
        var fields: Range<Int>?
        let required = ["collection", "scope", "createdAt", "updatedAt"]
        var seen = [false, false, false, false]
        try reader.enter()
        defer { reader.depth -= 1 }
        try reader.members { reader, key throws(JSONSyntaxError) in
            switch key {
            case "recordId":
                guard case .string(let value) = try reader.value() else { throw JSONShape.error("\(path)\(key) must be a string") }
                recordId = value
            case "collection", "scope", "createdAt", "updatedAt":
                guard reader.index < reader.bytes.count, reader.bytes[reader.index] == UInt8(ascii: "\"") else {
                    // Refused as reading the value would refuse it, or as not a string.
                    _ = try reader.value()
                    throw JSONShape.error("\(path)\(key) must be a string")
                }
                let start = reader.index
                try reader.checkString()
                if key == "createdAt" || key == "updatedAt" {
                    let text = UnsafeBufferPointer(rebasing: reader.bytes[(start + 1)..<(reader.index - 1)])
                    // A time holds no escape; one written with escapes is read as text to be checked the same way.
                    let valid: Bool
                    if text.contains(UInt8(ascii: "\\")) {
                        let end = reader.index
                        reader.index = start
                        guard case .string(let value) = try reader.value() else { throw JSONShape.error("\(path)\(key) must be a string") }
                        reader.index = end
                        valid = Timestamp(iso8601: value) != nil
                    } else {
                        valid = Timestamp.isValid(utf8: text)
                    }
                    guard valid else {
                        throw JSONShape.error("\(path)\(key) must be an RFC 3339 date-time, such as 2026-11-21T13:47:35.123Z")
                    }
                }
                seen[required.firstIndex(of: key)!] = true
            case "version":
                guard case .integer(let value) = try reader.value() else { throw JSONShape.error("\(path)version must be an integer") }
                version = value
            case "tombstone":
                guard case .bool(let value) = try reader.value() else { throw JSONShape.error("\(path)tombstone must be true or false") }
                tombstone = value
            case "fields":
                guard reader.index < reader.bytes.count, reader.bytes[reader.index] == UInt8(ascii: "{") else {
                    throw JSONShape.error("\(path)fields must be an object")
                }
                let start = reader.index
                try reader.checkValue()
                fields = start..<reader.index
            default:
                try reader.checkValue()
            }
            return true
        }
        for (key, present) in zip(required, seen) where !present {
            throw JSONShape.error("\(path)\(key) is missing")
        }
        guard let recordId else { throw JSONShape.error("\(path)recordId is missing") }
        guard let version else { throw JSONShape.error("\(path)version is missing") }
        guard let tombstone else { throw JSONShape.error("\(path)tombstone is missing") }
        guard let fields else { throw JSONShape.error("\(path)fields is missing") }
        return RawRecord(recordId: recordId, version: version, tombstone: tombstone, range: fields)
    }
}
