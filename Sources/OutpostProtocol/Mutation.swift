/// What a mutation does to its record.
public enum MutationOperation: String, Sendable, Codable, CaseIterable {
    /// Writes the given fields, leaving the others as they are.
    case upsert
    /// Deletes the record; the server keeps a tombstone.
    case delete
}

/// One change to one record, as a device sends it in a push.
public struct Mutation: Sendable, Hashable, Codable {
    /// Unique per tenant; a key the server has seen before is never applied twice.
    public var idempotencyKey: String
    public var collection: String
    public var recordId: String
    /// The scope the record belongs to, for a collection with one (the event of a guest or a check-in).
    ///
    /// Part of the record's identity: the same record id in two scopes is two records. An upsert may leave it
    /// out when its fields carry the collection's scope field; a delete in a scoped collection must name it.
    public var scope: String?
    public var op: MutationOperation
    /// The fields to write (for `upsert`); empty for `delete`.
    public var fields: [String: JSONValue]
    /// When the action happened on the device.
    public var clientTimestamp: Timestamp
    /// The record version the device last saw; required to change a protected field that already has a value.
    public var baseVersion: Int64?

    public init(
        idempotencyKey: String,
        collection: String,
        recordId: String,
        scope: String? = nil,
        op: MutationOperation,
        fields: [String: JSONValue] = [:],
        clientTimestamp: Timestamp,
        baseVersion: Int64? = nil
    ) {
        self.idempotencyKey = idempotencyKey
        self.collection = collection
        self.recordId = recordId
        self.scope = scope
        self.op = op
        self.fields = fields
        self.clientTimestamp = clientTimestamp
        self.baseVersion = baseVersion
    }

    private enum CodingKeys: String, CodingKey {
        case idempotencyKey, collection, recordId, scope, op, fields, clientTimestamp, baseVersion
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.idempotencyKey = try container.decode(String.self, forKey: .idempotencyKey)
        self.collection = try container.decode(String.self, forKey: .collection)
        self.recordId = try container.decode(String.self, forKey: .recordId)
        self.scope = try container.decodeIfPresent(String.self, forKey: .scope)
        self.op = try container.decode(MutationOperation.self, forKey: .op)
        self.fields = try container.decodeIfPresent([String: JSONValue].self, forKey: .fields) ?? [:]
        self.clientTimestamp = try container.decode(Timestamp.self, forKey: .clientTimestamp)
        self.baseVersion = try container.decodeIfPresent(Int64.self, forKey: .baseVersion)
    }
}

extension Mutation {
    /// The most fields a mutation may write, and a record hold.
    public static let maxFieldCount = 256
    /// The most a mutation's fields, and a record's, may weigh as JSON (``JSONValue/encodedSizeBound``). It
    /// bounds what one record costs every device that pulls it, and so what a page of a pull can hold.
    public static let maxFieldsBytes = 256 * 1024
    /// How deeply a field's value may nest arrays and objects (``JSONValue/depth``). A server refuses a deeper
    /// one (`invalid_fields`), as a device does at saving.
    public static let maxValueDepth = 16

    /// Why a record holding `fields` may not be stored, or `nil`: over ``maxFieldCount`` fields or
    /// ``maxFieldsBytes``. A server refuses such a mutation (`invalid_fields`), as a device does at saving.
    public static func sizeProblem(of fields: [String: JSONValue]) -> String? {
        if fields.count > maxFieldCount { return "a record holds at most \(maxFieldCount) fields" }
        if JSONValue.object(fields).encodedSizeBound > maxFieldsBytes {
            return "a record's fields may take at most \(maxFieldsBytes / 1024) KiB as JSON"
        }
        return nil
    }

    /// ``sizeProblem(of:)`` for a record that held `existing` before a change: a record already past the
    /// limits (stored before they existed) may still change, as long as the change does not make it larger.
    public static func sizeProblem(
        of fields: [String: JSONValue], growingFrom existing: [String: JSONValue]?
    )
        -> String?
    {
        guard let problem = sizeProblem(of: fields) else { return nil }
        guard let existing else { return problem }
        let grew =
            fields.count > existing.count
            || JSONValue.object(fields).encodedSizeBound > JSONValue.object(existing).encodedSizeBound
        return grew ? problem : nil
    }
}

/// The body of `POST /v1/push`.
public struct PushRequest: Sendable, Hashable, Codable {
    public var deviceId: String
    public var mutations: [Mutation]

    public init(deviceId: String, mutations: [Mutation]) {
        self.deviceId = deviceId
        self.mutations = mutations
    }
}

/// The answer to `POST /v1/push`: one result per mutation, in the order sent.
public struct PushResponse: Sendable, Hashable, Codable {
    public var results: [MutationResult]

    public init(results: [MutationResult]) {
        self.results = results
    }
}

