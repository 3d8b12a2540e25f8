import Foundation
import Logging
import OutpostProtocol

/// Outpost on a device: the store, the sync engine and everything a running app repeats, in one object an app
/// makes at launch and keeps for its lifetime.
///
/// ```swift
/// var configuration = Outpost.Configuration(
///     location: .perUser(directory: applicationSupport.appendingPathComponent("Outpost")),
///     server: URL(string: "https://sync.example.org")!, transport: .urlSession())
/// configuration.schema = .fieldApps
/// let outpost = try await Outpost(configuration, credentials: identityProvider)
/// if await outpost.status.signIn == .signedOut { try await outpost.signIn(token: tokenFromTheSignInScreen) }
/// await outpost.start()
/// ```
///
/// Once started, and while someone is signed in, it:
/// - delivers at once what an earlier run left queued, when the server answers;
/// - follows connectivity (``Configuration/connectivity``), and syncs whenever the server comes back;
/// - tries again what waits every ``Configuration/retryInterval``;
/// - reports to the sync monitor every ``Configuration/heartbeatInterval``, naming the open event
///   (``setCurrentEvent(_:)``), so that the organizer sees the device;
/// - looks for records failing for too long at start and every ``Configuration/escalationInterval``, raising
///   the notice in ``status`` and reporting them to the server;
/// - refreshes its downloaded reference data every ``Configuration/referenceRefreshInterval``.
///
/// Tokens come from ``signIn(token:)`` and, renewed before they expire or after the server refuses one, from the
/// app's ``CredentialsProvider``; every one is saved, sealed, in the store, whichever transport sends it.
/// ``status`` says whether the device is signed in, renewing or needs the person to sign in again.
public actor Outpost {
    public nonisolated let configuration: Configuration
    let credentials: (any CredentialsProvider)?
    let logger: Logger

    /// The signed-in person's device, while someone is signed in.
    var device: Device?
    /// What the runtime runs for the device while started: the scheduler and its launch work.
    var running: Task<Void, Never>?
    /// Forwards the engine's statuses to ``statusUpdates()`` while the device is open.
    var forwarding: Task<Void, Never>?
    var isStarted = false
    var isClosed = false
    let signedOutStatus: SyncStatus = {
        var status = SyncStatus()
        status.signIn = .signedOut
        return status
    }()
    var statusObservers: [UUID: AsyncStream<SyncStatus>.Continuation] = [:]
    var tokenObservers: [UUID: AsyncStream<String?>.Continuation] = [:]

    /// Opens the store of whoever is signed in on this device, if anyone is; nothing runs until ``start()``.
    ///
    /// - Parameter credentials: the app's identity provider, asked for a fresh token before the current one
    ///   expires and when the server refuses it; without one, a refused token waits for ``signIn(token:)``.
    /// - Throws: ``ClientError`` when the store cannot be opened (`storeUnavailable`, `keyUnavailable`,
    ///   `storeCorrupt`).
    public init(_ configuration: Configuration, credentials: (any CredentialsProvider)? = nil) async throws {
        self.configuration = configuration
        self.credentials = credentials
        self.logger = configuration.logger
        guard let url = try configuration.location.signedInStore() else { return }
        let store = try openStore(at: url)
        do {
            guard try await store.setting(Device.SettingName.token) != nil else {
                try await store.close()
                return
            }
            try await open(store)
        } catch {
            try? await store.close()
            throw error
        }
    }

    // MARK: Running

    /// Starts the device's background work (see ``Outpost``); it runs while someone is signed in, until
    /// ``stop()``. Starting twice does nothing.
    public func start() {
        guard !isStarted, !isClosed else { return }
        isStarted = true
        logger.debug("outpost started")
        if let device { run(device) }
    }

    /// Stops the background work: a delivery under way ends, and what it had not delivered stays queued.
    /// Saves still go out while the device is online (a save starts its own delivery); ``start()`` starts again.
    public func stop() async {
        isStarted = false
        await halt()
    }

    /// Stops, and closes the store. The runtime cannot be used afterwards; an app makes a new one.
    public func close() async {
        guard !isClosed else { return }
        await stop()
        isClosed = true
        await closeDevice()
        for observer in statusObservers.values { observer.finish() }
        for observer in tokenObservers.values { observer.finish() }
        statusObservers = [:]
        tokenObservers = [:]
        logger.debug("outpost closed")
    }

    func run(_ device: Device) {
        let (configuration, logger) = (configuration, logger)
        running = Task {
            let engine = device.engine
            // At start: records that failed for too long raise the notice before anything else.
            _ = try? await engine.checkPersistentFailures()
            // What an earlier run left queued goes out now, and the monitor hears of the device at once.
            if await engine.resume() { await engine.startHeartbeat() }
            let scheduler = SyncScheduler(
                engine: engine, monitor: configuration.connectivity.make(device.transport, configuration.clock),
                clock: configuration.clock, retryInterval: configuration.retryInterval,
                periodic: [
                    .init(every: configuration.heartbeatInterval) { await engine.sendHeartbeat() },
                    .init(every: configuration.escalationInterval, onlineOnly: false) {
                        _ = try? await engine.checkPersistentFailures()
                    },
                    .init(every: configuration.referenceRefreshInterval) {
                        do {
                            _ = try await Self.refreshReferenceData(of: device, configuration: configuration)
                        } catch {
                            logger.warning("reference data not refreshed", metadata: ["reason": "\(Self.describe(error))"])
                        }
                    },
                ])
            await scheduler.run()
        }
    }

    /// Ends the background work and the delivery under way, and waits for them.
    func halt() async {
        if let running {
            running.cancel()
            await running.value
            self.running = nil
        }
        await device?.engine.stopDelivery()
    }

    // MARK: Status

    /// What the device's screens show about sync and sign-in; ``SignInState/signedOut`` while nobody is signed in.
    public var status: SyncStatus {
        get async { await device?.engine.status ?? signedOutStatus }
    }

    /// Every status from now on, starting with the current one, across sign-ins and sign-outs. Ends when the
    /// consumer stops iterating, or when the runtime closes.
    public func statusUpdates() async -> AsyncStream<SyncStatus> {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncStatus.self, bufferingPolicy: .bufferingNewest(16))
        let id = UUID()
        statusObservers[id] = continuation
        continuation.yield(await status)
        continuation.onTermination = { [weak self] _ in Task { await self?.removeStatusObserver(id) } }
        return stream
    }

    private func removeStatusObserver(_ id: UUID) { statusObservers[id] = nil }

    func publish(_ status: SyncStatus) {
        for observer in statusObservers.values { observer.yield(status) }
    }

    /// Every token the device takes from now on: one the person signed in with, or one the app's provider gave
    /// in place of an expiring or refused one; nil when the person signs out. An app that keeps its own copy of
    /// the token (to call its own services) follows it here.
    public func tokenUpdates() -> AsyncStream<String?> {
        let (stream, continuation) = AsyncStream.makeStream(of: String?.self, bufferingPolicy: .bufferingNewest(4))
        let id = UUID()
        tokenObservers[id] = continuation
        continuation.onTermination = { [weak self] _ in Task { await self?.removeTokenObserver(id) } }
        return stream
    }

    private func removeTokenObserver(_ id: UUID) { tokenObservers[id] = nil }

    // MARK: The signed-in person's device

    /// The open device: its store, engine and transport, for the screen models and for what the runtime does
    /// not wrap.
    ///
    /// - Throws: ``ClientError`` `signedOut` while nobody is signed in.
    public var openDevice: Device {
        get throws {
            guard let device else { throw ClientError(.signedOut, "nobody is signed in on this device") }
            return device
        }
    }

    /// Who is signed in, as their token names them; nil while nobody is, or when the token is not a JWT.
    public var user: DeviceUser? { device?.user }

    /// The event this device works at, which its heartbeats name for the event's sync monitor; nil when none is.
    public func currentEvent() async throws -> String? {
        try await openDevice.engine.currentEvent()
    }

    /// Sets the event this device works at (the door's event), or clears it with nil. The next heartbeat names
    /// it, at once when the server answers; the event's reference data
    /// (``Configuration/eventReferenceCollections``) is kept current from then on.
    ///
    /// - Throws: ``ClientError`` `invalidInput` when `event` is not an identifier, `signedOut` while nobody is.
    public func setCurrentEvent(_ event: String?) async throws {
        try await openDevice.engine.setCurrentEvent(event)
    }

    /// The device's reference data (rosters): download, refresh, lookup and search.
    public func referenceData() throws -> ReferenceData {
        let device = try openDevice
        return ReferenceData(store: device.store, transport: device.transport, now: configuration.now)
    }

    /// The reference sets the device keeps current: ``Configuration/referenceSets`` and, for the open event, each
    /// of ``Configuration/eventReferenceCollections``.
    public func keptReferenceSets() async throws -> [ReferenceSet] {
        try await Self.keptReferenceSets(of: openDevice, configuration: configuration)
    }

    static func keptReferenceSets(of device: Device, configuration: Configuration) async throws -> [ReferenceSet] {
        var sets = configuration.referenceSets
        if let event = try await device.engine.currentEvent() {
            sets += configuration.eventReferenceCollections.map { ReferenceSet(collection: $0, scope: event) }
        }
        return sets
    }

    /// Refreshes every kept reference set already downloaded (``keptReferenceSets()``), by delta; a set not
    /// downloaded yet is left for the app to download, with its progress on screen.
    ///
    /// - Returns: what changed in each set refreshed.
    /// - Throws: the first set's failure, once every set was tried.
    @discardableResult
    public func refreshReferenceData() async throws -> [ReferenceSet: RefreshSummary] {
        try await Self.refreshReferenceData(of: openDevice, configuration: configuration)
    }

    static func refreshReferenceData(of device: Device, configuration: Configuration) async throws -> [ReferenceSet: RefreshSummary] {
        let data = ReferenceData(store: device.store, transport: device.transport, now: configuration.now)
        var summaries: [ReferenceSet: RefreshSummary] = [:]
        var failure: (any Error)?
        for set in try await keptReferenceSets(of: device, configuration: configuration) {
            do {
                guard try await data.state(collection: set.collection, scope: set.scope).isReady else { continue }
                summaries[set] = try await data.refresh(collection: set.collection, scope: set.scope)
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
        return summaries
    }

    /// The work of a `BGAppRefreshTask`: delivers the outbox and refreshes the kept reference sets within
    /// `budget` (see ``SyncEngine/backgroundRefresh(budget:sets:)``). Signed out, it does nothing and finishes.
    public func backgroundRefresh(budget: Duration) async -> BackgroundRun {
        guard let device else {
            var run = BackgroundRun()
            run.finished = true
            return run
        }
        let sets = (try? await keptReferenceSets()) ?? configuration.referenceSets
        return await device.engine.backgroundRefresh(budget: budget, sets: sets)
    }

    static func describe(_ error: any Error) -> String {
        (error as? TransportError).map(SyncEngine.describe) ?? (error as? ClientError)?.message ?? "\(type(of: error))"
    }
}
