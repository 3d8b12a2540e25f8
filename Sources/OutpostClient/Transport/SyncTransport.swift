import OutpostProtocol

/// How the device SDK reaches the server: the four calls every transport makes. The engine talks only to this
/// protocol, so that tests can substitute an in-memory server and a simulated network.
///
/// A transport may also adopt ``BulkSyncTransport``, to move pages of changes faster, and ``SyncMonitorTransport``,
/// to reach the server's sync monitor; the engine uses what a transport adopts and does without the rest.
public protocol SyncTransport: Sendable {
    /// Sends mutations; one result per mutation, in order.
    func push(_ request: PushRequest) async throws -> PushResponse
    /// Changes of `collection` after `cursor`.
    func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse
    /// One page of a reference collection.
    func snapshot(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotResponse
    /// Whether the server is reachable and its storage up.
    func health() async throws -> HealthResponse
}

/// Faster paths for moving many pages: pages whose fields stay the JSON text received (a download seals it as it
/// is), and streams of several pulls in one exchange. Each has a default built on ``SyncTransport``'s calls.
public protocol BulkSyncTransport: SyncTransport {
    /// ``SyncTransport/pull(collection:scope:cursor:limit:)``'s changes with each record's fields as the JSON text sent.
    func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage
    /// Up to `pages` pulls one after another in one exchange, each page as soon as it arrives: the stream ends
    /// after a page without `hasMore`, or after `pages` pages (the last then says `hasMore`, and a new stream
    /// continues from its cursor). A failure ends the stream with its error, after the pages that arrived whole.
    func pullPageStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullPage, any Error>
    /// The same stream with each page decoded as ``SyncTransport/pull(collection:scope:cursor:limit:)`` decodes it,
    /// for the engine's pull, which merges the changes with the device's own.
    func pullStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullResponse, any Error>
    /// ``SyncTransport/snapshot(collection:scope:continuation:limit:)``'s page with each record's fields as the
    /// JSON text sent.
    func snapshotPage(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotPage
}

/// Reaching the server's sync monitor: the device's heartbeats and its reports of records that fail for too long.
public protocol SyncMonitorTransport: SyncTransport {
    /// Reports the device's state to the sync monitor.
    func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse
    /// Escalates records that have failed to sync for too long.
    func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt
}

/// Whether the server's connectors have sent records on, such as to a crew's sheet.
/// A transport that fetches the signed-in user's keys for record ids (`GET /v1/record-id-key`).
public protocol RecordIdKeyTransport: SyncTransport {
    func recordIdKey() async throws -> RecordIdKeyResponse
}

public protocol DeliveryStatusTransport: SyncTransport {
    /// The records the server has of `recordIds` that the caller may read, each with its connectors and whether
    /// they delivered it (`GET /v1/deliveries`); at most 200 ids.
    func deliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries
    /// Has the failing connectors that have not delivered these records try them again soon
    /// (`POST /v1/deliveries/retry`), and answers as ``deliveries(collection:scope:recordIds:)``.
    func retryDeliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries
}

extension DeliveryStatusTransport {
    /// A transport that cannot ask for a retry only reports where the records stand.
    public func retryDeliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        try await deliveries(collection: collection, scope: scope, recordIds: recordIds)
    }
}

extension BulkSyncTransport {
    public func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage {
        try PullPage(try await pull(collection: collection, scope: scope, cursor: cursor, limit: limit))
    }

    public func pullPageStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullPage, any Error>
    {
        pullPagesOneByOne(collection: collection, scope: scope, cursor: cursor, limit: limit, pages: pages)
    }

    public func pullStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullResponse, any Error>
    {
        oneByOne(from: cursor, pages: pages, more: { $0.hasMore ? $0.cursor : nil }) { from in
            try await pull(collection: collection, scope: scope, cursor: from, limit: limit)
        }
    }

