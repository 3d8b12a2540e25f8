import Foundation
import OutpostProtocol

/// How the engine pushes.
public struct SyncConfiguration: Sendable {
    /// This device's id; part of every idempotency key.
    public var deviceId: String
    /// Mutations per push.
    public var chunkSize: Int
    /// The waits between retries of a failed push: 1 s, 2 s, 4 s, then give up until the next trigger.
    public var retryDelays: [Duration]
    /// What the heartbeat names as the app's version.
    public var appVersion: String
    /// When records count as persistently failing, and whether they are reported to the server.
    public var escalation: EscalationPolicy

    public init(
        deviceId: String, chunkSize: Int = 50, retryDelays: [Duration] = [.seconds(1), .seconds(2), .seconds(4)],
        appVersion: String = "outpost-sdk/\(OutpostVersion.current)", escalation: EscalationPolicy = EscalationPolicy()
    ) {
        self.deviceId = deviceId
        self.chunkSize = chunkSize
        self.retryDelays = retryDelays
        self.appVersion = appVersion
        self.escalation = escalation
    }
}

/// Delivers the outbox to the server: in chronological order, in chunks, exactly once.
///
/// All mutable engine state lives in this actor. Waits go through the injected clock and times come from
/// the injected `now`, so that tests drive both.
public actor SyncEngine {
    public let store: LocalStore
    public nonisolated let configuration: SyncConfiguration
    let transport: any SyncTransport
    let clock: any Clock<Duration>
    /// The engine's time: every local write is stamped with it. Apps that derive a day from "now" read it here.
    public nonisolated let now: @Sendable () -> Date

    public internal(set) var status = SyncStatus()
    private var observers: [UUID: AsyncStream<SyncStatus>.Continuation] = [:]

    public init(
        store: LocalStore,
        transport: any SyncTransport,
        configuration: SyncConfiguration,
        clock: any Clock<Duration> = ContinuousClock(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.store = store
        self.transport = transport
        self.configuration = configuration
        self.clock = clock
        self.now = now
    }

    // MARK: Status

    /// Every status from now on, starting with the current one. Ends when the consumer stops iterating.
    public func statusUpdates() -> AsyncStream<SyncStatus> {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncStatus.self, bufferingPolicy: .bufferingNewest(16))
        let id = UUID()
        observers[id] = continuation
        continuation.yield(status)
        continuation.onTermination = { [weak self] _ in
            Task { await self?.removeObserver(id) }
        }
        return stream
    }

    private func removeObserver(_ id: UUID) {
        observers[id] = nil
    }

    func publish() {
        for continuation in observers.values { continuation.yield(status) }
    }

    /// Re-reads the pending and failed counts from the store.
    public func refreshStatus() async throws {
        let counts = try await store.counts()
        status.pendingCount = counts.pending
        status.failedCount = counts.failed
        publish()
    }

    // MARK: Local actions

    /// Saves a local action durably, then returns; the record is pending until a sync delivers it.
    @discardableResult
    public func save(_ write: LocalStore.Write) async throws -> LocalRecord {
        let record = try await store.write(
            write, deviceId: configuration.deviceId, at: now(), offline: !status.isOnline)
        try await refreshStatus()
        return record
    }

    /// Saves a local action durably, then, when the device is online, makes one quick attempt to push the
    /// outbox (no retries, so the caller never waits on a bad network).
    ///
    /// - Returns: the record as it stands after the attempt: synced, still pending, or failed with a reason.
    public func saveAndPush(_ write: LocalStore.Write) async throws -> LocalRecord {
        let saved = try await save(write)
        guard status.isOnline else { return saved }
        _ = try? await sync(retrying: false)
        return try await store.record(collection: write.collection, scope: write.scope ?? "", recordId: write.recordId) ?? saved
    }

    // MARK: Connectivity

    /// Records a connectivity change; coming back online starts a sync of anything pending.
    public func setOnline(_ online: Bool) async {
        let cameOnline = online && !status.isOnline
        status.isOnline = online
        // Counted again with the change: another process on the same store may have queued records meanwhile.
        if (try? await refreshStatus()) == nil { publish() }
        if cameOnline, (try? await store.outboxCount()) ?? 0 > 0 {
            _ = try? await sync()
        }
    }

    /// Asks the server whether it is reachable, and records the answer.
    ///
    /// - Parameter syncingPending: whether coming back online syncs what is pending, as ``setOnline(_:)`` does.
    ///   An action about to save a record passes false: it probes only to know whether the record is created
    ///   offline, and ``saveAndPush(_:)`` pushes after the save, so that saving never waits on a whole queue
    ///   and its retries.
    @discardableResult
    public func probe(syncingPending: Bool = true) async -> Bool {
        let online = (try? await transport.health()) != nil
        if syncingPending {
            await setOnline(online)
        } else if online != status.isOnline {
            status.isOnline = online
            publish()
        }
        return online
    }

    // MARK: Sync

    /// How often a sync counts pending and failed records for ``status`` while chunks go out, in seconds.
    static let statusInterval: TimeInterval = 0.1

    /// Pushes the whole outbox in chronological order, chunk by chunk, applying each chunk's results as they
    /// come back.
    ///
    /// A network failure or a 5xx is retried after each of ``SyncConfiguration/retryDelays``; after the last,
    /// the queued records are marked failed with the error and the sync ends, to resume on the next trigger.
    /// - Parameter retrying: false to try each chunk once (a quick attempt after a local write).
    /// - Returns: what synced and what failed. A second call while one runs returns at once, `skipped`.
    public func sync(retrying: Bool = true, progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws
        -> SyncSummary
    {
        guard !status.isSyncing else { return SyncSummary(skipped: true) }
        status.isSyncing = true
        // The counts as the sync starts, which include what another process on the store queued.
        if (try? await refreshStatus()) == nil { publish() }
        defer {
            status.isSyncing = false
            publish()
        }
        var summary = SyncSummary()
        var reasons: [String: Int] = [:]
        let total = try await store.outboxCount()
        var sent = 0
        var synced = Set<RecordKey>()
        var failed = Set<RecordKey>()
        var statusCounted = Date.distantPast
        // One chunk's answer is stored while the next chunk travels, and the next chunk is read while this one
        // travels: device and server work at the same time instead of in turn. A chunk still goes out only
        // after the server answered the one before, so the server sees the mutations in order. Were the
        // device to stop before an answer is stored, the chunk is sent again and the server answers
        // `duplicate`.
        var storing: Task<Void, any Error>?

        do {
            var chunk = try await store.nextChunk(limit: configuration.chunkSize)
            while true {
                if chunk.isEmpty {
                    // Every answer stored, what is still pending was written, or put back by a retry, meanwhile.
                    try await storing?.value
                    storing = nil
                    chunk = try await store.nextChunk(limit: configuration.chunkSize)
                    if chunk.isEmpty { break }
                }
                let request = PushRequest(deviceId: configuration.deviceId, mutations: chunk.map(\.mutation))
                let lastSeq = chunk.last?.seq ?? 0
                let requeues = store.requeues.withLock { $0 }
                async let following = store.nextChunk(after: lastSeq, limit: configuration.chunkSize)
                let response: PushResponse
                do {
                    response = try await push(request, retrying: retrying)
                } catch let error as TransportError {
                    _ = try? await following
                    try await storing?.value
                    storing = nil
                    let message = Self.describe(error)
                    try await store.markUndelivered(error: message, at: now())
                    summary.failed = try await store.counts().failed
                    reasons[message, default: 0] += 1
                    summary.reasons = reasons.sorted { $0.value > $1.value }.map(\.key)
                    summary.synced = synced.count
                    try await refreshStatus()
                    await afterSync()
                    return summary
                }
                guard response.results.count == chunk.count else {
                    _ = try? await following
                    throw TransportError(kind: .invalidResponse, message: "the server answered a different number of results")
                }
                let pairs = Array(zip(chunk, response.results))
                // Answers are stored in the order they came.
                try await storing?.value
                let store = self.store
                let answeredAt = now()
                storing = Task { try await store.apply(pairs, at: answeredAt) }
                for (entry, result) in pairs {
                    let key = RecordKey(entry.mutation)
                    switch result.status == .duplicate ? (result.originalStatus ?? .applied) : result.status {
                    case .applied, .duplicate:
                        synced.insert(key)
                    case .conflict:
                        failed.insert(key)
                        synced.remove(key)
                        reasons["Conflict on a protected field", default: 0] += 1
                    case .rejected:
                        failed.insert(key)
                        synced.remove(key)
                        reasons[result.error?.message ?? "rejected by the server", default: 0] += 1
                    }
                }
                sent += chunk.count
                summary.chunks += 1
                status.lastSyncAt = now()
                // Counting the pending records took a tenth of a drain when done after every chunk; ten times a
                // second is as often as a person can read it. The count after the last chunk is exact.
                if now().timeIntervalSince(statusCounted) >= Self.statusInterval {
                    try await refreshStatus()
                    statusCounted = now()
                }
                progress?(SyncProgress(sent: sent, total: max(total, sent), chunk: summary.chunks))
                chunk = try await following
                if store.requeues.withLock({ $0 }) != requeues {
                    // A retry put entries back while this chunk was out; they may be older than the chunk read
                    // ahead, and go out first. (One put back by another process goes out at the end.)
                    try await storing?.value
                    storing = nil
                    chunk = try await store.nextChunk(limit: configuration.chunkSize)
                }
            }
        } catch {
            // An answer being stored finishes first: the sync ends with the store settled.
            _ = try? await storing?.value
            storing = nil
            // The counts were last taken up to a tenth of a second ago: take them again for the status.
            try? await refreshStatus()
            throw error
        }
        summary.synced = synced.subtracting(failed).count
        summary.failed = failed.count
        summary.reasons = reasons.sorted { $0.value > $1.value }.map(\.key)
        status.lastSyncAt = now()
        try await refreshStatus()
        if summary.chunks > 0 { try? await store.checkpoint() }
        await afterSync()
        return summary
    }

    private func push(_ request: PushRequest, retrying: Bool) async throws -> PushResponse {
        var attempt = 0
        while true {
            do {
                let response = try await transport.push(request)
                if !status.isOnline {
                    status.isOnline = true
                    publish()
                }
                return response
            } catch let error as TransportError {
                if error.kind == .network, status.isOnline {
                    status.isOnline = false
                    publish()
                }
                guard error.isRetryable, retrying, attempt < configuration.retryDelays.count else { throw error }
                try await clock.sleep(for: configuration.retryDelays[attempt])
                attempt += 1
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                throw TransportError(kind: .network, message: "the server could not be reached")
            }
        }
    }

    // MARK: Pull

    /// Brings what changed on the server in `collection` (within `scope`) since the last pull into the store,
    /// page by page, each page with its cursor in one transaction; queued local changes stay on top. The pages
    /// are read from streams of pulls (``SyncTransport/pulls(collection:scope:cursor:limit:pages:)``).
    ///
    /// - Returns: how many records changed.
    /// - Throws: ``TransportError`` when the server cannot be reached; what was already merged stays.
    @discardableResult
    public func pull(collection: String, scope: String? = nil, pageSize: Int = 500) async throws -> Int {
        let setting = "pull_cursor:\(collection):\(scope ?? "")"
        var cursor = try await store.setting(setting)
        var merged = 0
        // The pages come in streams of pulls, a round trip and a request for many pages instead of one each.
        let transport = transport
        let pulls = PullStream<PullResponse>(cursor: { $0.cursor }) { cursor in
            transport.pulls(
                collection: collection, scope: scope, cursor: cursor, limit: pageSize, pages: Self.pullPagesPerStream)
        }
        defer { pulls.close() }
        while true {
            let page: PullResponse
            do {
                page = try await pulls.page(after: cursor)
            } catch let error as TransportError {
                if error.kind == .network, status.isOnline {
                    status.isOnline = false
                    publish()
                }
                throw error
            }
            merged += try await store.merge(page.changes, cursorSetting: setting, cursor: page.cursor)
            cursor = page.cursor
            if !page.hasMore || page.changes.isEmpty { break }
        }
        try await refreshStatus()
        return merged
    }

    /// Pages one stream of pulls may carry; a longer pull opens another from its cursor.
    package static let pullPagesPerStream = 20

    /// Sends one record's queued mutations again, rejected ones included.
    ///
    /// A nil `collection` or `scope` matches any: every record with this id there is retried.
    /// - Throws: ``ClientError`` `notFound` when the device holds no such record.
    public func retry(collection: String? = nil, scope: String? = nil, recordId: String) async throws -> SyncSummary {
        guard try await store.containsRecord(recordId, collection: collection, scope: scope) else {
            throw ClientError(.notFound, "no record \(recordId) on this device")
        }
        try await store.requeue(collection: collection, scope: scope, recordId: recordId)
        return try await sync()
    }

    /// "Sync all": requeues every set-aside mutation and syncs.
    public func retryAll() async throws -> SyncSummary {
        try await store.requeue()
        return try await sync()
    }

    /// A short reason for a record's failure, fit for a badge.
    static func describe(_ error: TransportError) -> String {
        switch error.kind {
        case .network:
            return "The server could not be reached"
        case .server:
            if let wire = error.wire { return "Server refused the sync (\(error.status ?? 0)): \(wire.message)" }
            return "Server error (\(error.status ?? 0))"
        case .invalidResponse:
            return "The server sent an answer this app does not understand"
        }
    }
}
