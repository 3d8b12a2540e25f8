import OutpostClient

/// Keeps a screen model current: reloads it from the store one load at a time (a request made while a load runs
/// joins a single load after it, so that a burst of commits costs two loads and every caller sees what was stored
/// when it asked), and ``run()`` reloads after every status the engine publishes and every commit to its store, by
/// this process or another, until the calling task is cancelled.
@MainActor
final class ScreenUpdates {
    private let engine: SyncEngine
    private let load: @MainActor () async -> Void
    private var running: Task<Void, Never>?
    private var again = false

    init(engine: SyncEngine, load: @escaping @MainActor () async -> Void) {
        self.engine = engine
        self.load = load
    }

    func reload() async {
        if let running {
            again = true
            await running.value
            return
        }
        // The task starts after this turn of the main actor, so `running` is set before it runs; it clears
        // `running` in the turn that found nothing more to load, so no request falls between the two.
        let task = Task { @MainActor in
            repeat {
                again = false
                await load()
            } while again
            running = nil
        }
        running = task
        await task.value
    }

    /// What a screen's `.task { await model.run() }` runs: the screen at once, then what waits from an earlier
    /// run delivered as soon as the server answers, and the screen kept current.
    func run() async {
        await reload()
        let engine = self.engine
        let statuses = await engine.statusUpdates()
        let commits = engine.store.changes(clock: engine.clock)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await engine.resume() }
            group.addTask { [weak self] in
                for await _ in statuses { await self?.reload() }
            }
            group.addTask { [weak self] in
                for await _ in commits { await self?.reload() }
            }
        }
    }
}

extension ClientError {
    /// What a screen shows when a read of the device store failed (its code says what a screen can do, such as
    /// `disk_full` or `cannot_decrypt`); nil for a read that was cancelled, or that failed on the network, which the
    /// connection indicator already shows.
    static func screen(_ error: any Error) -> ClientError? {
        if error is CancellationError || error is TransportError { return nil }
        return error as? ClientError
            ?? ClientError(.storeUnavailable, "the device store failed to read or write", underlying: error)
    }
}

/// What the offline indicator of a screen shows, from the engine's status.
public struct ConnectionIndicator: Sendable, Hashable {
    /// The engine's status it was made from.
    public var status: SyncStatus

    public init(_ status: SyncStatus) {
        self.status = status
    }

    /// True once the engine knows the device is offline: the indicator is shown.
    public var isOffline: Bool { status.isConnectionKnown && !status.isOnline }
    /// Records waiting for the network: pending and failed.
    public var waitingCount: Int { status.pendingCount + status.failedCount }
    /// "Offline", "Online" or "Checking connection".
    public var connectionText: String { status.connectionText }
    /// "3 records waiting to sync", and the refused ones after it.
    public var text: String { status.offlineIndicatorText }
    /// True when what waits cannot go until the person signs in again: the screen offers the sign-in.
    public var needsSignIn: Bool { status.needsSignIn }
    /// "Sign in again to send 3 records" while ``needsSignIn``; nil otherwise.
    public var signInText: String? {
        guard status.needsSignIn else { return nil }
        let waiting = waitingCount
        return waiting == 0
            ? "Sign in again to sync" : waiting == 1 ? "Sign in again to send 1 record" : "Sign in again to send \(waiting) records"
    }
}
