import Foundation
import OutpostClient
import OutpostProtocol

/// A server held in memory, with the protocol's push semantics: each idempotency key is applied once,
/// a key sent again is a duplicate, and a key reused with other content is refused.
///
/// It records every application in order, so that tests can check exactly-once and per-device order.
public actor InMemoryServer {
    public struct Application: Sendable, Hashable {
        public var deviceId: String
        public var mutation: Mutation
    }

    private var processed: [String: (mutation: Mutation, result: MutationResult)] = [:]
    private var versions: [String: Int64] = [:]
    public private(set) var applied: [Application] = []
    /// Decides which mutations the server rejects, with a code and message.
    private let rejection: @Sendable (Mutation) -> WireError.Detail?

    public init(rejecting rejection: @escaping @Sendable (Mutation) -> WireError.Detail? = { _ in nil }) {
        self.rejection = rejection
    }

    public func push(_ request: PushRequest) -> PushResponse {
        PushResponse(results: request.mutations.map { mutation in
            if let earlier = processed[mutation.idempotencyKey] {
                guard earlier.mutation == mutation else {
                    return .rejected(mutation.idempotencyKey, .idempotencyKeyReused, "idempotency key reused")
                }
                return MutationResult(
                    idempotencyKey: mutation.idempotencyKey, status: .duplicate, version: earlier.result.version,
                    originalStatus: earlier.result.status)
            }
            if let detail = rejection(mutation) {
                return .rejected(mutation.idempotencyKey, detail.code, detail.message)
            }
            let record = "\(mutation.collection)/\(mutation.recordId)"
            let version = (versions[record] ?? 0) + 1
            versions[record] = version
            let result = MutationResult(idempotencyKey: mutation.idempotencyKey, status: .applied, version: version)
            processed[mutation.idempotencyKey] = (mutation, result)
            applied.append(Application(deviceId: request.deviceId, mutation: mutation))
            return result
        })
    }

    /// How many times each key was applied (never more than once, if the protocol holds).
    public func applicationCounts() -> [String: Int] {
        applied.reduce(into: [:]) { $0[$1.mutation.idempotencyKey, default: 0] += 1 }
    }
}

/// A transport straight to an ``InMemoryServer``, with a switch for the network.
public final class InMemoryTransport: SyncTransport, @unchecked Sendable {
    public let server: InMemoryServer
    private let lock = NSLock()
    private var _online = true
    private var _pushes = 0

    public init(server: InMemoryServer) {
        self.server = server
    }

    /// While false, every call fails as a network error.
    public var isOnline: Bool {
        get { lock.withLock { _online } }
        set { lock.withLock { _online = newValue } }
    }

    /// How many pushes reached the server.
    public var pushCount: Int { lock.withLock { _pushes } }

    public func push(_ request: PushRequest) async throws -> PushResponse {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        lock.withLock { _pushes += 1 }
        return await server.push(request)
    }

    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return PullResponse(changes: [], cursor: cursor ?? "", hasMore: false)
    }

    public func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws
        -> SnapshotResponse
    {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return SnapshotResponse(records: [], total: 0, continuation: nil, cursor: "")
    }

    public func health() async throws -> HealthResponse {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return HealthResponse(status: "ok", storage: "ok")
    }
}
