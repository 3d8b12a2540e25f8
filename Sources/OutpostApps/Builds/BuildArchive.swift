import Foundation
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// Crews' build archive over the sync engine: a build is saved on the device first, always, then uploaded.
///
/// A build whose upload failed stays in the archive with the reason, and can be retried alone or with all
/// the others. Builds saved by an older version, with no sync status, read as synced.
public struct BuildArchive: Sendable {
    public let engine: SyncEngine
    public let newId: @Sendable () -> String

    public init(engine: SyncEngine, newId: @escaping @Sendable () -> String = { "build-\(UUID().uuidString.prefix(13).lowercased())" }) {
        self.engine = engine
        self.newId = newId
    }

    /// Saves a build locally, with its photos, then tries to upload it when the device is online.
    ///
    /// The photos are stored sealed with the build, in its transaction, and upload before it: the build is
    /// uploaded only once the server holds every photo (see ``SyncEngine/save(_:attaching:at:)``).
    /// - Parameters:
    ///   - fields: the crew's own fields besides the name.
    ///   - photos: the build's photos, in the fields `photo`, `photo_2`, … (``Build/photoField(_:)``).
    /// - Throws: ``ClientError`` `invalidInput` for a name or field the server would refuse, or a photo that
    ///   cannot be read; nothing is written then. An upload failure is not thrown: the result says it.
    public func save(name: String, fields: [String: JSONValue] = [:], photos: [Attachment] = []) async throws -> BuildSave {
        var fields = fields
        fields[Build.Field.name] = .string(name)
        if let problem = Build.problem(in: fields) { throw ClientError(.invalidInput, problem) }
        let attached = Dictionary(uniqueKeysWithValues: photos.enumerated().map { (Build.photoField($0.offset), $0.element) })
        // Saved and returned at once; the upload runs in the background.
        let record = try await engine.save(
            LocalStore.Write(collection: Build.collection, recordId: newId(), fields: fields), attaching: attached)
        return BuildSave(build: BuildEntry(record), connection: await engine.status.connection)
    }

    /// Pulls builds changed on the server (saved on the person's other devices) into the device; their photos
    /// stay on the server until ``photoData(_:of:progress:)`` asks for one.
    @discardableResult
    public func refresh() async throws -> Int {
        try await engine.pull(collection: Build.collection)
    }

    /// The photos of `build`, each with where it stands: on the device or not, and how far its upload has come.
    public func photos(of build: BuildEntry) async throws -> [BuildPhoto] {
        let status = await engine.status
        var photos: [BuildPhoto] = []
        for (field, file) in build.photos {
            let state = try await engine.fileState(file)
            let upload: BuildPhoto.Upload
            if let error = state.uploadError {
                upload = .refused(error)
            } else if state.isOnServer || build.syncStatus == .synced {
                // The server takes a build only with its photos.
                upload = .uploaded
            } else if let moving = status.upload, moving.file.sha256 == file.sha256 {
                upload = .uploading(moving)
            } else {
                upload = .waiting(uploaded: state.uploadedBytes)
            }
            photos.append(BuildPhoto(field: field, file: file, isOnDevice: state.storedBytes >= file.size, upload: upload))
        }
        return photos
    }

    /// A photo's bytes, for its thumbnail or full view: from the device, or downloaded (with `progress`) and kept
    /// sealed on it.
    public func photoData(
        _ photo: BuildPhoto, of build: BuildEntry, progress: (@Sendable (FileTransfer) -> Void)? = nil
    )
        async throws -> Data
    {
        guard let record = try await engine.store.record(collection: Build.collection, recordId: build.buildId) else {
            throw ClientError(.notFound, "the build is not on this device")
        }
        return try await engine.fileData(photo.file, of: record, progress: progress)
    }

    /// Every build on the device, newest first, with its status and, for a failed one, why. An uploaded build
    /// the server said, at its present version, is in the crew's sheet (or goes to no sheet) keeps that
    /// ``SheetState`` offline too: the archive shows what it last knew to be done, never a guess.
    public func list() async throws -> [BuildEntry] {
        let settled = await settledSheets()
        return await engine.markingOverdue(
            try await engine.store.records(collection: Build.collection).filter { !$0.tombstone }.map { record in
                var build = BuildEntry(record)
                if build.syncStatus == .synced, let known = settled[build.buildId], known.version == build.version {
                    build.sheet = known.sheet
                }
                return build
            },
            collection: Build.collection)
    }

