/// Pushes read and written without `JSONEncoder` and `JSONDecoder`: every queued record crosses the wire in
/// one, and Codable costs too much per value for that. The bytes are the JSON the Codable conformances read
/// and write, keys sorted and absent optionals left out, as a sorted-key `JSONEncoder` writes them; the server
/// hashes a mutation's bytes to catch a key sent again with other content, so those bytes must not change
/// (tested against Foundation's).
extension Mutation {
    /// Reads a mutation from its parsed JSON object; `path` (such as `mutations[3].`) prefixes the member an
    /// error names.
    public init(json: JSONValue, path: String = "") throws(JSONSyntaxError) {
        guard case .object(let object) = json else {
            throw JSONShape.error(path.isEmpty ? "a mutation must be an object" : "\(path.dropLast(1)) must be an object")
        }
        let op = try JSONShape.string(object, "op", in: path)
        guard let operation = MutationOperation(rawValue: op) else {
            throw JSONShape.error("\(path)op must be upsert or delete")
        }
        let fields = try JSONShape.optional(object, "fields", in: path, mustBe: "an object") {
            if case .object(let value) = $0 { value } else { nil }
        }
        self.init(
            idempotencyKey: try JSONShape.string(object, "idempotencyKey", in: path),
            collection: try JSONShape.string(object, "collection", in: path),
            recordId: try JSONShape.string(object, "recordId", in: path),
            scope: try JSONShape.optionalString(object, "scope", in: path),
            op: operation,
            fields: fields ?? [:],
            clientTimestamp: try JSONShape.timestamp(object, "clientTimestamp", in: path),
            baseVersion: try JSONShape.optionalInteger(object, "baseVersion", in: path))
    }

    /// Appends the mutation as a JSON object, keys sorted.
    public func writeJSON(to output: inout [UInt8]) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "{"))
        var first = true
        if let baseVersion {
            JSONWriter.key("baseVersion", first: true, to: &output)
            output.append(contentsOf: String(baseVersion).utf8)
            first = false
        }
        JSONWriter.key("clientTimestamp", first: first, to: &output)
        output.append(UInt8(ascii: "\""))
        clientTimestamp.writeISO8601(to: &output)
        output.append(UInt8(ascii: "\""))
        JSONWriter.key("collection", to: &output)
        JSONWriter.string(collection, to: &output)
        JSONWriter.key("fields", to: &output)
        try JSONWriter.object(fields, to: &output)
        JSONWriter.key("idempotencyKey", to: &output)
        JSONWriter.string(idempotencyKey, to: &output)
        JSONWriter.key("op", to: &output)
        JSONWriter.string(op.rawValue, to: &output)
        JSONWriter.key("recordId", to: &output)
        JSONWriter.string(recordId, to: &output)
        if let scope {
            JSONWriter.key("scope", to: &output)
            JSONWriter.string(scope, to: &output)
        }
        output.append(UInt8(ascii: "}"))
    }

    /// The mutation as compact JSON, keys sorted: the bytes a server hashes.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        try writeJSON(to: &output)
        return output
    }
}

extension PushRequest {
    /// The members of a push body; any other is refused.
    public static let members: Set<String> = ["deviceId", "mutations"]

    /// Reads the body of `POST /v1/push` from its parsed JSON; an error names the member, such as
    /// `mutations[3].clientTimestamp`, and never quotes a value.
    public init(json: JSONValue) throws(JSONSyntaxError) {
        guard case .object(let object) = json else { throw JSONShape.error("the body must be an object") }
        if let unknown = object.keys.first(where: { !Self.members.contains($0) }) {
            throw JSONShape.error("a push has the members deviceId and mutations only, not \"\(unknown.prefix(64))\"")
        }
        self.init(
            deviceId: try JSONShape.string(object, "deviceId"),
            mutations: try JSONShape.array(object, "mutations") { (value, path) throws(JSONSyntaxError) in
                try Mutation(json: value, path: path)
            })
    }

    /// Parses the body of `POST /v1/push`.
    public init(jsonBytes bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        try self.init(json: try JSONValue(parsing: bytes))
    }

    /// The request as JSON, keys sorted.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(64 + mutations.count * 256)
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("deviceId", first: true, to: &output)
        JSONWriter.string(deviceId, to: &output)
        JSONWriter.key("mutations", to: &output)
        try JSONWriter.array(mutations, to: &output) { (mutation, output: inout [UInt8]) throws(JSONSyntaxError) in
            try mutation.writeJSON(to: &output)
        }
        output.append(UInt8(ascii: "}"))
        return output
    }
}

extension PushResponse {
    /// Parses the answer of `POST /v1/push`.
    public init(jsonBytes bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        let json = try JSONValue(parsing: bytes)
        guard case .object = json else { throw JSONShape.error("a push response must be an object") }
        try self.init(json: json, path: "")
    }

    /// Parses a push's answer at `path` of a larger document (a relay's forward answers one per batch).
    init(json: JSONValue, path: String) throws(JSONSyntaxError) {
        guard case .object(let object) = json else { throw JSONShape.error("\(path.dropLast(1)) must be an object") }
        self.init(
            results: try JSONShape.array(object, "results", in: path) { (value, path) throws(JSONSyntaxError) in
                try MutationResult(json: value, path: path)
            })
    }

