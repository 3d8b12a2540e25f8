import ArgumentParser
import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol

/// `outpost builds …`: crews log builds to an archive that always saves locally first.
struct BuildsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "builds",
        abstract: "Save builds to the archive (locally first), list them with their status, retry uploads.",
        subcommands: [BuildsSave.self, BuildsList.self, BuildsRetry.self, BuildsSyncAll.self])
}

struct BuildsSave: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "save", abstract: "Save a build; it uploads when it can.")
    @Option(help: "The build's name.")
    var name: String
    @Argument(help: "More fields as key=value; values that parse as JSON keep their type.")
    var fields: [String] = []
    @Option(help: "A photo of the build (repeatable): saved with it, uploaded before it.")
    var photo: [String] = []
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let values = try fieldValues(fields)
        let photos = try photo.map(attachment)
        try await options.withDevice { device in
            let archive = BuildArchive(engine: device.engine)
            let saved = try await archive.save(name: name, fields: values, photos: photos)
            say("\(saved.message) (\(saved.build.buildId))")
            for photo in try await archive.photos(of: saved.build) {
                say("    \(photo.field) \(photo.file.name ?? "") (\(byteText(photo.file.size))): saved on this device")
            }
            let ended = await Delivery.deliver(device.engine)
            let now = try await archive.current(saved)
            let status = await device.engine.status
            // Still pending while the server answers: why it has not taken the build yet, not that it is "uploading".
            let waitingOnServer = now.build.syncStatus == .pending && (status.connection == .online || status.connection == .unknown)
            if now.message != saved.message && !waitingOnServer {
                say(now.message)
                if now.build.sheet == .failed, let at = now.build.sheetRetryAt { say("    \(sheetRetryText(at))") }
            } else if now.build.syncStatus == .pending {
                say(
                    Delivery.stillPending(
                        ended: ended, connection: status.connection, lastFailure: status.lastFailure, notYet: "not uploaded yet",
                        next: "it uploads with the next sync"))
            }
            if now.build.status == .failed { say("    retry: outpost builds retry \(saved.build.buildId)") }
        }
    }
}

struct BuildsList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Every build with its status and photos; online, fetches the person's other builds first.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice { device in
            await Delivery.resume(device.engine)
            let archive = BuildArchive(engine: device.engine)
            await Delivery.refresh(device.engine) { try await archive.refresh() }
            let builds = try await archive.listWithSheets()
            if builds.isEmpty { say("no builds") }
            for build in builds {
                let sheet =
                    build.syncStatus != .synced
                    ? ""
                    : build.sheet == .unknown
                        ? "  (whether the crew's sheet has it is not known yet)"
                        : build.sheet.text.map { "  \($0.lowercased())" } ?? ""
                let attempt = build.lastSyncAttempt.map { "  (last tried \(clockText($0)))" } ?? ""
                let shownAttempt = build.syncStatus == .synced ? "" : attempt
                say("\(build.buildId)  \(build.name)  \(build.status.rawValue)\(sheet)\(shownAttempt)")
                if let problem = build.problem { say("    \(problem)") }
                for photo in try await archive.photos(of: build) { say("    \(photoLine(photo))") }
                if build.sheet == .failed, let at = build.sheetRetryAt { say("    \(sheetRetryText(at))") }
            }
            await Delivery.showNotice(device.engine)
        }
    }
}

struct BuildsRetry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "retry", abstract: "Upload one build again.")
    @Argument(help: "The build id, as `outpost builds list` shows it.")
    var buildId: String
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let retry = try await options.withDevice { device in
            try await BuildArchive(engine: device.engine).retry(buildId)
        }
        switch retry {
        case .alreadySynced:
            say("\(buildId) is already uploaded: nothing to send")
        case .sentToSheet(let build):
            if build.sheet == .failed {
                say(
                    "\(buildId): the server sends it to the crew's sheet again; the sheet has not taken it yet: \(build.sheetError ?? "no reason given")"
                )
                throw ExitCode(1)
            }
            say("\(buildId): the server sends it to the crew's sheet again")
        case .finished(let summary):
            say("\(buildId) alone: \(summary)")
            if !summary.isComplete { throw ExitCode(1) }
        }
    }
}

struct BuildsSyncAll: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sync-all", abstract: "Upload everything waiting or failed, with a summary.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let summary = try await options.withDevice { device in
            try await BuildArchive(engine: device.engine).syncAll { progress in
                say(Delivery.progressLine(progress, sending: "uploading"))
            }
        }
        say(summary.description)
        if !summary.isComplete { throw ExitCode(1) }
    }
}

/// When the server sends a build to the crew's sheet again: a time still to come, or, once passed (the try is
/// due or under way), that it is trying now.
func sheetRetryText(_ at: Date, now: Date = Date()) -> String {
    at > now ? "the server tries the sheet again at \(clockText(at))" : "the server is trying the sheet again now"
}

/// A photo's line under its build: "photo shed.jpg (5.2 MB): 40 % uploaded".
func photoLine(_ photo: BuildPhoto) -> String {
    let name = photo.file.name.map { " \($0)" } ?? ""
    let state: String
    switch photo.upload {
    case .uploaded: state = "uploaded"
    case .refused(let reason): state = "refused by the server: \(reason)"
    case .uploading, .waiting:
        let percent = Int(photo.uploadedFraction * 100)
        state = percent == 0 ? "not uploaded yet" : "\(percent) % uploaded"
    }
    return "\(photo.field)\(name) (\(byteText(photo.file.size))): \(state)"
}