    /// The device setting that keeps, by build id, the last sheet state the server gave that says the build is
    /// done at its version: in the sheet, or going to none.
    static let settledSheetsSetting = "builds:settled_sheets"

    /// A sheet state the server gave, and the build's version it was about.
    private struct SettledSheet: Codable, Equatable {
        var version: Int64?
        var sheet: SheetState
    }

    private func settledSheets() async -> [String: SettledSheet] {
        guard let json = try? await engine.store.setting(Self.settledSheetsSetting) else { return [:] }
        return (try? JSONDecoder().decode([String: SettledSheet].self, from: Data(json.utf8))) ?? [:]
    }

    /// Keeps what the server said of `builds`' sheets (see ``list()``): a done state is kept, any other
    /// forgets the one kept before.
    private func settle(_ builds: [BuildEntry]) async {
        var settled = await settledSheets()
        let known = settled
        for build in builds where build.syncStatus == .synced && build.sheet != .unknown {
            settled[build.buildId] = build.sheet.isDone ? SettledSheet(version: build.version, sheet: build.sheet) : nil
        }
        guard settled != known, let json = try? JSONEncoder().encode(settled) else { return }
        try? await engine.store.setSetting(Self.settledSheetsSetting, String(decoding: json, as: UTF8.self))
    }

    /// ``list()`` with each uploaded build's ``SheetState``, asked of the server when the device is online.
    /// Offline, or when the server cannot say, the builds keep ``SheetState/unknown``.
    public func listWithSheets() async throws -> [BuildEntry] {
        await withSheets(try await list())
    }

    /// `builds` with each uploaded one's ``SheetState`` as the server says, in requests of up to 200 builds; a
    /// part the server did not answer, or all of them offline, keep ``SheetState/unknown``.
    public func withSheets(_ builds: [BuildEntry]) async -> [BuildEntry] {
        let uploaded = builds.filter { $0.syncStatus == .synced && $0.sheet != .received }.map(\.buildId)
        guard !uploaded.isEmpty, await engine.status.isOnline else { return builds }
        var answers: [RecordDelivery] = []
        for start in stride(from: 0, to: uploaded.count, by: 200) {
            let ids = Array(uploaded[start..<min(start + 200, uploaded.count)])
            if let answer = try? await engine.deliveries(collection: Build.collection, recordIds: ids) { answers += answer.records }
        }
        let told = Self.applying(answers, to: builds)
        await settle(told)
        return told
    }

    /// `builds` with the sheet states the server's `answers` give.
    static func applying(_ answers: [RecordDelivery], to builds: [BuildEntry]) -> [BuildEntry] {
        let byId = Dictionary(answers.map { ($0.recordId, $0) }) { $1 }
        return builds.map { build in
            guard build.syncStatus == .synced, let answer = byId[build.buildId] else { return build }
            var build = build
            build.sheet = SheetState(answer)
            build.sheetError = answer.isFailing ? answer.lastError : nil
            build.sheetRetryAt = answer.isFailing ? answer.nextAttemptAt?.date : nil
            return build
        }
    }

    /// Uploads one build again; one the server has and the crew's sheet does not is sent to the sheet again.
    /// - Throws: ``ClientError`` `notFound` for a build this device does not hold.
    public func retry(_ buildId: String) async throws -> BuildRetry {
        guard let record = try await engine.store.record(collection: Build.collection, recordId: buildId), !record.tombstone else {
            throw ClientError(.notFound, "no build \(buildId) in this archive")
        }
        guard record.syncStatus == .synced else {
            return .finished(try await engine.retry(collection: Build.collection, scope: "", recordId: buildId))
        }
        let build = BuildEntry(record)
        guard let answer = try await engine.retryDeliveries(collection: Build.collection, recordIds: [buildId]).records.first else {
            return .alreadySynced
        }
        let resent = Self.applying([answer], to: [build])[0]
        return resent.sheet == .received || resent.sheet == .noSheet ? .alreadySynced : .sentToSheet(resent)
    }