/// What the server did with one mutation.
public struct MutationResult: Sendable, Hashable, Codable {
    public enum Status: String, Sendable, Codable, CaseIterable {
        /// Written; `version` is the record's version after it.
        case applied
        /// The key was processed before; nothing was written again. `originalStatus` says what happened then.
        case duplicate
        /// A protected field was not written because the device's `baseVersion` is older than that field's
        /// last change. The unprotected fields were applied. `conflict` carries the server's values.
        case conflict
        /// Refused; `error` says why. Nothing was written and the key was not consumed.
        case rejected
        /// Not written: the collection keeps a record's first write (a guest's first check-in), and an earlier
        /// one stands. `version` is the stored record's, and `serverFields` its fields, so that the device shows
        /// what the server keeps. The key was consumed.
        case superseded
    }

    public var idempotencyKey: String
    public var status: Status
    /// The record's version after this mutation (absent when rejected).
    public var version: Int64?
    /// For `duplicate`: the status the key got when it was first processed (`applied`, `conflict` or
    /// `superseded`).
    public var originalStatus: Status?
    /// For `conflict`, and for a `duplicate` of one: what was not applied and the server's current values.
    public var conflict: ConflictDetail?
    /// For `rejected`.
    public var error: WireError.Detail?
    /// For `superseded`, and for a `duplicate` of one: the stored record's fields, when the caller may read them.
    public var serverFields: [String: JSONValue]?
    /// With `serverFields`: the client time of the stored record's first write, which a device shows as the
    /// time of what the server keeps (a check-in's time).
    public var serverCreatedAt: Timestamp?

    public init(
        idempotencyKey: String,
        status: Status,
        version: Int64? = nil,
        originalStatus: Status? = nil,
        conflict: ConflictDetail? = nil,
        error: WireError.Detail? = nil,
        serverFields: [String: JSONValue]? = nil,
        serverCreatedAt: Timestamp? = nil
    ) {
        self.idempotencyKey = idempotencyKey
        self.status = status
        self.version = version
        self.originalStatus = originalStatus
        self.conflict = conflict
        self.error = error
        self.serverFields = serverFields
        self.serverCreatedAt = serverCreatedAt
    }

    /// A rejection with a stable code and a message safe to show to the user.
    public static func rejected(_ key: String, _ code: WireError.Code, _ message: String) -> MutationResult {
        MutationResult(idempotencyKey: key, status: .rejected, error: .init(code: code, message: message))
    }
}

/// What a client understands beyond the protocol's first form, named in the `Outpost-Features` header of its
/// requests (comma-separated). A server answers a client that does not name a feature as it did before it:
/// devices of an older build go on working against a newer server.
public enum ProtocolFeature: String, Sendable, CaseIterable {
    /// Push results `superseded` (and `originalStatus: superseded`) with `serverFields`; without it, such a
    /// result is answered `applied`, without the fields.
    case superseded
    /// Results `rejected` with the code `held_at_relay` from a venue relay, for a mutation the relay holds and
    /// the server has not answered yet; without it, a relay answers such a push 503, and the client sends it
    /// again later.
    case relay

    /// The request header that names the features.
    public static let header = "Outpost-Features"
    /// The header's value for every feature this build understands.
    public static var allNames: String { allCases.map(\.rawValue).joined(separator: ", ") }

    /// The features named in the header's values; unknown names are passed over.
    public static func named(in values: some Sequence<some StringProtocol>) -> Set<ProtocolFeature> {
        Set(
            values.flatMap { $0.split(separator: ",") }.compactMap { item in
                // A name, in any case, possibly followed by parameters (`superseded;q=1`).
                let name = item.split(separator: ";", omittingEmptySubsequences: false).first ?? ""
                return ProtocolFeature(rawValue: name.trimmingCharacters(in: .whitespaces).lowercased())
            })
    }
}

extension MutationResult {
    /// This result as a client without ``ProtocolFeature/superseded`` reads it.
    public var withoutSuperseded: MutationResult {
        var result = self
        if status == .superseded { result.status = .applied }
        if originalStatus == .superseded { result.originalStatus = .applied }
        result.serverFields = nil
        result.serverCreatedAt = nil
        return result
    }
}

/// The protected fields a mutation could not change, and what the server holds for them.
public struct ConflictDetail: Sendable, Hashable, Codable {
    /// Identifies the conflict kept for review (`GET /v1/conflicts`).
    public var conflictId: String
    /// The protected fields that were not applied.
    public var fields: [String]
    /// The server's current value of each of those fields.
    public var serverFields: [String: JSONValue]
    /// The record version that last changed any of them.
    public var serverVersion: Int64

    public init(conflictId: String, fields: [String], serverFields: [String: JSONValue], serverVersion: Int64) {
        self.conflictId = conflictId
        self.fields = fields
        self.serverFields = serverFields
        self.serverVersion = serverVersion
    }
}
