import Foundation
import NIOConcurrencyHelpers
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// A server held in memory, with the protocol's push semantics: each idempotency key is applied once,
/// a key sent again is a duplicate, and a key reused with other content is refused.
///
/// Records are keyed by collection, scope and id, as on the server: a mutation's scope is the one it names,
/// or else its scope field's value; one that names two different scopes, or a mutation of a scoped
/// collection that names none, is refused (`invalid_fields`), as a mutation with a scope in a collection
/// without one is.
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
    /// Every heartbeat received, in order.
    public private(set) var heartbeats: [Heartbeat] = []
    /// Every failure report received, in order.
    public private(set) var failureReports: [SyncFailureReport] = []
    /// Decides which mutations the server rejects, with a code and message.
    private let rejection: @Sendable (Mutation) -> WireError.Detail?
    /// Records as they stand, and every change in order: a pull cursor is a position in `log`.
    var records: [String: Change] = [:]
    private var log: [Change] = []
    /// The field whose value is a collection's scope, as the server's policies say.
    private let scopeFields: [String: String]
    /// Files uploaded, whole or in part, by digest.
    var files: [String: StoredFile] = [:]
    /// The largest file the server takes, when it has a limit.
    public internal(set) var maxFileBytes: Int64?
    /// Every range of a file the server stored, in order: its digest and offset.
    public internal(set) var uploadedRanges: [(sha256: String, offset: Int64)] = []

    struct StoredFile {
        var size: Int64
        var type: String
        var bytes: Data
        var complete: Bool
    }

    /// A server whose scoped collections are `scopeFields` (the field naming each one's scope), refusing what
    /// `rejection` gives a code and message for.
    public init(
        scopeFields: [String: String] = FieldCollections.scopeFields,
        rejecting rejection: @escaping @Sendable (Mutation) -> WireError.Detail? = { _ in nil }
    ) {
        self.scopeFields = scopeFields
        self.rejection = rejection
    }

    /// Changes after `cursor`, merged by arrival (later fields overwrite earlier ones): a simple stand-in
    /// for the real server's merge, enough for devices that pull what others wrote.
    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) -> PullResponse {
        let from = min(cursor.flatMap(Int.init) ?? 0, log.count)
        let matching = log[from...].enumerated().filter { $0.element.collection == collection && (scope == nil || $0.element.scope == scope) }
        let page = Array(matching.prefix(limit ?? 500))
        let next = page.count == matching.count ? log.count : from + (page.last?.offset ?? -1) + 1
        return PullResponse(changes: page.map(\.element), cursor: String(next), hasMore: page.count < matching.count)
    }

    /// The scope `mutation` belongs to ("" in a collection without scopes), or why the server refuses it.
    private func scope(of mutation: Mutation) -> Result<String, WireError> {
        guard let field = scopeFields[mutation.collection] else {
            guard mutation.scope?.isEmpty ?? true else {
                return .failure(WireError(code: .invalidFields, message: "\(mutation.collection) has no scope"))
            }
            return .success("")
        }
        let named = mutation.fields[field]?.displayText
        if let scope = mutation.scope, let named, scope != named {
            return .failure(WireError(code: .invalidFields, message: "scope \(scope) and \(field) \(named) differ"))
        }
        guard let scope = mutation.scope ?? named, !scope.isEmpty else {
            return .failure(WireError(code: .invalidFields, message: "a \(mutation.collection) mutation names its scope"))
        }
        return .success(scope)
    }

    private func record(_ mutation: Mutation, scope: String, version: Int64) {
        let key = "\(mutation.collection)/\(scope)/\(mutation.recordId)"
        var change =
            records[key]
            ?? Change(
                collection: mutation.collection, recordId: mutation.recordId, scope: scope, version: 0, tombstone: false,
                fields: [:], createdAt: mutation.clientTimestamp, updatedAt: mutation.clientTimestamp)
        if mutation.op == .delete {
            change.fields = [:]
            change.tombstone = true
        } else {
            change.fields.merge(mutation.fields) { $1 }
            change.tombstone = false
        }
        change.version = version
        change.updatedAt = max(change.updatedAt, mutation.clientTimestamp)
        records[key] = change
        log.append(change)
    }

    public func push(_ request: PushRequest) -> PushResponse {
        PushResponse(
            results: request.mutations.map { mutation in
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
                for (field, file) in FileReference.references(in: mutation.fields) where files[file.sha256]?.complete != true {
                    return .rejected(
                        mutation.idempotencyKey, .fileMissing, "the file in \(field) is not on the server whole; upload it first")
                }
                let scope: String
                switch self.scope(of: mutation) {
                case .success(let resolved): scope = resolved
                case .failure(let refusal): return .rejected(mutation.idempotencyKey, refusal.code, refusal.message)
                }
                let record = "\(mutation.collection)/\(scope)/\(mutation.recordId)"
                let version = (versions[record] ?? 0) + 1
                versions[record] = version
                let result = MutationResult(idempotencyKey: mutation.idempotencyKey, status: .applied, version: version)
                processed[mutation.idempotencyKey] = (mutation, result)
                applied.append(Application(deviceId: request.deviceId, mutation: mutation))
                self.record(mutation, scope: scope, version: version)
                return result
            })
    }

    /// The keys `GET /v1/record-id-key` answers with; nil answers 404, as a server older than the route does.
    public private(set) var recordIdKeys: RecordIdKeyResponse?

    public func setRecordIdKeys(_ keys: RecordIdKeyResponse?) {
        recordIdKeys = keys
    }

    public func heartbeat(_ heartbeat: Heartbeat) -> HeartbeatResponse {
        heartbeats.append(heartbeat)
        return HeartbeatResponse(fingerprint: "fp-\(heartbeat.deviceId)")
    }

    public func reportFailures(_ report: SyncFailureReport) -> SyncFailureReceipt {
        failureReports.append(report)
        return SyncFailureReceipt(recorded: report.failures.count, alreadyKnown: 0, escalationEnabled: true)
    }

    /// Collections a connector sends on, and the version of each record it has sent.
    private var connected: Set<String> = []
    private var sent: [String: Int64] = [:]

    /// Gives `collection` a connector, as an organizer adding one does.
    public func connect(_ collection: String) {
        connected.insert(collection)
    }

    private var failing: [String: String] = [:]
    /// How many retries devices asked of each collection's connector.
    public private(set) var deliveryRetries: [String: Int] = [:]

    /// The connector of `collection` sends every record as it stands now.
    public func deliverConnected(_ collection: String) {
        for (key, change) in records where change.collection == collection { sent[key] = change.version }
        failing[collection] = nil
    }

    /// The connector of `collection` fails with `reason` until it delivers again.
    public func failConnected(_ collection: String, reason: String) {
        failing[collection] = reason
    }

    public func retryDeliveries(collection: String, scope: String?, recordIds: [String]) -> RecordDeliveries {
        deliveryRetries[collection, default: 0] += 1
        deliveryQueries -= 1
        return deliveries(collection: collection, scope: scope, recordIds: recordIds)
    }

    /// How many times devices asked where records stand (`GET /v1/deliveries`).
    public private(set) var deliveryQueries = 0

    public func deliveries(collection: String, scope: String?, recordIds: [String]) -> RecordDeliveries {
        deliveryQueries += 1
        let wanted = Set(recordIds)
        let found = records.filter {
            $0.value.collection == collection && wanted.contains($0.value.recordId) && (scope == nil || $0.value.scope == scope)
        }
        return RecordDeliveries(
            records: found.sorted { $0.key < $1.key }.map { key, change in
                let receivers = connected.contains(collection) ? 1 : 0
                let delivered = receivers > 0 && (sent[key] ?? 0) >= change.version
                return RecordDelivery(
                    recordId: change.recordId, scope: change.scope, version: change.version, receivers: receivers,
                    delivered: delivered, lastError: delivered ? nil : failing[collection])
            })
    }

    /// How many times each key was applied (never more than once, if the protocol holds).
    public func applicationCounts() -> [String: Int] {
        applied.reduce(into: [:]) { $0[$1.mutation.idempotencyKey, default: 0] += 1 }
    }
}