    /// Sync All: uploads everything waiting or failed, then, when the server takes records, asks it to send
    /// again to the crew's sheet every uploaded build the sheet has not taken (as ``retry(_:)`` does for one).
    public func syncAll(progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws -> BuildSyncSummary {
        let upload = try await engine.retryAll(progress: progress)
        // With nothing to upload, the sync did not learn whether the server answers.
        if await !engine.status.isConnectionKnown { await engine.probe(syncingPending: false) }
        guard !upload.skipped else { return BuildSyncSummary(upload: upload) }
        guard await engine.status.connection == .online else {
            // The sheet could not be asked: the uploaded builds it was not known to have stay unconfirmed.
            let unknown = try await list().filter { $0.syncStatus == .synced && !$0.sheet.isDone }.count
            return BuildSyncSummary(upload: upload, sheetUnknown: unknown)
        }
        let failing = await withSheets(try await list().filter { $0.syncStatus == .synced }).filter { $0.sheet == .failed }
        var summary = BuildSyncSummary(upload: upload)
        for start in stride(from: 0, to: failing.count, by: 200) {
            let part = Array(failing[start..<min(start + 200, failing.count)])
            // A part the server did not answer was not sent again: it stays as the sheet last failed it.
            guard let answer = try? await engine.retryDeliveries(collection: Build.collection, recordIds: part.map(\.buildId))
            else {
                summary.sheetFailing += part
                continue
            }
            let told = Self.applying(answer.records, to: part)
            summary.resentToSheet += told.count
            summary.sheetFailing += told.filter { $0.sheet == .failed }
        }
        return summary
    }

    /// The build as it stands now: after a save, once its upload ended or was given up waiting on.
    ///
    /// - Parameter askingSheet: whether to ask the server, when the build is uploaded, whether the crew's sheet
    ///   has it; otherwise the sheet is as `saved` last knew it.
    public func current(_ saved: BuildSave, askingSheet: Bool = true) async throws -> BuildSave {
        guard let record = try await engine.store.record(collection: Build.collection, recordId: saved.build.buildId)
        else { return saved }
        var build = BuildEntry(record)
        if build.syncStatus == .synced {
            build.takeSheet(of: saved.build)
            if askingSheet { build = await withSheets([build])[0] }
        }
        return BuildSave(build: build, connection: await engine.status.connection)
    }
}

/// What Sync All did: the uploads, and the uploaded builds sent to the crew's sheet again.
public struct BuildSyncSummary: Sendable, Hashable, CustomStringConvertible {
    public var upload: SyncSummary
    /// How many uploaded builds the server was asked to send to the crew's sheet again.
    public var resentToSheet = 0
    /// The uploaded builds the crew's sheet has still not taken, as the server last said, each with why.
    public var sheetFailing: [BuildEntry] = []
    /// How many uploaded builds the sheet was not known to have, when the server could not be asked.
    public var sheetUnknown = 0

    public init(upload: SyncSummary, resentToSheet: Int = 0, sheetFailing: [BuildEntry] = [], sheetUnknown: Int = 0) {
        self.upload = upload
        self.resentToSheet = resentToSheet
        self.sheetFailing = sheetFailing
        self.sheetUnknown = sheetUnknown
    }

    /// True when every build went up and the crew's sheet is known to have taken every one.
    public var isComplete: Bool { upload.isComplete && sheetFailing.isEmpty && sheetUnknown == 0 }