    public func snapshotPage(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotPage
    {
        try SnapshotPage(try await snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit))
    }
}

extension SyncTransport {
    /// ``BulkSyncTransport/pullPageStream(collection:scope:cursor:limit:pages:)`` as separate pulls, one after
    /// another: for transports that cannot stream (and test doubles that change how many pages a stream carries).
    public func pullPagesOneByOne(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullPage, any Error>
    {
        oneByOne(from: cursor, pages: pages, more: { $0.hasMore ? $0.cursor : nil }) { from in
            try await bulkPullPage(collection: collection, scope: scope, cursor: from, limit: limit)
        }
    }

    /// Up to `pages` pages fetched one after another, each from the cursor `more` says the one before it ends at,
    /// until one says there is no more.
    fileprivate func oneByOne<Page: Sendable>(
        from cursor: String?, pages: Int, more: @escaping @Sendable (Page) -> String?,
        fetch: @escaping @Sendable (String?) async throws -> Page
    ) -> AsyncThrowingStream<Page, any Error> {
        AsyncThrowingStream.produced { deliver in
            var from = cursor
            for _ in 0..<max(pages, 1) {
                let page = try await fetch(from)
                try await deliver(page)
                guard let next = more(page) else { break }
                from = next
            }
        }
    }

    // What the engine calls: a bulk or monitor transport's own call, else the default built on the four.

    package func bulkPullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage {
        if let bulk = self as? any BulkSyncTransport {
            return try await bulk.pullPage(collection: collection, scope: scope, cursor: cursor, limit: limit)
        }
        return try PullPage(try await pull(collection: collection, scope: scope, cursor: cursor, limit: limit))
    }

    package func bulkPullPageStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullPage, any Error>
    {
        if let bulk = self as? any BulkSyncTransport {
            return bulk.pullPageStream(collection: collection, scope: scope, cursor: cursor, limit: limit, pages: pages)
        }
        return pullPagesOneByOne(collection: collection, scope: scope, cursor: cursor, limit: limit, pages: pages)
    }

    package func bulkPullStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullResponse, any Error>
    {
        if let bulk = self as? any BulkSyncTransport {
            return bulk.pullStream(collection: collection, scope: scope, cursor: cursor, limit: limit, pages: pages)
        }
        return oneByOne(from: cursor, pages: pages, more: { $0.hasMore ? $0.cursor : nil }) { from in
            try await pull(collection: collection, scope: scope, cursor: from, limit: limit)
        }
    }

    package func bulkSnapshotPage(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotPage
    {
        if let bulk = self as? any BulkSyncTransport {
            return try await bulk.snapshotPage(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }
        return try SnapshotPage(try await snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit))
    }

    /// A transport that reaches no sync monitor refuses heartbeats and failure reports.
    package func monitorHeartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
        guard let monitor = self as? any SyncMonitorTransport else { throw TransportError.noSyncMonitor }
        return try await monitor.heartbeat(heartbeat)
    }

    package func monitorReportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        guard let monitor = self as? any SyncMonitorTransport else { throw TransportError.noSyncMonitor }
        return try await monitor.reportFailures(report)
    }
}

extension SyncTransport {
    package func deliveryStatus(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        guard let transport = self as? any DeliveryStatusTransport else { throw TransportError.noDeliveryStatus }
        return try await transport.deliveries(collection: collection, scope: scope, recordIds: recordIds)
    }

    package func deliveryRetry(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        guard let transport = self as? any DeliveryStatusTransport else { throw TransportError.noDeliveryStatus }
        return try await transport.retryDeliveries(collection: collection, scope: scope, recordIds: recordIds)
    }
}

extension TransportError {
    static let noDeliveryStatus = TransportError(kind: .server, status: 404, message: "this transport reaches no delivery status")
    static let noSyncMonitor = TransportError(kind: .server, status: 404, message: "this transport reaches no sync monitor")
}

/// Why a transport call failed.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// No answer: the connection failed, dropped or timed out. Retry later.
        case network
        /// The server answered with an error; `status` and `wire` say which.
        case server
        /// The server answered with something that is not Outpost's protocol.
        case invalidResponse
    }

    public var kind: Kind
    /// The HTTP status, when the server answered.
    public var status: Int?
    /// The server's error body, when it sent one.
    public var wire: WireError?
    /// What a person is told; never the underlying error's text.
    public var message: String
    /// The error beneath, for diagnostics: AsyncHTTPClient's or URLSession's, or a decoder's.
    public var underlying: (any Error)?
    /// For a network failure: true when the server was reachable and the connection broke during the exchange,
    /// so that the device is not offline.
    public var reachedServer = false
    /// For a network failure: true when the request went out and no answer began within the transport's limit
    /// (a server that takes connections and never answers, or a captive portal). A sync does not send such an
    /// exchange again at once, since each try costs the whole limit: the next one sends it.
    public var answerTimedOut = false

    public init(kind: Kind, status: Int? = nil, wire: WireError? = nil, message: String, underlying: (any Error)? = nil) {
        self.kind = kind
        self.status = status
        self.wire = wire
        self.message = message
        self.underlying = underlying
    }

    /// No connection to the server, or no answer from it at all.
    public static func unreachable(underlying: (any Error)? = nil) -> TransportError {
        TransportError(kind: .network, message: "the server could not be reached", underlying: underlying)
    }

    /// A request sent, and no answer begun within `limit`: whether the server is there is not known.
    public static func notAnswering(within limit: Duration, underlying: (any Error)? = nil) -> TransportError {
        var error = TransportError(
            kind: .network, message: "the server did not answer within \(limit.components.seconds) s", underlying: underlying)
        error.answerTimedOut = true
        return error
    }

    /// What a person is told of an exchange whose answer broke off: the request may have reached the server.
    public static let brokenAnswer = "the connection to the server broke before it answered"

    /// An exchange whose connection broke although the server answers a probe: the network works.
    public static func droppedExchange(underlying: (any Error)? = nil) -> TransportError {
        var error = TransportError(kind: .network, message: brokenAnswer, underlying: underlying)
        error.reachedServer = true
        return error
    }

    /// A stream of pulls the server began and the connection broke in: the server was reached.
    package static func droppedPull(underlying: (any Error)? = nil) -> TransportError {
        var error = TransportError(kind: .network, message: "the connection dropped during a pull", underlying: underlying)
        error.reachedServer = true
        return error
    }

    /// Whether trying again later may succeed: a network failure, a 5xx, 429, or 408 (the body came too slowly).
    public var isRetryable: Bool {
        switch kind {
        case .network: return true
        case .server, .invalidResponse: return (status ?? 0) >= 500 || status == 429 || status == 408
        }
    }

    public var description: String { message }
}
