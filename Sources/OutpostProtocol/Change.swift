/// A record's state as pull and snapshot deliver it; a tombstone when the record was deleted.
public struct Change: Sendable, Hashable, Codable {
    public var collection: String
    public var recordId: String
    /// The reference scope the record belongs to (an event id for a roster), or empty.
    public var scope: String
    public var version: Int64
    /// True when the record was deleted; `fields` is then empty.
    public var tombstone: Bool
    public var fields: [String: JSONValue]
    /// Device time of the record's first write.
    public var createdAt: Timestamp
    /// Device time of the latest change applied to the record.
    public var updatedAt: Timestamp

    public init(
        collection: String,
        recordId: String,
        scope: String = "",
        version: Int64,
        tombstone: Bool,
        fields: [String: JSONValue],
        createdAt: Timestamp,
        updatedAt: Timestamp
    ) {
        self.collection = collection
        self.recordId = recordId
        self.scope = scope
        self.version = version
        self.tombstone = tombstone
        self.fields = fields
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// The answer to `GET /v1/pull`.
public struct PullResponse: Sendable, Hashable, Codable {
    /// Changes after the request's cursor, in commit order. A record changed several times appears once, as it is now.
    public var changes: [Change]
    /// Where the next pull continues; opaque.
    public var cursor: String
    /// True when more changes are ready now; pull again at once.
    public var hasMore: Bool

    public init(changes: [Change], cursor: String, hasMore: Bool) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
    }
}

/// One page of `GET /v1/snapshot`.
public struct SnapshotResponse: Sendable, Hashable, Codable {
    /// Live records of the page, ordered by record id; never tombstones.
    public var records: [Change]
    /// How many records the whole snapshot holds, as counted when it started.
    public var total: Int
    /// Pass back to get the next page; absent on the last page.
    public var continuation: String?
    /// On the last page only: the pull cursor to continue from, so that no change made during the download is lost.
    public var cursor: String?

    public init(records: [Change], total: Int, continuation: String?, cursor: String?) {
        self.records = records
        self.total = total
        self.continuation = continuation
        self.cursor = cursor
    }
}