    /// Such as "2 synced, 0 failed; 1 sent to the crew's sheet again; the sheet has not taken 1 yet: the receiver
    /// could not be reached".
    public var description: String {
        var text = upload.description
        if resentToSheet > 0 { text += "; \(resentToSheet) sent to the crew's sheet again" }
        if !sheetFailing.isEmpty {
            let reasons = Set(sheetFailing.map { $0.sheetError ?? "no reason given" }).sorted()
            text += "; the sheet has not taken \(sheetFailing.count) yet: " + reasons.joined(separator: "; ")
        }
        if sheetUnknown > 0 {
            text +=
                "; whether the crew's sheet has \(sheetUnknown == 1 ? "1 build" : "\(sheetUnknown) builds") is not known: the server could not be asked"
        }
        return text
    }
}

/// What "Retry" on one build did.
public enum BuildRetry: Sendable, Hashable {
    /// The server and the crew's sheet (when builds go to one) already had it: nothing was sent.
    case alreadySynced
    /// That build alone was sent.
    case finished(SyncSummary)
    /// The server had it and the crew's sheet did not: the server was asked to send it to the sheet again; the
    /// build as the server then said.
    case sentToSheet(BuildEntry)
}

public struct BuildEntry: Sendable, Hashable {
    public var buildId: String
    public var name: String
    public var fields: [String: JSONValue]
    public var syncStatus: RecordSyncStatus
    public var syncError: String?
    public var savedAt: Date
    /// Whether the crew's sheet has the build; ``SheetState/unknown`` unless ``BuildArchive/listWithSheets()`` asked.
    public var sheet: SheetState = .unknown
    /// Why the sheet has not taken it, when ``sheet`` is ``SheetState/failed``.
    public var sheetError: String?
    /// When the server tries the sheet again, when ``sheet`` is ``SheetState/failed``.
    public var sheetRetryAt: Date?
    /// When the device last tried to upload it.
    public var lastSyncAttempt: Date?
    /// The server's version of the build, once uploaded.
    public var version: Int64?
    /// The escalation threshold, when the build has waited to upload longer than it (see ``SyncBadge/overdue``).
    public var overdue: Duration?

    /// The build's photos by field (`photo`, `photo_2`, …), in that order.
    public var photos: [(field: String, file: FileReference)] {
        FileReference.references(in: fields).sorted { Build.photoIndex($0.key) < Build.photoIndex($1.key) }.map { ($0.key, $0.value) }
    }

    public init(_ record: LocalRecord) {
        buildId = record.recordId
        name = record.fields[Build.Field.name]?.stringValue ?? ""
        fields = record.fields
        syncStatus = record.syncStatus
        syncError = record.syncError
        savedAt = record.createdAt.date
        lastSyncAttempt = record.lastSyncAttempt
        version = record.version
    }

    public var badge: SyncBadge { SyncBadge(status: syncStatus, error: syncError, overdue: overdue) }

    /// Takes what `known` says of the crew's sheet: its state, why it failed, and when the server tries again.
    mutating func takeSheet(of known: BuildEntry) {
        (sheet, sheetError, sheetRetryAt) = (known.sheet, known.sheetError, known.sheetRetryAt)
    }

    /// Where the build stands in the archive's words, the crew's sheet included: it is `synced` only once the
    /// sheet has it (or when builds go to no sheet).
    public var status: BuildStatus {
        switch syncStatus {
        case .pending: return overdue == nil ? .pending : .failed
        case .failed: return .failed
        case .refused: return .refused
        case .synced:
            switch sheet {
            case .received, .noSheet: return .synced
            case .waiting, .unknown: return .uploaded
            case .failed: return .failed
            }
        }
    }

    /// Why the build is failed or refused: the upload's reason, or the sheet's.
    public var problem: String? {
        switch status {
        case .failed where syncStatus == .synced: return "the crew's sheet has not taken it: \(sheetError ?? "no reason given")"
        case .failed where overdue != nil:
            return "not uploaded for over \(PersistentFailureNotice.describe(overdue ?? .zero)): \(syncError ?? "not yet delivered")"
        case .failed, .refused: return syncError ?? "unknown error"
        case .pending, .uploaded, .synced: return nil
        }
    }
}

extension BuildEntry: WaitingEntry {
    var overdueKey: String { buildId }
}

/// Where a build stands, from the device to the crew's sheet.
public enum BuildStatus: String, Sendable, Hashable, CaseIterable {
    /// Saved on the device, not uploaded yet.
    case pending
    /// On the server; the crew's sheet has not confirmed it yet (or the device could not ask).
    case uploaded
    /// On the server and in the crew's sheet, or on the server when builds go to no sheet.
    case synced
    /// The upload failed, it has waited to upload longer than the escalation threshold, or the sheet has not taken
    /// it: retried, and ``BuildEntry/problem`` says why.
    case failed
    /// The server refused it: it waits for the crew.
    case refused
}

/// Whether the crew's sheet (where the server's connector of builds sends them) has a build.
public enum SheetState: String, Sendable, Hashable, Codable {
    /// Not known: the device is offline, the build is not uploaded yet, or the server was not asked.
    case unknown
    /// Builds go to no sheet: uploaded is done.
    case noSheet = "no_sheet"
    /// The server has the build; the sheet does not have this version yet.
    case waiting
    /// The sheet has the build as the server has it.
    case received
    /// The server's last attempt to send it to the sheet failed; it tries again (``BuildEntry/sheetError``).
    case failed