/// A transport straight to an ``InMemoryServer``, with a switch for the network.
public final class InMemoryTransport: SyncMonitorTransport, DeliveryStatusTransport, RecordIdKeyTransport, FileTransport,
    Sendable
{
    public let server: InMemoryServer
    private let online = NIOLockedValueBox(true)
    private let pushes = NIOLockedValueBox(0)
    /// How many more bytes of files reach the server before the link goes down; nil: no limit.
    private let bytesBeforeCut = NIOLockedValueBox<Int?>(nil)

    public init(server: InMemoryServer) {
        self.server = server
    }

    /// While false, every call fails as a network error.
    public var isOnline: Bool {
        get { online.withLockedValue { $0 } }
        set { online.withLockedValue { $0 = newValue } }
    }

    /// How many pushes reached the server.
    public var pushCount: Int { pushes.withLockedValue { $0 } }

    /// Lets `bytes` more bytes of files through, then takes the link down (``isOnline`` false): an upload cut
    /// part-way, of which the server keeps what arrived, as a server does.
    public func cutUploads(afterBytes bytes: Int) {
        bytesBeforeCut.withLockedValue { $0 = bytes }
    }

    public func upload(of sha256: String, collection: String) async throws -> FileUpload? {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return await server.upload(of: sha256)
    }

    /// Sends all of `body` in one request, as ``HTTPSyncTransport`` does; the server stores it whole, or, when the
    /// link is cut part-way, what came before the cut.
    public func uploadRange(_ body: UploadBody, of file: FileReference, collection: String) async throws -> FileUpload {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        var bytes = Data()
        var cut = false
        for try await piece in body.pieces() {
            let allowed = bytesBeforeCut.withLockedValue { left -> Int in
                guard let remaining = left else { return piece.count }
                let taken = min(remaining, piece.count)
                left = remaining - taken
                return taken
            }
            bytes.append(piece.prefix(allowed))
            if allowed < piece.count {
                cut = true
                break
            }
        }
        if cut {
            bytesBeforeCut.withLockedValue { $0 = nil }
            isOnline = false
            if !bytes.isEmpty { _ = try await server.uploadRange(bytes, of: file, at: body.offset) }
            throw TransportError(kind: .network, message: "the link went down during an upload")
        }
        return try await server.uploadRange(bytes, of: file, at: body.offset)
    }

    public func download(
        _ sha256: String, collection: String, scope: String?, recordId: String, from offset: Int64,
        receive: @escaping @Sendable (Data) async throws -> Void
    ) async throws {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        let bytes = try await server.file(sha256, collection: collection, scope: scope ?? "", recordId: recordId)
        var start = Int(offset)
        while start < bytes.count {
            let end = min(start + 100_000, bytes.count)
            try await receive(bytes.subdata(in: start..<end))
            start = end
        }
    }

    public func push(_ request: PushRequest) async throws -> PushResponse {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        pushes.withLockedValue { $0 += 1 }
        return await server.push(request)
    }

    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return await server.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
    }

    public func snapshot(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotResponse
    {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return SnapshotResponse(records: [], total: 0, continuation: nil, cursor: "")
    }

    public func health() async throws -> HealthResponse {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return HealthResponse(status: "ok", storage: "ok")
    }

    public func recordIdKey() async throws -> RecordIdKeyResponse {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        guard let keys = await server.recordIdKeys else {
            throw TransportError(kind: .server, status: 404, message: "no such route")
        }
        return keys
    }

    public func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return await server.heartbeat(heartbeat)
    }

    public func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return await server.reportFailures(report)
    }

    public func deliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return await server.deliveries(collection: collection, scope: scope, recordIds: recordIds)
    }

    public func retryDeliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        guard isOnline else { throw TransportError(kind: .network, message: "offline") }
        return await server.retryDeliveries(collection: collection, scope: scope, recordIds: recordIds)
    }
}
