import OutpostProtocol

/// How the device SDK reaches the server. The engine talks only to this protocol, so that tests can
/// substitute an in-memory server and a simulated network.
public protocol SyncTransport: Sendable {
    /// Sends mutations; one result per mutation, in order.
    func push(_ request: PushRequest) async throws -> PushResponse
    /// Changes of `collection` after `cursor`.
    func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse
    /// The same changes with each record's fields as the JSON text sent, which a refresh of reference data
    /// seals as it is. By default, ``pull(collection:scope:cursor:limit:)``'s page written out again.
    func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage
    /// Up to `pages` pulls one after another in one exchange, each page as soon as it arrives: the stream ends
    /// after a page without `hasMore`, or after `pages` pages (the last then says `hasMore`, and a new stream
    /// continues from its cursor). A failure ends the stream with its error, after the pages that arrived whole.
    /// By default, ``pullPage(collection:scope:cursor:limit:)`` one page at a time.
    func pullPages(collection: String, scope: String?, cursor: String?, limit: Int, pages: Int)
        -> AsyncThrowingStream<PullPage, any Error>
    /// The same stream of pulls with each page decoded as ``pull(collection:scope:cursor:limit:)`` decodes it,
    /// for the engine's pull, which merges the changes with the device's own. By default,
    /// ``pull(collection:scope:cursor:limit:)`` one page at a time.
    func pulls(collection: String, scope: String?, cursor: String?, limit: Int, pages: Int)
        -> AsyncThrowingStream<PullResponse, any Error>
    /// One page of a reference collection.
    func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws
        -> SnapshotResponse
    /// The same page with each record's fields as the JSON text sent, which a download seals as it is.
    /// By default, ``snapshot(collection:scope:continuation:limit:)``'s page written out again.
    func snapshotPage(collection: String, scope: String?, continuation: String?, limit: Int?) async throws
        -> SnapshotPage
    /// Whether the server is reachable and its storage up.
    func health() async throws -> HealthResponse
    /// Reports the device's state to the sync monitor.
    func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse
    /// Escalates records that have failed to sync for too long.
    func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt
}

extension SyncTransport {
    /// ``pull(collection:scope:cursor:limit:)``'s answer with each change's fields written out again as JSON.
    public func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage {
        try PullPage(try await pull(collection: collection, scope: scope, cursor: cursor, limit: limit))
    }

    public func pullPages(collection: String, scope: String?, cursor: String?, limit: Int, pages: Int)
        -> AsyncThrowingStream<PullPage, any Error>
    {
        pullPagesOneByOne(collection: collection, scope: scope, cursor: cursor, limit: limit, pages: pages)
    }

    /// ``pullPages(collection:scope:cursor:limit:pages:)`` as separate pulls, one after another: the default, for
    /// transports that cannot stream (and test doubles that change how many pages a stream carries).
    public func pullPagesOneByOne(collection: String, scope: String?, cursor: String?, limit: Int, pages: Int)
        -> AsyncThrowingStream<PullPage, any Error>
    {
        Self.oneByOne(from: cursor, pages: pages, more: { $0.hasMore ? $0.cursor : nil }) { from in
            try await pullPage(collection: collection, scope: scope, cursor: from, limit: limit)
        }
    }

    /// By default, separate pulls one after another.
    public func pulls(collection: String, scope: String?, cursor: String?, limit: Int, pages: Int)
        -> AsyncThrowingStream<PullResponse, any Error>
    {
        Self.oneByOne(from: cursor, pages: pages, more: { $0.hasMore ? $0.cursor : nil }) { from in
            try await pull(collection: collection, scope: scope, cursor: from, limit: limit)
        }
    }

    /// Up to `pages` pages fetched one after another, each from the cursor `more` says the one before it ends at,
    /// until one says there is no more.
    private static func oneByOne<Page: Sendable>(
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

    public func snapshotPage(collection: String, scope: String?, continuation: String?, limit: Int?) async throws
        -> SnapshotPage
    {
        try SnapshotPage(try await snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit))
    }

    /// Transports that reach no sync monitor (test doubles, an offline reader) refuse heartbeats.
    public func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
        throw TransportError(kind: .server, status: 404, message: "this transport reaches no sync monitor")
    }

    /// Transports that reach no sync monitor refuse failure reports.
    public func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        throw TransportError(kind: .server, status: 404, message: "this transport reaches no sync monitor")
    }
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
    public var message: String

    public init(kind: Kind, status: Int? = nil, wire: WireError? = nil, message: String) {
        self.kind = kind
        self.status = status
        self.wire = wire
        self.message = message
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
