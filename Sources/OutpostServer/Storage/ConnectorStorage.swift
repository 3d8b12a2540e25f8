import Foundation
import OutpostProtocol

/// A connector: every change of one collection (optionally one scope) of a tenant, delivered in commit order to a
/// URL outside, in signed batches.
package struct Connector: Sendable, Hashable {
    package var tenant: String
    /// `con_` and 20 hex digits, made by the server.
    package var id: String
    package var collection: String
    /// Empty for every scope of the collection.
    package var scope: String
    package var url: String
    /// The key batches are signed with (HMAC-SHA256); never shown after the connector is made.
    package var secret: String
    package var format: NotificationFormat
    package var paused: Bool
    /// Every change up to here was delivered; the next batch starts after it.
    package var cursor: PullCursor
    /// The end of the batch being sent, from just before it was sent until it is taken: sent again, it ends there,
    /// so that it carries no change past the first attempt's end, and its delivery id.
    package var pending: PullCursor?
    /// Batches delivered; also the number of the next one.
    package var delivered: Int64
    /// Changes delivered.
    package var deliveredChanges: Int64
    /// How many times it was replayed: part of each batch's delivery id, so that a receiver that keeps the ids it
    /// took takes a replayed batch again.
    package var replays: Int
    /// Failed attempts since the last delivery.
    package var failures: Int
    /// Why the last attempt failed; nil after a delivery.
    package var lastError: String?
    /// Milliseconds since 1970: the last delivery, the last failure, the next attempt after a failure.
    package var lastDeliveredAt: Int64?
    package var lastFailedAt: Int64?
    package var nextAttemptAt: Int64
    package var createdAt: Int64

    package init(
        tenant: String, id: String, collection: String, scope: String, url: String, secret: String,
        format: NotificationFormat, createdAt: Int64
    ) {
        self.tenant = tenant
        self.id = id
        self.collection = collection
        self.scope = scope
        self.url = url
        self.secret = secret
        self.format = format
        self.paused = false
        self.cursor = .start
        self.pending = nil
        self.delivered = 0
        self.deliveredChanges = 0
        self.replays = 0
        self.failures = 0
        self.lastError = nil
        self.lastDeliveredAt = nil
        self.lastFailedAt = nil
        self.nextAttemptAt = 0
        self.createdAt = createdAt
    }

    /// A connector is failing once this many attempts in a row have failed: it is shown so, logged at ERROR
    /// once, counted in `outpost_connectors_failing`, and still tried, from where it stopped.
    package static let failingAfter = 5

    package var isFailing: Bool { failures >= Self.failingAfter }
}

/// Connectors and where each has got to. Every change to a connector's position is a compare-and-set on its
/// cursor, made only by the server process that holds its lease: however many servers share the database, one
/// delivers a connector at a time and none moves it past a batch its receiver did not take.
package protocol ConnectorStorage: Sendable {
    func addConnector(_ connector: Connector) async throws
    /// The tenant's connectors, oldest first.
    func connectors(tenant: String) async throws -> [Connector]
    func connector(tenant: String, id: String) async throws -> Connector?
    /// False when the tenant has no such connector.
    func setConnectorPaused(tenant: String, id: String, paused: Bool) async throws -> Bool
    /// Moves the connector back (or on) to `cursor`, counts a replay, and clears its failures and any batch pending;
    /// false when there is no such connector.
    func replayConnector(tenant: String, id: String, from cursor: PullCursor) async throws -> Bool
    func removeConnector(tenant: String, id: String) async throws -> Bool
    /// Every tenant's connectors that are not paused: what the deliverers go through.
    func activeConnectors() async throws -> [Connector]
    /// Takes or renews the connector's lease for `owner` until `until`, when it is free, expired (before `now`) or
    /// already `owner`'s; true when `owner` holds it.
    func leaseConnector(tenant: String, id: String, owner: String, now: Int64, until: Int64) async throws -> Bool
    /// Gives up `owner`'s leases, when it stops.
    func releaseConnectors(owner: String) async throws
    /// Marks a batch from `from` to `to` as being sent, and extends `owner`'s lease to `until` so that it outlasts
    /// the send: if `owner` holds the lease and the cursor is still `from`. False when it does not, and must not send.
    func connectorSending(
        tenant: String, id: String, owner: String, from: PullCursor, to: PullCursor, until: Int64
    ) async throws -> Bool
    /// Records a delivered batch: the cursor moves from `from` to `to` and the batch is no longer pending, if `owner`
    /// holds the lease and the cursor is still `from`; true when it moved.
    func connectorDelivered(
        tenant: String, id: String, owner: String, from: PullCursor, to: PullCursor, changes: Int, at time: Int64
    ) async throws -> Bool
    /// Records a failed attempt, if `owner` holds the lease; the connector's failures in a row, or nil when it
    /// does not hold it.
    func connectorFailed(
        tenant: String, id: String, owner: String, error: String, at time: Int64, nextAttemptAt: Int64
    ) async throws -> Int?
    /// Brings a connector's next attempt after a failure forward to `time`, but to no sooner than `spacing`
    /// milliseconds after its last failure, so that asking again does not flood its receiver: when it is not
    /// paused, has failed since its last delivery, and its next attempt is later. True when it moved.
    func retryConnectorSoon(tenant: String, id: String, at time: Int64, spacing: Int64) async throws -> Bool
    /// Connectors failing now, over every tenant: for the metric every server reports alike.
    func failingConnectorCount() async throws -> Int
    /// Where each of these records' latest change stands in the change order, and its version: in `scope` (every
    /// scope when nil), and only `owner`'s when given.
    func changePositions(
        tenant: String, collection: String, scope: String?, owner: String?, recordIds: [String]
    )
        async throws -> [RecordChangePosition]
    /// When the server received each version of these records: the latest applied mutation that made it.
    func receivedTimes(tenant: String, collection: String, recordIds: [String]) async throws -> [RecordVersion: Int64]
}

/// One version of one record.
package struct RecordVersion: Sendable, Hashable {
    package var recordId: String
    package var scope: String
    package var version: Int64

    package init(recordId: String, scope: String, version: Int64) {
        self.recordId = recordId
        self.scope = scope
        self.version = version
    }
}

/// Where a record's latest change stands: a connector whose cursor is at or past `position` has delivered it.
package struct RecordChangePosition: Sendable, Hashable {
    package var recordId: String
    package var scope: String
    package var version: Int64
    package var position: PullCursor

    package init(recordId: String, scope: String, version: Int64, position: PullCursor) {
        self.recordId = recordId
        self.scope = scope
        self.version = version
        self.position = position
    }
}
