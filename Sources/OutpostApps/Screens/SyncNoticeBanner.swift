import Foundation
import Observation
import OutpostClient

/// The banner shown over every screen while records have not synced for over the escalation threshold (24
/// hours): it cannot be dismissed, says what to do, and offers Retry, which shows it is busy, ends in a toast
/// when it fails, and clears the banner when everything synced.
@MainActor
@Observable
public final class SyncNoticeBanner {
    public let engine: SyncEngine

    /// The notice, while there is one: the banner is shown exactly then.
    public private(set) var notice: PersistentFailureNotice?
    /// A short message after a Retry that did not clear the banner, until dismissed or the next Retry.
    public private(set) var toast: String?

    @ObservationIgnored private lazy var updates = ScreenUpdates(engine: engine) { [weak self] in await self?.load() }

    public init(engine: SyncEngine) {
        self.engine = engine
    }

    public var isVisible: Bool { notice != nil }
    /// The banner cannot be dismissed: it goes when the records sync.
    public var isDismissible: Bool { false }
    /// "3 records have not synced for over 24 hours".
    public var message: String? { notice?.message }
    /// What the person holding the device can do.
    public var guidance: [String] { PersistentFailureNotice.guidance }
    /// "Retry sync"
    public var retryTitle: String { PersistentFailureNotice.actionTitle }
    /// True while a Retry runs, from this banner or elsewhere: the button shows it and is disabled.
    public var isRetrying: Bool { pressed || (notice?.isRetrying ?? false) }

    private var pressed = false

    /// The banner's Retry: requeues and syncs everything; a press while one runs is ignored.
    public func retry() async {
        guard isVisible, !isRetrying else { return }
        pressed = true
        toast = nil
        do {
            if case .finished = try await engine.retryPersistentFailures(),
                let left = await engine.status.persistentFailureNotice
            {
                toast = left.retryError ?? "Retry failed: records still not synced"
            }
        } catch {
            toast = await engine.status.persistentFailureNotice?.retryError ?? "Retry failed: the device store could not be read"
        }
        pressed = false
        await reload()
    }

    public func dismissToast() {
        toast = nil
    }

    /// Reads the screen again from the store and the engine.
    public func reload() async { await updates.reload() }

    /// Keeps the screen current until the calling task is cancelled: `.task { await screen.run() }`.
    public func run() async { await updates.run() }

    private func load() async {
        notice = await engine.status.persistentFailureNotice
    }
}
