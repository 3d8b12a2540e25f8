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
    /// Whether a save made online starts delivering the outbox in the background (see ``SyncEngine/save(_:at:)``).
    /// Off, only ``SyncEngine/sync(retrying:progress:)`` and its triggers deliver: for tests of the sync itself,
    /// and benchmarks.
    public var deliversAfterSave: Bool
    /// The collections whose record ids are derived from the user's keys for record ids, and how: after every
    /// sync that reached the server, records stored under provisional ids are renamed (see
    /// ``SyncEngine/settleRecordIds(_:)``). The field apps declare `.attendance`.
    public var recordIdSettlements: [RecordIdSettlement] = []
    /// The most bytes of files the server holds that the device keeps, so that screens show them without a
    /// download: past it, after a sync or a download, the least recently used give their bytes back (their records
    /// keep naming them, and a screen that asks downloads them again). Files waiting to upload are never counted
    /// nor given back. See ``SyncEngine/releaseFileBytes()``.
    public var keptFileBytes: Int64 = 256 * 1024 * 1024

    public init(
        deviceId: String, chunkSize: Int = 50, retryDelays: [Duration] = [.seconds(1), .seconds(2), .seconds(4)],
        appVersion: String = "outpost-sdk/\(OutpostVersion.current)", escalation: EscalationPolicy = EscalationPolicy(),
        deliversAfterSave: Bool = true
    ) {
        self.deviceId = deviceId
        self.chunkSize = chunkSize
        self.retryDelays = retryDelays
        self.appVersion = appVersion
        self.escalation = escalation
        self.deliversAfterSave = deliversAfterSave
    }
}

