/// One processed mutation, as `GET /v1/audit` reports it.
public struct AuditEntry: Sendable, Hashable, Codable {
    public var idempotencyKey: String
    public var collection: String
    public var recordId: String
    /// The record's scope (its event), or empty in a collection without one.
    public var scope: String
    public var op: MutationOperation
    public var fields: [String: JSONValue]
    public var deviceId: String
    /// The token subject that pushed it.
    public var userId: String
    /// The token's display name.
    public var userName: String
    /// When it happened on the device.
    public var clientTimestamp: Timestamp
    /// When the server received it.
    public var receivedAt: Timestamp
    /// `applied` or `conflict`.
    public var status: MutationResult.Status
    /// The record's version after it.
    public var version: Int64

    public init(
        idempotencyKey: String, collection: String, recordId: String, scope: String = "", op: MutationOperation,
        fields: [String: JSONValue], deviceId: String, userId: String, userName: String,
        clientTimestamp: Timestamp, receivedAt: Timestamp, status: MutationResult.Status, version: Int64
    ) {
        self.idempotencyKey = idempotencyKey
        self.collection = collection
        self.recordId = recordId
        self.scope = scope
        self.op = op
        self.fields = fields
        self.deviceId = deviceId
        self.userId = userId
        self.userName = userName
        self.clientTimestamp = clientTimestamp
        self.receivedAt = receivedAt
        self.status = status
        self.version = version
    }
}

/// The answer to `GET /v1/audit`, in `clientTimestamp` order.
public struct AuditResponse: Sendable, Hashable, Codable {
    public var entries: [AuditEntry]

    public init(entries: [AuditEntry]) {
        self.entries = entries
    }
}

/// A protected-field conflict kept for review.
public struct ConflictRecord: Sendable, Hashable, Codable {
    public var conflictId: String
    public var collection: String
    public var recordId: String
    /// The record's scope (its event), or empty in a collection without one.
    public var scope: String
    public var idempotencyKey: String
    public var deviceId: String
    public var userId: String
    /// The protected values the device tried to write.
    public var attemptedFields: [String: JSONValue]
    /// The server's values of those fields when the conflict happened.
    public var serverFields: [String: JSONValue]
    public var baseVersion: Int64?
    public var serverVersion: Int64
    public var clientTimestamp: Timestamp
    public var receivedAt: Timestamp

    public init(
        conflictId: String, collection: String, recordId: String, scope: String = "", idempotencyKey: String,
        deviceId: String,
        userId: String, attemptedFields: [String: JSONValue], serverFields: [String: JSONValue],
        baseVersion: Int64?, serverVersion: Int64, clientTimestamp: Timestamp, receivedAt: Timestamp
    ) {
        self.conflictId = conflictId
        self.collection = collection
        self.recordId = recordId
        self.scope = scope
        self.idempotencyKey = idempotencyKey
        self.deviceId = deviceId
        self.userId = userId
        self.attemptedFields = attemptedFields
        self.serverFields = serverFields
        self.baseVersion = baseVersion
        self.serverVersion = serverVersion
        self.clientTimestamp = clientTimestamp
        self.receivedAt = receivedAt
    }
}

/// The answer to `GET /v1/conflicts`, newest first.
public struct ConflictsResponse: Sendable, Hashable, Codable {
    public var conflicts: [ConflictRecord]

    public init(conflicts: [ConflictRecord]) {
        self.conflicts = conflicts
    }
}

/// The answer to `GET /health`.
public struct HealthResponse: Sendable, Hashable, Codable {
    public var status: String
    public var storage: String

    public init(status: String, storage: String) {
        self.status = status
        self.storage = storage
    }
}
