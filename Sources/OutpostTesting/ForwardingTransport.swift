import OutpostClient
import OutpostProtocol

/// A test double that passes every call to `inner` unless it says otherwise: a flaky or gated transport
/// overrides the one call it changes.
///
/// The bulk calls keep their defaults, which go through this transport's `pull` and `snapshot`: a double that
/// overrides those is obeyed by a refresh and a download too.
public protocol ForwardingTransport: BulkSyncTransport, SyncMonitorTransport {
    var inner: any SyncTransport { get }
}

extension ForwardingTransport {
    public func push(_ request: PushRequest) async throws -> PushResponse { try await inner.push(request) }

    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        try await inner.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
    }

    public func snapshot(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotResponse
    {
        try await inner.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
    }

    public func health() async throws -> HealthResponse { try await inner.health() }

    public func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
        try await inner.monitorHeartbeat(heartbeat)
    }

    public func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        try await inner.monitorReportFailures(report)
    }
}