/// Delivers the outbox to the server: in chronological order, in chunks, exactly once.
///
/// All mutable engine state lives in this actor. Waits go through the injected clock and times come from
/// the injected `now`, so that tests drive both.
public actor SyncEngine {
    public nonisolated let store: LocalStore
    public nonisolated let configuration: SyncConfiguration
    let transport: any SyncTransport
    public nonisolated let clock: any Clock<Duration>
    /// The engine's time: every local write is stamped with it. Apps that derive a day from "now" read it here.
    public nonisolated let now: @Sendable () -> Date

    public internal(set) var status = SyncStatus()
    private var observers: [UUID: AsyncStream<SyncStatus>.Continuation] = [:]
    /// The delivery a save started, while it runs (see ``save(_:at:)``).
    private var delivery: Task<Void, Never>?
    /// A save arrived while the delivery ran: it runs once more.
    private var deliverAgain = false
    /// Callers of ``awaitDelivery(upTo:)``, woken when the delivery ends.
    private var deliveryWaiters: [UUID: AsyncStream<Void>.Continuation] = [:]
    /// The heartbeat a sync started, while it runs; a sync ending meanwhile sends one more after it.
    private var heartbeat: Task<Void, Never>?
    private var heartbeatAgain = false
    /// The probe a save started because the engine did not know yet whether the server is reachable.
    private var probing: Task<Bool, Never>?
    /// Records created while the connection was not known: saved as made offline, and settled online when the
    /// probe running at the time finds the server (see ``save(_:at:)``).
    private var unsettled: Set<RecordKey> = []
    /// Whether a push is on its way: what it carries may reach the server, so no queued entry is settled meanwhile.
    private var pushing = false
    /// The settlement running, which a sync lets end before it reads what to send.
    private var settling: Task<Bool, Never>?
    /// Records whose write the server last answered, in this process, by keeping an earlier one from elsewhere.
    private var keptElsewhere: Set<RecordKey> = []
    /// Whether the store holds files, so that the status counts the bytes waiting to upload; nil until looked at.
    var holdsFiles: Bool?

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

    /// Re-reads the pending, failed and refused counts from the store.
    public func refreshStatus() async throws {
        let counts = try await store.counts()
        status.pendingCount = counts.pending
        status.failedCount = counts.failed
        status.refusedCount = counts.refused
        if holdsFiles == nil { holdsFiles = try await store.holdsFiles() }
        if holdsFiles == true { status.pendingUploadBytes = try await store.pendingUploadBytes() }
        publish()
    }

    // MARK: Local actions

    /// Saves a local action durably and returns as soon as it is committed; it never waits on the network.
    ///
    /// The record is pending until a sync delivers it. When the device is online the save starts that
    /// delivery in the background (a ``sync(retrying:progress:)`` with its retries); ``awaitDelivery(upTo:)``
    /// waits for it with a bound, for a screen that wants the server's verdict when it comes quickly.
    ///
    /// Whether a new record is made offline (``LocalRecord/isOfflineEntry``) is what the engine knows at the
    /// moment of the save: the last probe, push or connectivity change. Before it knows anything, the record is
    /// saved as made offline and the save starts a probe; when that probe finds the server, the record is settled
    /// as made online, unless its write has already gone out (``awaitConnection(upTo:)`` waits for it).
    ///
    /// - Parameter time: when the action happened, when it was read before the save (a scan's tap); the
    ///   engine's time by default. A time before the device's last write is stamped just after it.
    @discardableResult
    public func save(_ write: LocalStore.Write, at time: Date? = nil) async throws -> LocalRecord {
        try await save(write, files: [:], at: time ?? now())
    }

    /// ``save(_:at:)`` of a write with `files` stored with it, by the field that names each.
    func save(_ write: LocalStore.Write, files: [String: StagedFile], at time: Date) async throws -> LocalRecord {
        let known = status.isConnectionKnown
        var write = write
        // Once the device holds the keys, a provisional id names the settled record.
        write.recordId = await currentId(of: write.recordId, in: write.collection, scope: write.scope ?? "")
        if !files.isEmpty { holdsFiles = true }
        let record = try await store.write(
            write, deviceId: configuration.deviceId, at: time, offline: !status.isOnline, files: files)
        // Files larger than the log's limit filled it: copied into the store and the log's space given back now,
        // not held until the next sync, which would then pay for it while it uploads.
        if files.values.reduce(0, { $0 + $1.reference.size }) > Int64(LocalStore.walSizeLimit) {
            try? await store.checkpoint()
        }
        try await refreshStatus()
        if !known {
            if record.isOfflineEntry { unsettled.insert(RecordKey(record.collection, record.scope, record.recordId)) }
            startProbe()
        } else if status.isOnline && configuration.deliversAfterSave {
            startDelivery()
        }
        return record
    }

    /// Whether the server's last answer to a write of this record, in this process, kept an earlier write from
    /// elsewhere in its place (`superseded`: a guest another door checked in first, a check-in made first on
    /// another of the person's devices). The record then shows the server's, and is synced; a screen says whose
    /// write stands rather than "synced". Ask by the id the record was saved under, or its settled id.
    public func wasKeptElsewhere(collection: String, scope: String = "", recordId: String) async -> Bool {
        if keptElsewhere.contains(RecordKey(collection, scope, recordId)) { return true }
        let current = await currentId(of: recordId, in: collection, scope: scope)
        return current != recordId && keptElsewhere.contains(RecordKey(collection, scope, current))
    }

    private func noteKeptElsewhere(_ tally: SyncTally) {
        keptElsewhere.subtract(tally.synced.union(tally.refused).union(tally.failed))
        keptElsewhere.formUnion(tally.superseded.intersection(tally.synced).subtracting(tally.refused))
    }

    /// Starts a probe in the background when the engine does not know yet whether the server is reachable, for
    /// an action that wants to know soon without waiting for it (``awaitConnection(upTo:)``).
    public func checkConnection() {
        if !status.isConnectionKnown { startProbe() }
    }

    /// Starts a probe in the background, unless one runs; when it finds the server, what waits is delivered.
    private func startProbe() {
        guard probing == nil else { return }
        probing = Task {
            let online = await probe(syncingPending: false)
            probing = nil
            let waiting = online && configuration.deliversAfterSave ? (try? await store.outbox.count()) ?? 0 : 0
            if waiting > 0 { startDelivery() }
            return online
        }
    }

    /// Waits until the engine knows whether the server is reachable: the probe a save started has answered or
    /// failed, or `bound` passed on the engine's clock (the probe goes on).
    ///
    /// - Returns: whether the connection is known.
    @discardableResult
    public func awaitConnection(upTo bound: Duration) async -> Bool {
        if let probing { await Bounded.wait(for: probing, upTo: bound, clock: clock) }
        return status.isConnectionKnown
    }

    /// Settles the records saved while the connection was not known, now that it is: made online when the
    /// server answered, left as made offline otherwise. While a push is out it waits for the push to end: an
    /// entry the server may have taken keeps the content it was sent with (see ``Outbox/settleOnline(_:)``).
    private func settleUnknownConnection(online: Bool) async {
        guard !unsettled.isEmpty, !pushing else { return }
        let keys = Array(unsettled)
        unsettled = []
        guard online else { return }
        let store = self.store
        let task = Task { (try? await store.outbox.settleOnline(keys)) != nil }
        settling = task
        let settled = await task.value
        if settling == task { settling = nil }
        if !settled { unsettled.formUnion(keys) }
    }

    /// Settles, once a push is over, the records a probe answering while it was out left unsettled.
    private func settleAfterPush() async {
        pushing = false
        if status.isConnectionKnown { await settleUnknownConnection(online: status.isOnline) }
    }

    /// Starts delivering the outbox in the background, unless a delivery runs; then that one runs once more
    /// when it ends, so that what was saved meanwhile goes too.
    package func startDelivery() {
        guard delivery == nil else {
            deliverAgain = true
            return
        }
        delivery = Task {
            repeat {
                deliverAgain = false
                _ = try? await sync()
            } while deliverAgain && !Task.isCancelled
            deliveryEnded()
        }
    }

    private func deliveryEnded() {
        delivery = nil
        for waiter in deliveryWaiters.values { waiter.finish() }
        deliveryWaiters = [:]
    }

    /// Waits until the background delivery ends, or `bound` passes on the engine's clock.
    ///
    /// - Returns: true when no delivery runs any more; false when the bound passed first (the delivery goes on).
    @discardableResult
    public func awaitDelivery(upTo bound: Duration) async -> Bool {
        guard delivery != nil else { return true }
        let id = UUID()
        let (ended, continuation) = AsyncStream.makeStream(of: Void.self)
        deliveryWaiters[id] = continuation
        let clock = self.clock
        let timer = Task {
            try? await clock.sleep(for: bound)
            continuation.finish()
        }
        for await _ in ended {}
        timer.cancel()
        deliveryWaiters[id] = nil
        return delivery == nil
    }

    /// Starts a heartbeat in the background (``sendHeartbeat()``), unless one runs; then one more follows it.
    func startHeartbeat() {
        guard heartbeat == nil else {
            heartbeatAgain = true
            return
        }
        heartbeat = Task {
            repeat {
                heartbeatAgain = false
                await sendHeartbeat()
            } while heartbeatAgain && !Task.isCancelled
            heartbeat = nil
        }
    }

    /// Waits until the heartbeat a sync started has been sent or has failed, or `bound` passes on the engine's
    /// clock: a process about to exit calls it, so that the monitor sees its last state.
    public func awaitHeartbeat(upTo bound: Duration) async {
        guard let heartbeat else { return }
        await Bounded.wait(for: heartbeat, upTo: bound, clock: clock)
    }

    /// Cancels a background delivery and waits for it to stop: what it had not delivered stays queued. A
    /// process about to exit calls it, so that no push is cut off mid-answer.
    public func stopDelivery() async {
        guard let delivery else { return }
        delivery.cancel()
        await delivery.value
    }

    // MARK: Connectivity

    /// Records a connectivity change; coming back online starts a sync of anything pending.
    package func setOnline(_ online: Bool) async {
        let cameOnline = online && !status.isOnline
        status.isOnline = online
        await settleUnknownConnection(online: online)
        // Counted again with the change: another process on the same store may have queued records meanwhile.
        if (try? await refreshStatus()) == nil { publish() }
        if cameOnline, (try? await store.outbox.count()) ?? 0 > 0 {
            _ = try? await sync()
        }
    }

    /// Asks the server whether it is reachable, and records the answer.
    ///
    /// - Parameter syncingPending: whether coming back online syncs what is pending, as ``setOnline(_:)`` does.
    ///   A caller that delivers on its own terms passes false, such as the probe a save starts (see
    ///   ``save(_:at:)``), which settles the records saved meanwhile and then starts their delivery.
    ///
    /// A server that answers with an error, or begins an answer and breaks off, is reachable: the device is
    /// online, and ``SyncStatus/serverProblem`` says what is wrong with the server. A probe whose task is
    /// cancelled before an answer changes nothing: the connection stays as it was known.
    @discardableResult
    package func probe(syncingPending: Bool = true) async -> Bool {
        let online: Bool
        let problem: String?
        do {
            _ = try await transport.health()
            (online, problem) = (true, nil)
        } catch let error as TransportError where error.kind != .network || error.reachedServer {
            (online, problem) = (true, Self.describe(error))
        } catch {
            // A probe given up on (its task cancelled, such as by a bound on it) learnt nothing.
            if Task.isCancelled { return status.isOnline }
            (online, problem) = (false, nil)
        }
        if status.serverProblem != problem {
            status.serverProblem = problem
            publish()
        }
        if syncingPending {
            await setOnline(online)
        } else {
            if online != status.isOnline || !status.isConnectionKnown {
                status.isOnline = online
                publish()
            }
            await settleUnknownConnection(online: online)
        }
        return online
    }

    /// What an app runs when it opens or comes back to the foreground: asks the server whether it is reachable
    /// and, when it is, starts delivering what waits from an earlier run. It returns once the server answered or
    /// failed to; the delivery goes on in the background (``awaitDelivery(upTo:)`` waits for it).
    ///
    /// - Returns: whether the server was reachable.
    @discardableResult
    public func resume() async -> Bool {
        let online = await probe(syncingPending: false)
        // Counted again: an earlier run, or another process on the store, may have queued records.
        if (try? await refreshStatus()) == nil { publish() }
        if online, (try? await store.outbox.count()) ?? 0 > 0 { startDelivery() }
        return online
    }

    // MARK: Sync

    /// How often a sync counts pending and failed records for ``status`` while chunks go out, in seconds.
    static let statusInterval: TimeInterval = 0.1

    /// Pushes the whole outbox in chronological order, chunk by chunk, applying each chunk's results as they
    /// come back.
    ///
    /// A network failure or a 5xx is retried after each of ``SyncConfiguration/retryDelays``; after the last,
    /// the queued records are marked failed with the error and the sync ends, to resume on the next trigger. A
    /// push that no answer began for within the transport's limit (``TransportError/answerTimedOut``) ends the
    /// sync at once the same way: each try would cost the whole limit again.
    /// - Parameter retrying: false to try each chunk once (a quick attempt after a local write).
    /// - Returns: what synced and what failed. A second call while one runs returns at once, `skipped`.
    public func sync(
        retrying: Bool = true, progress: (@Sendable (SyncProgress) -> Void)? = nil
    ) async throws
        -> SyncSummary
    {
        try await sync(only: nil, retrying: retrying, progress: progress)
    }

    /// ``sync(retrying:progress:)`` of the entries of `records` alone, or of all when nil.
    func sync(
        only records: Set<RecordKey>?, retrying: Bool = true, progress: (@Sendable (SyncProgress) -> Void)? = nil
    )
        async throws -> SyncSummary
    {
        guard !status.isSyncing else { return SyncSummary(skipped: true) }
        status.isSyncing = true
        // The counts as the sync starts, which include what another process on the store queued.
        if (try? await refreshStatus()) == nil { publish() }
        defer {
            status.isSyncing = false
            publish()
        }
        var run = SyncRun(total: records == nil ? try await store.outbox.count() : 0)
        if run.total > 0 { progress?(SyncProgress(sent: 0, total: run.total, chunk: 0)) }
        // Until what the push carried is marked sent, a probe answering meanwhile settles nothing; then what the
        // push did not carry is settled. A settlement already running ends before anything is read to be sent.
        pushing = true
        defer { pushing = false }
        if let settling { _ = await settling.value }
        do {
            try await store.outbox.restampFutureEntries(now: now(), maxLead: Self.futureAllowance)
            if run.total > 0 { await settleBeforeSending() }
            if let undelivered = try await deliverChunks(only: records, retrying: retrying, progress: progress, run: &run) {
                let summary = try await endUndelivered(undelivered, only: records, tally: run.tally, summary: run.summary)
                await settleAfterPush()
                return summary
            }
            await settleAfterPush()
        } catch {
            // What went out may have reached the server without its sending being stored: the records saved
            // while the connection was not known stay as made offline, as they may have gone.
            unsettled = []
            // The counts were last taken up to a tenth of a second ago: take them again for the status.
            try? await refreshStatus()
            throw error
        }
        var summary = run.summary
        let tally = run.tally
        summary.superseded = tally.supersededCount
        noteKeptElsewhere(tally)
        summary.synced = tally.synced.subtracting(tally.failed).subtracting(tally.refused).count - summary.superseded
        summary.refused = tally.refused.count
        summary.failed = tally.failed.subtracting(tally.refused).count
        summary.atRelay = tally.held.subtracting(tally.refused).subtracting(tally.failed).count
        summary.reasons = tally.reasonsByFrequency
        status.lastSyncAt = now()
        try await refreshStatus()
        if summary.chunks > 0 { try? await store.checkpoint() }
        await afterSync()
        return summary
    }

    /// Pushes the queued entries (of `records` alone, when given) chunk by chunk, in order, and stores each
    /// answer.
    ///
    /// One chunk's answer is stored while the next chunk travels, and the next chunk is read while this one
    /// travels: device and server work at the same time instead of in turn. A chunk still goes out only after the
    /// server answered the one before, so the server sees the mutations in order. Were the device to stop before
    /// an answer is stored, the chunk is sent again and the server answers `duplicate`.
    ///
    /// - Returns: nil once every chunk is answered and every answer stored; the error of a push that could not
    ///   be delivered, with every answer before it stored.
    private func deliverChunks(
        only records: Set<RecordKey>?, retrying: Bool, progress: (@Sendable (SyncProgress) -> Void)?, run: inout SyncRun
    ) async throws -> TransportError? {
        var answer = StoringAnswer()
        do {
            var chunk = try await store.outbox.chunk(limit: configuration.chunkSize, only: records)
            while true {
                if chunk.isEmpty {
                    // Every answer stored, what is still pending after the last entry sent was written meanwhile.
                    // (An entry sent and kept queued, refused for a time the device can outgrow, waits for the
                    // next sync.)
                    try await answer.settle()
                    chunk = try await store.outbox.chunk(after: run.lastSent, limit: configuration.chunkSize, only: records)
                    if chunk.isEmpty { return nil }
                }
                let lastSeq = chunk.last?.seq ?? 0
                run.lastSent = max(run.lastSent, lastSeq)
                let requeues = store.requeues.withLockedValue { $0 }
                async let following = store.outbox.chunk(after: lastSeq, limit: configuration.chunkSize, only: records)
                let response: PushResponse
                do {
                    // A record's files go before the mutation that names them: the server takes it only then.
                    try await uploadFiles(of: chunk, retrying: retrying)
                    let request = PushRequest(deviceId: configuration.deviceId, mutations: chunk.map(\.mutation))
                    let (sent, total, chunks) = (run.sent, max(run.total, run.sent + chunk.count), run.summary.chunks)
                    response = try await push(request, retrying: retrying) { wait, reason in
                        progress?(SyncProgress(sent: sent, total: total, chunk: chunks, retrying: SyncProgress.Retry(wait: wait, reason: reason)))
                    }
                } catch let error as TransportError {
                    _ = try? await following
                    try await answer.settle()
                    return error
                }
                // Each answer must be about the mutation in its place: one about another leaves both unconfirmed.
                guard response.results.count == chunk.count,
                    zip(chunk, response.results).allSatisfy({ $0.mutation.idempotencyKey == $1.idempotencyKey })
                else {
                    _ = try? await following
                    throw TransportError(kind: .invalidResponse, message: "the server answered for other records than it was sent")
                }
                let pairs = Array(zip(chunk, response.results))
                // Answers are stored in the order they came.
                try await answer.settle()
                answer.start(pairs, in: store, at: now())
                try await count(pairs, progress: progress, run: &run)
                chunk = try await following
                if store.requeues.withLockedValue({ $0 }) != requeues {
                    // A retry put entries back while this chunk was out; they may be older than the chunk read
                    // ahead, and go out first. (One put back by another process goes out at the end.)
                    try await answer.settle()
                    chunk = try await store.outbox.chunk(limit: configuration.chunkSize, only: records)
                }
            }
        } catch {
            // An answer being stored finishes first: the sync ends with the store settled.
            await answer.abandon()
            throw error
        }
    }

    /// Counts a chunk's answers into `run` and tells the status and `progress`.
    private func count(
        _ pairs: [(OutboxEntry, MutationResult)], progress: (@Sendable (SyncProgress) -> Void)?, run: inout SyncRun
    ) async throws {
        run.tally.count(pairs)
        run.sent += pairs.count
        run.summary.chunks += 1
        status.lastSyncAt = now()
        // The pending records are counted at most ten times a second, as often as a person can read it, not
        // after every chunk: counting costs a drain time. The count after the last chunk is exact.
        if now().timeIntervalSince(run.statusCounted) >= Self.statusInterval {
            try await refreshStatus()
            run.statusCounted = now()
        }
        progress?(SyncProgress(sent: run.sent, total: max(run.total, run.sent), chunk: run.summary.chunks))
    }

    /// Ends a sync whose push could not be delivered: the entries stay queued, marked failed with the reason,
    /// so that a refused token loses nothing and they go out at the first sync after a sign-in.
    ///
    /// A device id that speaks for another user is no failure a resend outgrows: the entries are set aside and
    /// their records rejected with the server's reason, until an organizer releases the device and the person
    /// retries them (``retry(collection:scope:recordId:)``).
    ///
    /// - Parameter records: the records the sync was of, when not the whole outbox: the summary counts them alone.
    private func endUndelivered(
        _ error: TransportError, only records: Set<RecordKey>?, tally: SyncTally, summary: SyncSummary
    ) async throws -> SyncSummary {
        var tally = tally
        var summary = summary
        let owned = error.wire?.code == .deviceOwned
        let message = Self.describe(error)
        let rejectedBefore = owned ? try await store.counts().refused : 0
        try await store.outbox.markUndelivered(
            error: message, refusedAs: owned ? WireError.Code.deviceOwned.rawValue : nil, at: now(), only: records)
        summary.requiresSignIn = error.requiresSignIn
        if error.requiresSignIn { status.needsSignIn = true }
        let counts = try await store.counts()
        summary.failed = records.map { $0.subtracting(tally.synced).subtracting(tally.refused).count } ?? counts.failed
        tally.reasons[message, default: 0] += 1
        summary.reasons = tally.reasonsByFrequency
        summary.superseded = tally.supersededCount
        noteKeptElsewhere(tally)
        summary.synced = tally.synced.subtracting(tally.refused).count - summary.superseded
        summary.refused = tally.refused.count + (owned ? max(0, counts.refused - rejectedBefore) : 0)
        try await refreshStatus()
        await afterSync()
        return summary
    }

    /// One push, tried again after each of the retry delays while it fails for a reason a wait can outgrow;
    /// `waiting` is told before each wait.
    private func push(
        _ request: PushRequest, retrying: Bool, waiting: (_ wait: Duration, _ reason: String) -> Void = { _, _ in }
    ) async throws -> PushResponse {
        try await exchange(retrying: retrying, waiting: waiting) { [transport] in try await transport.push(request) }
    }

    /// One exchange of a sync with the server, tried again after each of the retry delays while it fails for a
    /// reason a wait can outgrow; `waiting` is told before each wait. What it finds of the connection is in
    /// ``status``.
    func exchange<T: Sendable>(
        retrying: Bool, waiting: (_ wait: Duration, _ reason: String) -> Void = { _, _ in },
        _ call: @Sendable () async throws -> T
    ) async throws -> T {
        var attempt = 0
        while true {
            do {
                let response = try await call()
                if !status.isOnline || status.serverProblem != nil || status.lastFailure != nil || status.needsSignIn {
                    status.isOnline = true
                    status.serverProblem = nil
                    status.lastFailure = nil
                    status.needsSignIn = false
                    publish()
                }
                return response
            } catch var error as TransportError {
                error = await diagnose(error)
                status.lastFailure = Self.describe(error)
                publish()
                guard error.isRetryable, !error.answerTimedOut, retrying, attempt < configuration.retryDelays.count
                else { throw error }
                waiting(configuration.retryDelays[attempt], Self.describe(error))
                try await clock.sleep(for: configuration.retryDelays[attempt])
                attempt += 1
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                throw TransportError.unreachable()
            }
        }
    }

    /// Records in ``status`` what a failed exchange says of the connection, and returns the error to report.
    ///
    /// An exchange that no answer began for within the transport's limit leaves the connection not known.
    /// An exchange that found no server while the device counted as online (or before it knew) is checked with a
    /// probe: when the server answers it, the network works and the connection broke during the exchange
    /// (``TransportError/droppedExchange(underlying:)``); otherwise the device is offline. A server that answered
    /// with an error is reachable, and its trouble is ``SyncStatus/serverProblem``.
    private func diagnose(_ error: TransportError) async -> TransportError {
        switch error.kind {
        case .network where error.answerTimedOut:
            // No answer within the whole limit: a probe would wait as long again, and whether the server is there
            // (or a portal that takes every connection) is not known until something answers.
            if status.isConnectionKnown || status.serverProblem != nil {
                status.isOnline = false
                status.isConnectionKnown = false
                status.serverProblem = nil
                publish()
            }
        case .network where (status.isOnline || !status.isConnectionKnown) && !error.reachedServer:
            if (try? await transport.health()) != nil { return .droppedExchange(underlying: error) }
            status.isOnline = false
            status.serverProblem = nil
            publish()
        case .network where error.reachedServer:
            // The server was reached, and the exchange broke: the network works.
            if !status.isOnline {
                status.isOnline = true
                publish()
            }
        case .network:
            break
        case .server where error.isRetryable, .invalidResponse:
            let problem = Self.describe(error)
            if status.serverProblem != problem || !status.isOnline {
                status.isOnline = true
                status.serverProblem = problem
                publish()
            }
        case .server:
            break
        }
        return error
    }

    // MARK: Pull

    /// Brings what changed on the server in `collection` (within `scope`) since the last pull into the store,
    /// page by page, each page with its cursor in one transaction; queued local changes stay on top. The pages
    /// are read from streams of pulls (``BulkSyncTransport/pullStream(collection:scope:cursor:limit:pages:)``).
    ///
    /// - Returns: how many records changed.
    /// - Throws: ``TransportError`` when the server cannot be reached; what was already merged stays.
    @discardableResult
    public func pull(collection: String, scope: String? = nil, pageSize: Int = 500) async throws -> Int {
        let setting = LocalStore.pullCursorSetting(collection: collection, scope: scope ?? "")
        var cursor = try await store.setting(setting)
        var merged = 0
        // The pages come in streams of pulls, a round trip and a request for many pages instead of one each.
        let transport = transport
        let pulls = PullStream<PullResponse>(cursor: { $0.cursor }) { cursor in
            transport.bulkPullStream(
                collection: collection, scope: scope, cursor: cursor, limit: pageSize, pages: Self.pullPagesPerStream)
        }
        defer { pulls.close() }
        while true {
            let page: PullResponse
            do {
                page = try await pulls.page(after: cursor)
            } catch let error as TransportError {
                throw await diagnose(error)
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

    /// How far ahead of the device clock a queued entry's client time may be before it is stamped again: more
    /// than a write's own lead (``LocalStore/maxClientTimeLead``), so that only writes made while the clock
    /// had jumped ahead are.
    static let futureAllowance = Duration.seconds(3600)

    /// Sends one record again, alone: its rejected entries go back in the queue as they are (a refused record
    /// the user sends unchanged, say once the organizer reinstated a guest), or, for a conflict, the device's
    /// values of the conflicting fields go on top of the server's (see ``resendOverServerValue(collection:scope:recordId:)``).
    /// Only that record's entries are pushed.
    ///
    /// A nil `collection` or `scope` matches any: every record with this id there is retried.
    /// - Throws: ``ClientError`` `notFound` when the device holds no such record.
    public func retry(collection: String? = nil, scope: String? = nil, recordId: String) async throws -> SyncSummary {
        let records = try await store.records(collection: collection, scope: scope, recordId: recordId)
        guard !records.isEmpty else { throw ClientError(.notFound, "no record \(recordId) on this device") }
        for record in records where record.conflict != nil {
            _ = try await resendOverServerValue(collection: record.collection, scope: record.scope, recordId: record.recordId, delivering: false)
        }
        try await store.outbox.requeue(collection: collection, scope: scope, recordId: recordId)
        // A file the server refused is tried again with its record, under the collection's limits as they are now.
        for record in records { try await store.retryRefusedFiles(of: RecordKey(record.collection, record.scope, record.recordId)) }
        return try await sync(only: Set(records.map { RecordKey($0.collection, $0.scope, $0.recordId) }))
    }

    /// "Sync all": sends everything waiting, failed records included. Refused records wait for the user and
    /// are not sent again (see ``retry(collection:scope:recordId:)``, ``discard(collection:scope:recordId:)``).
    public func retryAll(progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws -> SyncSummary {
        try await sync(progress: progress)
    }

    // MARK: Refused records

    /// Gives up a refused record: its refused writes leave the queue with a sealed copy kept on the device
    /// for audit, and the record leaves the lists. A record the server holds comes back with the next pull.
    /// - Throws: ``ClientError`` `notFound`, or `invalidInput` when the record was not refused.
    public func discard(collection: String, scope: String = "", recordId: String) async throws {
        try await store.outbox.discardRefused(collection: collection, scope: scope, recordId: recordId, at: now())
        try await refreshStatus()
        _ = try? await refreshPersistentFailureNotice()
    }

    /// Settles a conflict with the server's values: the record takes them and is synced again.
    /// - Throws: ``ClientError`` `notFound`, or `invalidInput` when the record holds no conflict.
    @discardableResult
    public func keepServerValue(collection: String, scope: String = "", recordId: String) async throws -> LocalRecord {
        let record = try await store.outbox.keepServerValue(collection: collection, scope: scope, recordId: recordId)
        try await refreshStatus()
        return record
    }

    /// Settles a conflict with the device's values: they are written again on top of the server's version and
    /// delivered like any save.
    /// - Throws: ``ClientError`` `notFound`, or `invalidInput` when the record holds no conflict.
    @discardableResult
    public func resendOverServerValue(collection: String, scope: String = "", recordId: String) async throws -> LocalRecord {
        try await resendOverServerValue(collection: collection, scope: scope, recordId: recordId, delivering: true)
    }

    private func resendOverServerValue(collection: String, scope: String, recordId: String, delivering: Bool) async throws -> LocalRecord {
        guard let record = try await store.record(collection: collection, scope: scope, recordId: recordId) else {
            throw ClientError(.notFound, "no record \(recordId) on this device")
        }
        guard let conflict = record.conflict else {
            throw ClientError(.invalidInput, "record \(recordId) has no conflict to settle")
        }
        var fields: [String: JSONValue] = [:]
        for field in conflict.fields { fields[field] = record.fields[field] ?? .null }
        let write = LocalStore.Write(collection: collection, scope: scope.isEmpty ? nil : scope, recordId: recordId, fields: fields)
        return delivering
            ? try await save(write) : try await store.write(write, deviceId: configuration.deviceId, at: now(), offline: !status.isOnline)
    }

    /// A short reason for a record's failure, fit for a badge.
    static func describe(_ error: TransportError) -> String {
        switch error.kind {
        case .network where error.reachedServer || error.answerTimedOut:
            // Such as "The connection to the server broke before it answered", "The server did not answer
            // within 30 s".
            return error.message.prefix(1).uppercased() + error.message.dropFirst()
        case .network:
            return "The server could not be reached"
        case .server where error.requiresSignIn:
            let reason = TransportError.signInAgainMessage
            return reason.prefix(1).uppercased() + reason.dropFirst()
        case .server where error.wire?.code == .deviceOwned:
            // The server's own words say what to do: an organizer releases the device.
            return error.wire?.message ?? "this device id belongs to another user"
        case .server:
            if let wire = error.wire { return "Server refused the sync (\(error.status ?? 0)): \(wire.message)" }
            return "Server error (\(error.status ?? 0))"
        case .invalidResponse:
            return "The server sent an answer this app does not understand"
        }
    }
}

/// What one sync has sent and been answered so far.
struct SyncRun {
    var tally = SyncTally()
    var summary = SyncSummary()
    /// The entries queued as the sync started; 0 for a sync of some records alone.
    var total: Int
    var sent = 0
    /// The highest local sequence sent.
    var lastSent: Int64 = 0
    /// When the pending records were last counted for the status.
    var statusCounted = Date.distantPast
}

/// The answer of one chunk, stored while the next chunk travels.
struct StoringAnswer {
    private var storing: Task<Void, any Error>?

    /// Waits until the answer being stored, if any, is stored.
    ///
    /// - Throws: what storing it threw.
    mutating func settle() async throws {
        try await storing?.value
        storing = nil
    }

    /// Starts storing `pairs`; the answer before must be settled.
    mutating func start(_ pairs: [(OutboxEntry, MutationResult)], in store: LocalStore, at date: Date) {
        precondition(storing == nil, "an answer is stored only after the one before")
        storing = Task { try await store.outbox.apply(pairs, at: date) }
    }

    /// Waits until the answer being stored, if any, is stored or has failed.
    mutating func abandon() async {
        _ = try? await storing?.value
        storing = nil
    }
}

/// What a sync's answers said, record by record, for its summary: the last answer about a record decides.
struct SyncTally {
    var synced = Set<RecordKey>()
    /// Refused for a time the device can outgrow; still queued.
    var failed = Set<RecordKey>()
    /// Refused, or kept by the server in a conflict.
    var refused = Set<RecordKey>()
    /// Synced, the server keeping an earlier write from elsewhere.
    var superseded = Set<RecordKey>()
    /// Held by a venue relay, which the server has not answered for yet; still queued.
    var held = Set<RecordKey>()

    /// The records the server last answered without taking their write, keeping an earlier one.
    var supersededCount: Int { superseded.intersection(synced).subtracting(refused).count }
    /// Each reason given, with how many answers gave it.
    var reasons: [String: Int] = [:]

    mutating func count(_ answers: [(OutboxEntry, MutationResult)]) {
        for (entry, result) in answers {
            let key = RecordKey(entry.mutation)
            switch result.settledStatus {
            case .applied, .duplicate:
                synced.insert(key)
                superseded.remove(key)
                held.remove(key)
            case .superseded:
                synced.insert(key)
                superseded.insert(key)
                held.remove(key)
            case .rejected where result.error?.code == .heldAtRelay:
                held.insert(key)
                synced.remove(key)
            case .conflict:
                refused.insert(key)
                synced.remove(key)
                reasons["Conflict on a protected field", default: 0] += 1
            case .rejected where Outbox.isRetriable(result.error?.code):
                failed.insert(key)
                synced.remove(key)
                reasons[Outbox.retriableMessage(result), default: 0] += 1
            case .rejected:
                refused.insert(key)
                synced.remove(key)
                reasons[result.error?.message ?? "refused by the server", default: 0] += 1
            }
        }
    }

    /// The reasons, the most frequent first; reasons as frequent as each other in alphabetical order.
    var reasonsByFrequency: [String] { reasons.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.map(\.key) }
}
