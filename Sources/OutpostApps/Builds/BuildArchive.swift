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

    /// Saves a build locally, then tries to upload it when the device is online.
    /// - Parameter fields: the crew's own fields besides the name.
    /// - Throws: ``ClientError`` `invalidInput` for a name or field the server would refuse; nothing is
    ///   written then. An upload failure is not thrown: the result says it.
    public func save(name: String, fields: [String: JSONValue] = [:]) async throws -> BuildSave {
        var fields = fields
        fields[Build.Field.name] = .string(name)
        if let problem = Build.problem(in: fields) { throw ClientError(.invalidInput, problem) }
        // Saved and returned at once; the upload runs in the background.
        let record = try await engine.save(
            LocalStore.Write(collection: Build.collection, recordId: newId(), fields: fields))
        return BuildSave(build: BuildEntry(record), connection: await engine.status.connection)
    }

    /// Every build on the device, newest first, with its status and, for a failed one, why.
    public func list() async throws -> [BuildEntry] {
        try await engine.store.records(collection: Build.collection).filter { !$0.tombstone }.map(BuildEntry.init)
    }

    /// ``list()`` with each uploaded build's ``SheetState``, asked of the server when the device is online.
    /// Offline, or when the server cannot say, the builds keep ``SheetState/unknown``.
    public func listWithSheets() async throws -> [BuildEntry] {
        var builds = try await list()
        let uploaded = builds.filter { $0.syncStatus == .synced }.map(\.buildId)
        guard !uploaded.isEmpty, await engine.status.isOnline else { return builds }
        var states: [String: SheetState] = [:]
        for start in stride(from: 0, to: uploaded.count, by: 200) {
            let ids = Array(uploaded[start..<min(start + 200, uploaded.count)])
            // A part the server did not answer leaves its builds unknown; the others are still told.
            guard let answer = try? await engine.deliveries(collection: Build.collection, recordIds: ids) else { continue }
            for record in answer.records {
                states[record.recordId] = record.receivers == 0 ? .noSheet : record.delivered ? .received : .waiting
            }
        }
        for index in builds.indices {
            if let state = states[builds[index].buildId] { builds[index].sheet = state }
        }
        return builds
    }

    /// Uploads one build again.
    /// - Throws: ``ClientError`` `notFound` for a build this device does not hold.
    public func retry(_ buildId: String) async throws -> BuildRetry {
        guard let record = try await engine.store.record(collection: Build.collection, recordId: buildId), !record.tombstone else {
            throw ClientError(.notFound, "no build \(buildId) in this archive")
        }
        if record.syncStatus == .synced { return .alreadySynced }
        return .finished(try await engine.retry(collection: Build.collection, scope: "", recordId: buildId))
    }

    public func syncAll(progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws -> SyncSummary {
        try await engine.retryAll(progress: progress)
    }

    /// The build as it stands now: after a save, once its upload ended or was given up waiting on.
    public func current(_ saved: BuildSave) async throws -> BuildSave {
        guard let record = try await engine.store.record(collection: Build.collection, recordId: saved.build.buildId)
        else { return saved }
        return BuildSave(build: BuildEntry(record), connection: await engine.status.connection)
    }
}

/// What "Retry" on one build did.
public enum BuildRetry: Sendable, Hashable {
    /// The server already had it: nothing was sent.
    case alreadySynced
    /// That build alone was sent.
    case finished(SyncSummary)
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

    public init(_ record: LocalRecord) {
        buildId = record.recordId
        name = record.fields[Build.Field.name]?.stringValue ?? ""
        fields = record.fields
        syncStatus = record.syncStatus
        syncError = record.syncError
        savedAt = record.createdAt.date
    }

    public var badge: SyncBadge { SyncBadge(status: syncStatus, error: syncError) }
}

/// Whether the crew's sheet (where the server's connector of builds sends them) has a build.
public enum SheetState: String, Sendable, Hashable {
    /// Not known: the device is offline, the build is not uploaded yet, or the server was not asked.
    case unknown
    /// Builds go to no sheet: uploaded is done.
    case noSheet = "no_sheet"
    /// The server has the build; the sheet does not have this version yet.
    case waiting
    /// The sheet has the build as the server has it.
    case received

    /// What the archive says, or nil when it says nothing.
    public var text: String? {
        switch self {
        case .unknown, .noSheet: nil
        case .waiting: AppText.sheetWaiting
        case .received: AppText.sheetReceived
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
        case .synced: return "Build \"\(build.name)\" saved and uploaded."
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
        case .rejected:
            return "Build \"\(build.name)\" saved on this device; the server refused it: \(build.syncError ?? "no reason given")"
        }
    }
}
