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
    /// The uploaded builds as the server last said of the crew's sheet, by id: a load reads them, and only
    /// ``refreshSheets()`` asks the server.
    @ObservationIgnored private var sheets: [String: BuildEntry] = [:]
    /// The uploaded builds the server has been asked about, at their version: a build newly uploaded starts one
    /// request, not every commit.
    @ObservationIgnored private var asked: Set<String> = []
    @ObservationIgnored private var sheetRefresh: Task<Void, Never>?
    @ObservationIgnored private lazy var updates = ScreenUpdates(engine: archive.engine) { [weak self] in await self?.load() }

    public init(archive: BuildArchive) {
        self.archive = archive
    }

    public var canSyncAll: Bool { !isSyncingAll }

    /// The photos asked for with ``loadThumbnail(_:of:)``, by digest: their bytes, for the screen to draw (and
    /// scale) as it needs, or how far their download has come. The ``thumbnailLimit`` loaded last are kept.
    public private(set) var thumbnails: [String: Thumbnail] = [:]
    /// How many loaded photos ``thumbnails`` keeps: each is a whole photo.
    public static let thumbnailLimit = 24
    @ObservationIgnored private var loadedOrder: [String] = []

    /// A thumbnail's bytes, or how far their download has come.
    public enum Thumbnail: Sendable, Hashable {
        case loading(FileTransfer?)
        case loaded(Data)
        /// Why it could not be had, such as "the server could not be reached".
        case failed(String)
    }

    /// Saves a build on the device, with its photos; it uploads when it can.
    public func save(name: String, fields: [String: JSONValue] = [:], photos: [Attachment] = []) async {
        do {
            let saved = try await archive.save(name: name, fields: fields, photos: photos)
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
            case .sentToSheet(let build):
                sheets[buildId] = build
                alert = ArchiveAlert(
                    title: "Sent to the crew's sheet again",
                    message: build.sheet == .failed
                        ? "The sheet has not taken it yet: \(build.sheetError ?? "no reason given")." : "The server is sending it now.")
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
        // The screen shows the action's result, the crew's sheet included, before its buttons come back.
        await reload()
        await refreshSheets()
        isSyncingAll = false
    }

    public func dismissAlert() {
        alert = nil
    }

    /// Reads a photo for its thumbnail: at once from the device, or downloaded with its progress shown.
    public func loadThumbnail(_ photo: BuildPhoto, of row: BuildRow) async {
        let key = photo.file.sha256
        if case .loaded = thumbnails[key] { return }
        if case .loading = thumbnails[key] { return }
        thumbnails[key] = .loading(nil)
        let (steps, sink) = AsyncStream.makeStream(of: FileTransfer.self, bufferingPolicy: .bufferingNewest(1))
        let shown = Task { @MainActor [weak self] in
            for await step in steps { self?.thumbnails[key] = .loading(step) }
        }
        let outcome: Thumbnail
        do {
            outcome = .loaded(try await archive.photoData(photo, of: row.build) { sink.yield($0) })
        } catch let error as TransportError {
            outcome = .failed(error.message)
        } catch let error as ClientError {
            outcome = .failed(error.message)
        } catch {
            outcome = .failed("the photo could not be read")
        }
        sink.finish()
        await shown.value
        thumbnails[key] = outcome
        if case .loaded = outcome {
            loadedOrder.append(key)
            while loadedOrder.count > Self.thumbnailLimit { thumbnails[loadedOrder.removeFirst()] = nil }
        }
    }

    /// Reads the screen again from the store and the engine.
    public func reload() async { await updates.reload() }

    /// Keeps the screen current until the calling task is cancelled: `.task { await screen.run() }`. While some
    /// uploaded builds are not in the crew's sheet, it asks the server again every ``sheetInterval``.
    public func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.updates.run() }
            group.addTask {
                let clock = self.archive.engine.clock
                while !Task.isCancelled {
                    do { try await clock.sleep(for: Self.sheetInterval) } catch { return }
                    if await self.awaitsSheet { await self.refreshSheets() }
                }
            }
        }
    }

    /// Whether an uploaded build is not in the crew's sheet yet, as far as the screen knows.
    private var awaitsSheet: Bool { rows.contains { $0.build.status == .uploaded || $0.build.sheet == .failed } }

    /// How often a running screen asks again whether the crew's sheet has the builds it does not have yet.
    public static let sheetInterval = Duration.seconds(15)

    /// Asks the server whether the crew's sheet has the uploaded builds, then shows it; offline, nothing changes.
    public func refreshSheets() async {
        let uploaded = rows.map(\.build).filter { $0.syncStatus == .synced }
        let told = await archive.withSheets(uploaded)
        for build in told where build.sheet != .unknown { sheets[build.buildId] = build }
        await reload()
    }

    /// Reads the screen from the store alone: a load asks the server nothing. A build newly uploaded starts one
    /// question about the sheet, in the background.
    private func load() async {
        connection = ConnectionIndicator(await archive.engine.status)
        if let lastSave, var now = try? await archive.current(lastSave, askingSheet: false),
            self.lastSave?.build.buildId == lastSave.build.buildId  // Not replaced by a save meanwhile.
        {
            if let known = sheets[now.build.buildId], now.build.syncStatus == .synced {
                now.build.takeSheet(of: known)
            }
            self.lastSave = now
            saveMessage = now.message
        }
        do {
            let builds = try await archive.list().map { build in
                var build = build
                if let known = sheets[build.buildId] { build.takeSheet(of: known) }
                return build
            }
            var rows: [BuildRow] = []
            for build in builds { rows.append(BuildRow(build, photos: try await archive.photos(of: build))) }
            self.rows = rows
            self.error = nil
            let unasked = Set(builds.filter { $0.syncStatus == .synced && $0.sheet != .received }.map(\.buildId)).subtracting(asked)
            if !unasked.isEmpty, sheetRefresh == nil, connection.status.isOnline {
                asked.formUnion(unasked)
                sheetRefresh = Task { @MainActor [weak self] in
                    await self?.refreshSheets()
                    self?.sheetRefresh = nil
                }
            }
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
    /// "Synced", "Uploaded", "Waiting to upload", "Upload failed", "Not in the crew's sheet" or "Refused by the
    /// server" (see ``BuildStatus``).
    public var statusText: String
    /// The reason under a failed or refused build, the sheet's included.
    public var errorText: String?
    /// "In the crew's sheet", "Not in the crew's sheet yet" or "The crew's sheet has not taken it", for an
    /// uploaded build when the server said.
    public var sheetText: String?
    /// When the device last tried to upload it.
    public var lastSyncAttempt: Date?
    public var badge: SyncBadge
    /// Whether the row offers Retry: a build the server does not have yet, or the crew's sheet, as the server said.
    public var canRetry: Bool
    /// The build's photos, each with its upload's progress.
    public var photos: [BuildPhoto]

    public init(_ build: BuildEntry, photos: [BuildPhoto] = []) {
        self.build = build
        self.photos = photos
        badge = build.badge
        statusIcon = badge.systemImage
        switch build.status {
        case .synced: statusText = "Synced"
        case .uploaded: statusText = "Uploaded"
        case .pending: statusText = "Waiting to upload"
        case .failed: statusText = build.syncStatus == .synced ? "Not in the crew's sheet" : "Upload failed"
        case .refused: statusText = "Refused by the server"
        }
        errorText = build.problem
        canRetry = build.syncStatus != .synced || build.sheet == .waiting || build.sheet == .failed
        sheetText = build.syncStatus == .synced ? build.sheet.text : nil
        lastSyncAttempt = build.lastSyncAttempt
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

    init(summary: BuildSyncSummary) {
        self.init(summary: summary.upload)
        guard !summary.upload.skipped else { return }
        message = summary.description
        if summary.upload.isComplete && !summary.isComplete { title = "Some builds are not in the crew's sheet" }
    }
}
