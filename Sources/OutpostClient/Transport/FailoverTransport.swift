import Foundation
import NIOConcurrencyHelpers
import OutpostProtocol

/// A server and a fallback, such as the venue relay of the day: each call goes to the server when it can be
/// reached, and to the fallback when it cannot.
///
/// Nothing is applied twice for it: every write carries its idempotency key to whichever answers, and a relay
/// forwards each write under the same key, which the server answers `duplicate` when the device sent it there
/// first (or the other way round).
///
/// After the server could not be reached, calls go to the fallback first for ``primaryRetry``, and then to the
/// server first again. A call fails over on a network failure only: an answer from either (a refusal, a 503)
/// is the answer.
///
/// Pull cursors and snapshot continuations belong to the endpoint that issued them: each is tagged with its
/// endpoint, and one given to the other endpoint starts its pull or snapshot over, so that no change is passed
/// over for a position in another server's order.
public final class FailoverTransport: BulkSyncTransport, SyncMonitorTransport, DeliveryStatusTransport, RecordIdKeyTransport,
    Sendable
{
    public let primary: any SyncTransport
    public let fallback: any SyncTransport
    /// How long calls go to the fallback first after the server could not be reached.
    public let primaryRetry: Duration
    private let now: @Sendable () -> Date
    /// Until when the fallback goes first.
    private let fallbackFirstUntil = NIOLockedValueBox<Date?>(nil)

    /// Which endpoint answered the last call: the primary or the fallback.
    public enum Endpoint: Int, Sendable, Hashable {
        case primary = 0
        case fallback = 1
    }

    public init(
        primary: any SyncTransport, fallback: any SyncTransport, primaryRetry: Duration = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.primary = primary
        self.fallback = fallback
        self.primaryRetry = primaryRetry
        self.now = now
    }

    /// The endpoint calls go to first now.
    public var preferred: Endpoint {
        guard let until = fallbackFirstUntil.withLockedValue({ $0 }), until > now() else { return .primary }
        return .fallback
    }

    private func transport(_ endpoint: Endpoint) -> any SyncTransport {
        endpoint == .primary ? primary : fallback
    }

    /// Runs `call` on the preferred endpoint, and on the other after a network failure.
    private func call<T>(_ call: (any SyncTransport, Endpoint) async throws -> T) async throws -> T {
        let first = preferred
        let order: [Endpoint] = first == .primary ? [.primary, .fallback] : [.fallback, .primary]
        var failure: TransportError?
        for endpoint in order {
            do {
                let answer = try await call(transport(endpoint), endpoint)
                if endpoint == .primary { fallbackFirstUntil.withLockedValue { $0 = nil } }
                return answer
            } catch let error as TransportError where error.kind == .network {
                if endpoint == .primary {
                    let until = now().addingTimeInterval(Double(primaryRetry.components.seconds))
                    fallbackFirstUntil.withLockedValue { $0 = until }
                }
                failure = failure ?? error
            }
        }
        throw failure ?? TransportError.unreachable()
    }

    // MARK: Cursors

    /// `cursor` as `endpoint` issued it, or nil when another endpoint did (the pull starts over there). An untagged
    /// cursor was issued by the server before the device had a fallback.
    static func untag(_ cursor: String?, for endpoint: Endpoint) -> String? {
        guard let cursor else { return nil }
        for tagged in [Endpoint.primary, .fallback] {
            let prefix = "\(tagged.rawValue)|"
            if cursor.hasPrefix(prefix) { return tagged == endpoint ? String(cursor.dropFirst(prefix.count)) : nil }
        }
        return endpoint == .primary ? cursor : nil
    }

    static func tag(_ cursor: String, from endpoint: Endpoint) -> String { "\(endpoint.rawValue)|\(cursor)" }

    // MARK: SyncTransport

    public func push(_ request: PushRequest) async throws -> PushResponse {
        try await call { transport, _ in try await transport.push(request) }
    }

    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        try await call { transport, endpoint in
            var page = try await transport.pull(
                collection: collection, scope: scope, cursor: Self.untag(cursor, for: endpoint), limit: limit)
            page.cursor = Self.tag(page.cursor, from: endpoint)
            return page
        }
    }

    public func snapshot(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws -> SnapshotResponse {
        try await call { transport, endpoint in
            var page = try await transport.snapshot(
                collection: collection, scope: scope, continuation: Self.untag(continuation, for: endpoint), limit: limit)
            page.continuation = page.continuation.map { Self.tag($0, from: endpoint) }
            page.cursor = page.cursor.map { Self.tag($0, from: endpoint) }
            return page
        }
    }

    public func health() async throws -> HealthResponse {
        try await call { transport, _ in try await transport.health() }
    }

    // MARK: BulkSyncTransport

    public func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage {
        try await call { transport, endpoint in
            var page = try await transport.bulkPullPage(
                collection: collection, scope: scope, cursor: Self.untag(cursor, for: endpoint), limit: limit)
            page.cursor = Self.tag(page.cursor, from: endpoint)
            return page
        }
    }

    public func snapshotPage(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws -> SnapshotPage {
        try await call { transport, endpoint in
            var page = try await transport.bulkSnapshotPage(
                collection: collection, scope: scope, continuation: Self.untag(continuation, for: endpoint), limit: limit)
            page.continuation = page.continuation.map { Self.tag($0, from: endpoint) }
            page.cursor = page.cursor.map { Self.tag($0, from: endpoint) }
            return page
        }
    }

    /// Pages one by one, each through ``pullPage(collection:scope:cursor:limit:)``: a stream cannot change
    /// endpoint part way, a call can.
    public func pullPageStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    ) -> AsyncThrowingStream<PullPage, any Error> {
        pullPagesOneByOne(collection: collection, scope: scope, cursor: cursor, limit: limit, pages: pages)
    }

    // MARK: The rest

    public func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
        try await call { transport, _ in try await transport.monitorHeartbeat(heartbeat) }
    }

    public func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        try await call { transport, _ in try await transport.monitorReportFailures(report) }
    }

    public func deliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        try await call { transport, _ in
            try await transport.deliveryStatus(collection: collection, scope: scope, recordIds: recordIds)
        }
    }

    public func retryDeliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        try await call { transport, _ in
            try await transport.deliveryRetry(collection: collection, scope: scope, recordIds: recordIds)
        }
    }

    public func recordIdKey() async throws -> RecordIdKeyResponse {
        try await call { transport, _ in
            guard let keys = transport as? any RecordIdKeyTransport else {
                throw TransportError(kind: .server, status: 404, message: "this transport reaches no record id keys")
            }
            return try await keys.recordIdKey()
        }
    }
}

/// Files go to the server alone: a venue relay carries none, and its collections name none. While the server
/// cannot be reached, an upload fails as the network does, and goes when the server answers again.
extension FailoverTransport: FileTransport {
    private var files: any FileTransport {
        get throws {
            guard let files = primary as? any FileTransport else { throw TransportError.carriesNoFiles }
            return files
        }
    }

    public func upload(of sha256: String, collection: String) async throws -> FileUpload? {
        try await files.upload(of: sha256, collection: collection)
    }

    public func uploadRange(_ body: UploadBody, of file: FileReference, collection: String) async throws -> FileUpload {
        try await files.uploadRange(body, of: file, collection: collection)
    }

    public func download(
        _ sha256: String, collection: String, scope: String?, recordId: String, from offset: Int64,
        receive: @escaping @Sendable (Data) async throws -> Void
    ) async throws {
        try await files.download(sha256, collection: collection, scope: scope, recordId: recordId, from: offset, receive: receive)
    }
}