    /// The answer as JSON, keys sorted.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(16 + results.count * 96)
        try writeJSON(to: &output)
        return output
    }

    func writeJSON(to output: inout [UInt8]) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("results", first: true, to: &output)
        try JSONWriter.array(results, to: &output) { (result, output: inout [UInt8]) throws(JSONSyntaxError) in
            try result.writeJSON(to: &output)
        }
        output.append(UInt8(ascii: "}"))
    }
}

extension MutationResult {
    init(json: JSONValue, path: String) throws(JSONSyntaxError) {
        guard case .object(let object) = json else { throw JSONShape.error("\(path.dropLast(1)) must be an object") }
        func status(_ key: String) throws(JSONSyntaxError) -> Status? {
            guard let text = try JSONShape.optionalString(object, key, in: path) else { return nil }
            guard let status = Status(rawValue: text) else { throw JSONShape.error("\(path)\(key) is not a known status") }
            return status
        }
        guard let current = try status("status") else { throw JSONShape.error("\(path)status is missing") }
        var conflict: ConflictDetail?
        if let value = object["conflict"], value != .null {
            conflict = try ConflictDetail(json: value, path: "\(path)conflict.")
        }
        var error: WireError.Detail?
        if let value = object["error"], value != .null {
            guard case .object(let detail) = value else { throw JSONShape.error("\(path)error must be an object") }
            error = WireError.Detail(
                code: WireError.Code(try JSONShape.string(detail, "code", in: "\(path)error.")),
                message: try JSONShape.string(detail, "message", in: "\(path)error."))
        }
        var serverFields: [String: JSONValue]?
        if let value = object["serverFields"], value != .null {
            serverFields = try JSONShape.object(object, "serverFields", in: path)
        }
        var serverCreatedAt: Timestamp?
        if let value = object["serverCreatedAt"], value != .null {
            let text = try JSONShape.string(object, "serverCreatedAt", in: path)
            guard let time = Timestamp(iso8601: text) else {
                throw JSONShape.error("\(path)serverCreatedAt must be an RFC 3339 date-time")
            }
            serverCreatedAt = time
        }
        self.init(
            idempotencyKey: try JSONShape.string(object, "idempotencyKey", in: path),
            status: current,
            version: try JSONShape.optionalInteger(object, "version", in: path),
            originalStatus: try status("originalStatus"),
            conflict: conflict,
            error: error,
            serverFields: serverFields,
            serverCreatedAt: serverCreatedAt)
    }

    func writeJSON(to output: inout [UInt8]) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "{"))
        var first = true
        if let conflict {
            JSONWriter.key("conflict", first: true, to: &output)
            try conflict.writeJSON(to: &output)
            first = false
        }
        if let error {
            JSONWriter.key("error", first: first, to: &output)
            output.append(UInt8(ascii: "{"))
            JSONWriter.key("code", first: true, to: &output)
            JSONWriter.string(error.code.rawValue, to: &output)
            JSONWriter.key("message", to: &output)
            JSONWriter.string(error.message, to: &output)
            output.append(UInt8(ascii: "}"))
            first = false
        }
        JSONWriter.key("idempotencyKey", first: first, to: &output)
        JSONWriter.string(idempotencyKey, to: &output)
        if let originalStatus {
            JSONWriter.key("originalStatus", to: &output)
            JSONWriter.string(originalStatus.rawValue, to: &output)
        }
        if let serverCreatedAt {
            JSONWriter.key("serverCreatedAt", to: &output)
            JSONWriter.string(serverCreatedAt.iso8601, to: &output)
        }
        if let serverFields {
            JSONWriter.key("serverFields", to: &output)
            try JSONWriter.object(serverFields, to: &output)
        }
        JSONWriter.key("status", to: &output)
        JSONWriter.string(status.rawValue, to: &output)
        if let version {
            JSONWriter.key("version", to: &output)
            output.append(contentsOf: String(version).utf8)
        }
        output.append(UInt8(ascii: "}"))
    }
}

extension ConflictDetail {
    init(json: JSONValue, path: String) throws(JSONSyntaxError) {
        guard case .object(let object) = json else { throw JSONShape.error("\(path.dropLast(1)) must be an object") }
        self.init(
            conflictId: try JSONShape.string(object, "conflictId", in: path),
            fields: try JSONShape.array(object, "fields", in: path) { (value, _) throws(JSONSyntaxError) in
                guard case .string(let field) = value else { throw JSONShape.error("\(path)fields must hold strings") }
                return field
            },
            serverFields: try JSONShape.object(object, "serverFields", in: path),
            serverVersion: try JSONShape.integer(object, "serverVersion", in: path))
    }

    func writeJSON(to output: inout [UInt8]) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("conflictId", first: true, to: &output)
        JSONWriter.string(conflictId, to: &output)
        JSONWriter.key("fields", to: &output)
        try JSONWriter.array(fields, to: &output) { field, output in JSONWriter.string(field, to: &output) }
        JSONWriter.key("serverFields", to: &output)
        try JSONWriter.object(serverFields, to: &output)
        JSONWriter.key("serverVersion", to: &output)
        output.append(contentsOf: String(serverVersion).utf8)
        output.append(UInt8(ascii: "}"))
    }
}
