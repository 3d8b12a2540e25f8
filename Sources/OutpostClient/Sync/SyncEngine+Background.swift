import Foundation
import NIOConcurrencyHelpers

/// A reference set a device keeps on hand: a collection within a scope, such as one event's roster.
public struct ReferenceSet: Sendable, Hashable {
    public var collection: String
    public var scope: String

    public init(collection: String, scope: String) {
        self.collection = collection
        self.scope = scope
    }
}

/// What a background run did before it ended or its deadline passed.
public struct BackgroundRun: Sendable, Hashable {
    /// True when every step ended before the deadline; false when the deadline (or the task's cancellation,
    /// such as a `BGTask`'s expiration handler) stopped it. What it had not done stays queued for the next run.
    public var finished = false
    /// Whether the server answered.
    public var isOnline = false
    /// The outbox's delivery, once it ended.
    public var sync: SyncSummary?
    /// The reference sets brought up to date (refreshed, or downloaded to completion).
    public var updatedSets: [ReferenceSet] = []
    /// Why a step failed, such as "the server could not be reached"; the run goes on with the next step.
    public var errors: [String] = []

    public init() {}
}

extension SyncEngine {
    /// The work of a `BGAppRefreshTask` (about 30 seconds): asks the server, delivers the outbox, and refreshes
    /// the sets already downloaded, all within `budget` on the engine's clock.
    ///
    /// Past the budget, or when the calling task is cancelled, the work stops cleanly: a push under way ends
    /// unanswered and its entries stay queued (the server answers `duplicate` when they go again); a page of
    /// reference data is stored whole or not at all.
    ///
    /// ```swift
    /// BGTaskScheduler.shared.register(forTaskWithIdentifier: "org.example.refresh", using: nil) { task in
    ///     let work = Task { await engine.backgroundRefresh(budget: .seconds(25), sets: [roster]) }
    ///     task.expirationHandler = { work.cancel() }
    ///     Task { task.setTaskCompleted(success: await work.value.finished) }
    /// }
    /// ```
    public nonisolated func backgroundRefresh(budget: Duration, sets: [ReferenceSet] = []) async -> BackgroundRun {
        await runInBackground(budget: budget, sets: sets, downloading: false)
    }

    /// The work of a `BGProcessingTask` (minutes, on power): the same as ``backgroundRefresh(budget:sets:)``, and
    /// the sets not yet complete on the device are downloaded (resumed where they stopped).
    public nonisolated func backgroundProcessing(budget: Duration, sets: [ReferenceSet] = []) async -> BackgroundRun {
        await runInBackground(budget: budget, sets: sets, downloading: true)
    }

    private nonisolated func runInBackground(budget: Duration, sets: [ReferenceSet], downloading: Bool) async -> BackgroundRun {
        let progress = NIOLockedValueBox(BackgroundRun())
        let clock = self.clock
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await self.backgroundWork(sets: sets, downloading: downloading, into: progress)
            }
            group.addTask {
                try? await clock.sleep(for: budget)
            }
            // Whichever ends first ends both; the work is awaited, so the run returns with the store settled.
            await group.next()
            group.cancelAll()
            await group.waitForAll()
        }
        return progress.withLockedValue { $0 }
    }

    private func backgroundWork(sets: [ReferenceSet], downloading: Bool, into run: NIOLockedValueBox<BackgroundRun>) async {
        func failed(_ error: any Error) {
            run.withLockedValue { $0.errors.append(Self.describeForRun(error)) }
        }
        let online = await probe(syncingPending: false)
        run.withLockedValue { $0.isOnline = online }
        guard online, !Task.isCancelled else {
            if !Task.isCancelled { run.withLockedValue { $0.finished = true } }
            return
        }
        do {
            let summary = try await sync()
            run.withLockedValue { $0.sync = summary }
        } catch {
            failed(error)
        }
        let reference = ReferenceData(store: store, transport: transport, now: now)
        for set in sets {
            guard !Task.isCancelled else { return }
            do {
                switch try await reference.state(collection: set.collection, scope: set.scope) {
                case .ready:
                    try await reference.refresh(collection: set.collection, scope: set.scope)
                case .notDownloaded, .incomplete:
                    guard downloading else { continue }
                    try await reference.download(collection: set.collection, scope: set.scope)
                }
                run.withLockedValue { $0.updatedSets.append(set) }
            } catch {
                failed(error)
            }
        }
        if !Task.isCancelled { run.withLockedValue { $0.finished = true } }
    }

    private static func describeForRun(_ error: any Error) -> String {
        switch error {
        case let error as TransportError: return error.message
        case let error as ClientError: return error.message
        case is CancellationError: return "stopped at the deadline"
        default: return "the step failed"
        }
    }
}
