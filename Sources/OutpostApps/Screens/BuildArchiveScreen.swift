import Foundation
import Observation
import OutpostClient
import OutpostProtocol

/// The crew's build archive, for SwiftUI to bind to: every build with its status icon, the error under a failed
/// one, Retry per build with its busy state, and Sync All with its progress and a summary alert.
@MainActor
@Observable
public final class BuildArchiveScreen {
    public let archive: BuildArchive

    /// Every build on the device, newest first.
    public private(set) var rows: [BuildRow] = []
    /// The builds whose Retry runs: their button shows it and is disabled.
    public private(set) var retrying: Set<String> = []
    public private(set) var isSyncingAll = false
    /// Why the screen could not be read from the device store, with a code a screen can act on (`disk_full`,
    /// `cannot_decrypt`, `store_corrupt`); the screen keeps what it showed last. Nil once a read succeeds.
    public private(set) var error: ClientError?
    /// Sync All's progress while it runs: sent and total.
    public private(set) var progress: SyncProgress?
    /// The alert after Sync All or a Retry, until dismissed.
    public private(set) var alert: ArchiveAlert?
    /// The message after the last save, kept current as its upload goes on.
    public private(set) var saveMessage: String?
    public private(set) var connection = ConnectionIndicator(SyncStatus())

    @ObservationIgnored private var lastSave: BuildSave?
    @ObservationIgnored private lazy var updates = ScreenUpdates(engine: archive.engine) { [weak self] in await self?.load() }

    public init(archive: BuildArchive) {
        self.archive = archive
    }

    public var canSyncAll: Bool { !isSyncingAll }

    /// Saves a build on the device; it uploads when it can.
    public func save(name: String, fields: [String: JSONValue] = [:]) async {
        do {
            let saved = try await archive.save(name: name, fields: fields)
            lastSave = saved
            saveMessage = saved.message
        } catch let error as ClientError {
            saveMessage = error.message
        } catch {
            saveMessage = "The build could not be saved on this device."
        }
        await reload()
    }

    /// Uploads one build again; its row is busy meanwhile.
    public func retry(_ buildId: String) async {
        guard !retrying.contains(buildId), !isSyncingAll else { return }
        retrying.insert(buildId)
        do {
            switch try await archive.retry(buildId) {
            case .alreadySynced: alert = ArchiveAlert(title: "Already uploaded", message: "Nothing to send.")
            case .finished(let summary): alert = ArchiveAlert(summary: summary)
            }
        } catch let error as ClientError {
            alert = ArchiveAlert(title: "Retry failed", message: error.message)
        } catch {
            alert = ArchiveAlert(title: "Retry failed", message: "The device store could not be read.")
        }
        // The screen shows the action's result before its buttons come back.
        await reload()
        retrying.remove(buildId)
    }

    /// Uploads everything waiting or failed, showing progress, then the summary.
    public func syncAll() async {
        guard !isSyncingAll else { return }
        isSyncingAll = true
        progress = nil
        let (steps, sink) = AsyncStream.makeStream(of: SyncProgress.self, bufferingPolicy: .bufferingNewest(1))
        let shown = Task { @MainActor [weak self] in
            for await step in steps { self?.progress = step }
        }
        do {
            alert = ArchiveAlert(summary: try await archive.syncAll { sink.yield($0) })
        } catch {
            alert = ArchiveAlert(title: "Sync failed", message: "The device store could not be read.")
        }
        sink.finish()
        await shown.value
        progress = nil
        // The screen shows the action's result before its buttons come back.
        await reload()
        isSyncingAll = false
    }

    public func dismissAlert() {
        alert = nil
    }

    /// Reads the screen again from the store and the engine.
    public func reload() async { await updates.reload() }

    /// Keeps the screen current until the calling task is cancelled: `.task { await screen.run() }`.
    public func run() async { await updates.run() }

    private func load() async {
        connection = ConnectionIndicator(await archive.engine.status)
        if let lastSave, let now = try? await archive.current(lastSave),
            self.lastSave?.build.buildId == lastSave.build.buildId  // Not replaced by a save meanwhile.
        {
            self.lastSave = now
            saveMessage = now.message
        }
        do {
            rows = try await archive.listWithSheets().map(BuildRow.init)
            self.error = nil
        } catch {
            self.error = ClientError.screen(error) ?? self.error
        }
    }
}

/// One build in the archive.
public struct BuildRow: Sendable, Hashable, Identifiable {
    public var id: String { build.buildId }
    public var build: BuildEntry
    /// The status icon's SF Symbol, such as `checkmark.icloud`.
    public var statusIcon: String
    /// "Uploaded", "Waiting to upload", "Upload failed" or "Refused by the server".
    public var statusText: String
    /// The reason under a failed or refused build.
    public var errorText: String?
    /// "In the crew's sheet" or "Not in the crew's sheet yet", for an uploaded build when the server said.
    public var sheetText: String?
    public var badge: SyncBadge
    /// Whether the row offers Retry: a build the server does not have yet.
    public var canRetry: Bool

    public init(_ build: BuildEntry) {
        self.build = build
        badge = build.badge
        statusIcon = badge.systemImage
        switch build.syncStatus {
        case .synced: statusText = "Uploaded"
        case .pending: statusText = "Waiting to upload"
        case .failed: statusText = "Upload failed"
        case .rejected: statusText = "Refused by the server"
        }
        errorText = build.syncStatus == .failed || build.syncStatus == .rejected ? build.syncError ?? "unknown error" : nil
        canRetry = build.syncStatus != .synced
        sheetText = build.syncStatus == .synced ? build.sheet.text : nil
    }
}

/// The alert after Sync All or a Retry.
public struct ArchiveAlert: Sendable, Hashable {
    public var title: String
    /// Such as "3 synced, 1 failed: no permit attached".
    public var message: String

    public init(title: String, message: String) {
        self.title = title
        self.message = message
    }

    init(summary: SyncSummary) {
        if summary.skipped {
            self.init(title: "Already syncing", message: "A sync is already running; try again when it ends.")
        } else {
            self.init(title: summary.isComplete ? "Sync complete" : "Some builds did not upload", message: summary.description)
        }
    }
}