    init(_ delivery: RecordDelivery) {
        self = delivery.receivers == 0 ? .noSheet : delivery.delivered ? .received : delivery.isFailing ? .failed : .waiting
    }

    /// Whether the build is done at its version: the sheet has it, or it goes to none.
    var isDone: Bool { self == .received || self == .noSheet }

    /// What the archive says, or nil when it says nothing.
    public var text: String? {
        switch self {
        case .unknown, .noSheet: nil
        case .waiting: AppText.sheetWaiting
        case .received: AppText.sheetReceived
        case .failed: AppText.sheetFailed
        }
    }
}

/// What saving a build did.
public struct BuildSave: Sendable, Hashable {
    public var build: BuildEntry
    /// Where the connection stood when the save was answered.
    public var connection: Connection
    /// Whether the server could be reached then.
    public var isOnline: Bool { connection.isReachable }

    /// The message after saving. A failed upload says the build is saved and can be retried from the archive.
    public var message: String {
        switch build.syncStatus {
        case .synced:
            switch build.sheet {
            case .noSheet: return "Build \"\(build.name)\" saved and uploaded."
            case .received: return "Build \"\(build.name)\" saved, uploaded and in the crew's sheet."
            case .waiting: return "Build \"\(build.name)\" uploaded; the crew's sheet does not have it yet."
            case .unknown: return "Build \"\(build.name)\" uploaded; whether the crew's sheet has it is not known yet."
            case .failed:
                return
                    "Build \"\(build.name)\" uploaded, but the crew's sheet has not taken it (\(build.sheetError ?? "no reason given")); retry it from the archive."
            }
        case .pending:
            switch connection {
            case .offline: return "Build \"\(build.name)\" saved on this device; it will upload when connected."
            case .unknown: return "Build \"\(build.name)\" saved on this device."
            case .serverTrouble(let problem):
                return "Build \"\(build.name)\" saved on this device; the server is having trouble (\(problem)); it uploads when the server recovers."
            case .online: return "Build \"\(build.name)\" saved; uploading shortly."
            }
        case .failed:
            return "Build \"\(build.name)\" saved. The upload failed (\(build.syncError ?? "unknown error")); retry it from the archive."
        case .refused:
            return "Build \"\(build.name)\" saved on this device; the server refused it: \(build.syncError ?? "no reason given")"
        }
    }
}

/// One photo of a build: the file, whether the device holds it (a thumbnail can be drawn at once), and its upload.
public struct BuildPhoto: Sendable, Hashable, Identifiable {
    public var id: String { field }
    /// The build's field that names it, such as `photo`.
    public var field: String
    public var file: FileReference
    /// Whether its bytes are on this device; when not, ``BuildArchive/photoData(_:of:progress:)`` downloads them.
    public var isOnDevice: Bool
    public var upload: Upload

    /// Where a photo's upload stands.
    public enum Upload: Sendable, Hashable {
        /// Not sent whole yet; `uploaded` bytes of it the server holds.
        case waiting(uploaded: Int64)
        /// On its way now.
        case uploading(FileTransfer)
        /// The server holds it.
        case uploaded
        /// The server refused it, and why; the build is refused with it.
        case refused(String)
    }

    /// How far the upload has come, from 0 to 1.
    public var uploadedFraction: Double {
        switch upload {
        case .uploaded: 1
        case .uploading(let transfer): transfer.fraction
        case .waiting(let uploaded): file.size == 0 ? 0 : Double(uploaded) / Double(file.size)
        case .refused: 0
        }
    }
}
