/// What a connector POSTs to its URL: changes of one collection, in commit order.
///
/// Signed in the `Outpost-Signature` header, `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`; the
/// `Outpost-Delivery` header repeats ``delivery``. A batch the receiver did not take (no answer, or not 2xx) is sent
/// again, with the same delivery id when its changes are the same: a receiver that keeps the ids it has taken
/// applies each batch once.
public struct ConnectorBatch: Sendable, Hashable, Codable {
    /// The batch's id, the same each time the same changes are sent (until the connector is replayed).
    public var delivery: String
    public var connector: String
    public var collection: String
    /// The connector's scope; nil when it takes every scope.
    public var scope: String?
    /// 1 for the connector's first batch, then one more for each batch taken.
    public var sequence: Int64
    /// The cursor the batch starts after, and the one it ends at: `outpost connector replay --from` takes either.
    public var from: String
    public var to: String
    /// In commit order. A record changed several times between two batches comes once, as it is now.
    public var changes: [ConnectorChange]

    public init(
        delivery: String, connector: String, collection: String, scope: String?, sequence: Int64, from: String,
        to: String, changes: [ConnectorChange]
    ) {
        self.delivery = delivery
        self.connector = connector
        self.collection = collection
        self.scope = scope
        self.sequence = sequence
        self.from = from
        self.to = to
        self.changes = changes
    }
}

/// One record in a ``ConnectorBatch``: a ``Change`` and when the server received its version.
public struct ConnectorChange: Sendable, Hashable, Codable {
    public var recordId: String
    public var scope: String
    public var version: Int64
    /// True when the record was deleted; `fields` is then empty.
    public var tombstone: Bool
    public var fields: [String: JSONValue]
    /// Device times of the record's first write and of its latest change.
    public var createdAt: Timestamp
    public var updatedAt: Timestamp
    /// Server time the latest change arrived; nil for a record written before the server kept it.
    public var receivedAt: Timestamp?
    /// A link to each file the record's fields name (``FileReference``), by field; absent when it names none, or
    /// when the server has no public address to link to.
    public var files: [String: FileLink]?

    public init(
        recordId: String, scope: String, version: Int64, tombstone: Bool, fields: [String: JSONValue],
        createdAt: Timestamp, updatedAt: Timestamp, receivedAt: Timestamp?, files: [String: FileLink]? = nil
    ) {
        self.recordId = recordId
        self.scope = scope
        self.version = version
        self.tombstone = tombstone
        self.fields = fields
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.receivedAt = receivedAt
        self.files = files
    }
}

/// A signed link to a file a record names, for a system outside Outpost (a crew's sheet, an export): whoever holds
/// it may fetch the file until it expires, and no longer once the record stops naming the file.
public struct FileLink: Sendable, Hashable, Codable {
    public var url: String
    public var name: String?
    public var type: String
    public var size: Int64
    /// When the link stops working.
    public var expiresAt: Timestamp

    public init(url: String, name: String?, type: String, size: Int64, expiresAt: Timestamp) {
        self.url = url
        self.name = name
        self.type = type
        self.size = size
        self.expiresAt = expiresAt
    }
}

/// A connector as the organizer API shows it (`/v1/connectors`); never its secret, and only its URL's host.
public struct ConnectorStatus: Sendable, Hashable, Codable {
    public var id: String
    public var collection: String
    public var scope: String?
    /// The host the batches go to; the whole URL can hold a credential and is not shown again.
    public var host: String
    public var format: String
    /// `active`, `paused` or `failing` (still tried, from where it stopped).
    public var state: String
    /// Every change up to here was delivered.
    public var cursor: String
    public var delivered: Int64
    public var deliveredChanges: Int64
    public var failures: Int
    public var lastError: String?
    public var lastDeliveredAt: Timestamp?
    public var lastFailedAt: Timestamp?
    public var nextAttemptAt: Timestamp?
    public var createdAt: Timestamp
    /// Only in the answer that made the connector, when the server chose it.
    public var secret: String?

    public init(
        id: String, collection: String, scope: String?, host: String, format: String, state: String, cursor: String,
        delivered: Int64, deliveredChanges: Int64, failures: Int, lastError: String?, lastDeliveredAt: Timestamp?,
        lastFailedAt: Timestamp?, nextAttemptAt: Timestamp?, createdAt: Timestamp, secret: String? = nil
    ) {
        self.id = id
        self.collection = collection
        self.scope = scope
        self.host = host
        self.format = format
        self.state = state
        self.cursor = cursor
        self.delivered = delivered
        self.deliveredChanges = deliveredChanges
        self.failures = failures
        self.lastError = lastError
        self.lastDeliveredAt = lastDeliveredAt
        self.lastFailedAt = lastFailedAt
        self.nextAttemptAt = nextAttemptAt
        self.createdAt = createdAt
        self.secret = secret
    }
}

/// Whether the tenant's connectors have delivered records (`GET /v1/deliveries`): for a device to show whether a
/// record the server has is also where its connectors send it, such as a crew's sheet.
public struct RecordDeliveries: Sendable, Hashable, Codable {
    /// The records asked for that the caller may read; one the server does not have is left out.
    public var records: [RecordDelivery]

    public init(records: [RecordDelivery]) {
        self.records = records
    }
}

public struct RecordDelivery: Sendable, Hashable, Codable {
    public var recordId: String
    public var scope: String
    /// The version the server has.
    public var version: Int64
    /// The connectors that send this record as batches (paused ones included, a chat's not); none means it goes
    /// nowhere else.
    public var receivers: Int
    /// True when every one of them has delivered this version (or a later one).
    public var delivered: Bool
    /// Why the last attempt of a connector that has not delivered this version failed, in words fit for the
    /// person who made the record ("the receiver could not be reached"); nil while none has failed since its
    /// last delivery.
    public var lastError: String?
    /// When such a connector tries again.
    public var nextAttemptAt: Timestamp?

    public init(
        recordId: String, scope: String, version: Int64, receivers: Int, delivered: Bool, lastError: String? = nil,
        nextAttemptAt: Timestamp? = nil
    ) {
        self.recordId = recordId
        self.scope = scope
        self.version = version
        self.receivers = receivers
        self.delivered = delivered
        self.lastError = lastError
        self.nextAttemptAt = nextAttemptAt
    }

    /// Whether a connector that has not delivered this version failed its last attempt.
    public var isFailing: Bool { !delivered && lastError != nil }
}
