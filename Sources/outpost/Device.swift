import ArgumentParser
import AsyncHTTPClient
import Foundation
import Logging
import OutpostApps
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostRecords

/// `outpost device …`: act as a field device from a terminal.
struct DeviceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device",
        abstract: "Act as a field device: a durable encrypted store, an outbox and a sync engine.",
        subcommands: [
            DeviceInit.self, DeviceStatus.self, DeviceSync.self, DeviceRetry.self, DeviceRun.self,
            DeviceRecords.self, DevicePut.self, DeviceFile.self, DeviceNotice.self, DeviceDiscard.self, DeviceResolve.self,
            DeviceLogin.self,
        ])
}

/// Where the device store lives: shared by every device command.
struct DeviceStoreOptions: ParsableArguments {
    @Option(name: .customLong("store"), help: "The device store file (default $OUTPOST_DEVICE_STORE, else ./outpost-device/device.sqlite).")
    var store: String?

    var url: URL {
        let path = store ?? ProcessInfo.processInfo.environment["OUTPOST_DEVICE_STORE"] ?? "./outpost-device/device.sqlite"
        return URL(fileURLWithPath: path)
    }

    func openStore() throws -> LocalStore {
        try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
    }

    /// The runtime an app would make for this store: the same engine, token store and schedule as the SDK's.
    func runtimeConfiguration(client: HTTPClient, escalateAfter: Duration? = nil) -> Outpost.Configuration {
        var configuration = Outpost.Configuration.fieldApps(location: .file(url), server: nil, transport: .http(client: client))
        configuration.appVersion = "outpost-cli/\(OutpostVersion.current)"
        // A device command says what happened in its own lines: the runtime's log shows only what went wrong.
        configuration.logger = .cli("outpost-device", level: .warning)
        if let escalateAfter { configuration.escalation.threshold = escalateAfter }
        return configuration
    }

    /// Opens the runtime on this store, runs `body` with it, and closes it and its HTTP client, whatever happens.
    func withRuntime<T>(
        escalateAfter: Duration? = nil, configure: (inout Outpost.Configuration) -> Void = { _ in },
        _ body: (Outpost) async throws -> T
    ) async throws -> T {
        try await withDeviceHTTPClient { client in
            var configuration = runtimeConfiguration(client: client, escalateAfter: escalateAfter)
            configure(&configuration)
            // The SDK's errors (ClientError) reach `Main`, which prints their message as the one line.
            let outpost = try await Outpost(configuration)
            do {
                let result = try await body(outpost)
                await outpost.close()
                return result
            } catch {
                await outpost.close()
                throw error
            }
        }
    }

    /// Opens the device, runs `body`, and closes the store and its HTTP client, whatever happens.
    func withDevice<T>(escalateAfter: Duration? = nil, _ body: (Device) async throws -> T) async throws -> T {
        try await withRuntime(escalateAfter: escalateAfter) { outpost in
            let device = try await outpost.openDevice
            // A delivery a save started stops before the client does: what it had not delivered stays queued. The
            // heartbeat after it goes, within a bound, so that the monitor sees the device as it is.
            do {
                let result = try await body(device)
                await device.engine.stopDelivery()
                await device.engine.awaitHeartbeat(upTo: Delivery.heartbeatWait)
                return result
            } catch {
                await device.engine.stopDelivery()
                throw error
            }
        }
    }
}

struct DeviceInit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "init", abstract: "Set up a device store: server, token, device id.")

    @Option(help: "The server, such as http://127.0.0.1:8080.")
    var server: String
    @Option(help: "Where to sync when the server cannot be reached, such as the venue relay of the day.")
    var fallback: String?
    @Option(help: "The bearer token from `outpost token`.")
    var token: String
    @Option(name: .customLong("device-id"), help: "This device's id (default: a new random one).")
    var deviceId: String?
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        guard let url = URL(string: server) else { throw CLIError("--server must be a URL such as http://127.0.0.1:8080") }
        let deviceId = self.deviceId ?? "device-\(UUID().uuidString.prefix(8).lowercased())"
        let fallbackURL = try fallback.map { text in
            guard let url = URL(string: text) else { throw CLIError("--fallback must be a URL such as http://10.0.0.2:8080") }
            return url
        }
        try await Device.initialize(
            store: try options.openStore(), server: url, fallback: fallbackURL, token: token, deviceId: deviceId)
        let also = fallbackURL.map { ", fallback \($0.absoluteString)" } ?? ""
        say("device \(deviceId) ready: store \(options.url.path), server \(url.absoluteString)\(also)")
    }
}

/// How long a record may fail before the device escalates it: `--escalate-after`, 24 h by default.
struct EscalationOptions: ParsableArguments {
    @Option(name: .customLong("escalate-after"), help: "How long a record may fail to sync before it is escalated, such as 24h.")
    var escalateAfter: DurationArgument = DurationArgument(argument: "24h")!
}

struct DeviceStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show connectivity and what waits to sync.")
    @OptionGroup var escalation: EscalationOptions
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice(escalateAfter: escalation.escalateAfter.duration) { device in
            await Delivery.resume(device.engine)
            let status = await device.engine.status
            say("device:   \(device.deviceId)")
            say("server:   \(device.serverURL.absoluteString) (\(Delivery.connectionText(status)))")
            say("pending:  \(status.pendingCount)")
            say("failed:   \(status.failedCount)")
            say("refused:  \(status.refusedCount)")
            say("status:   \(status.offlineIndicatorText)")
            _ = try? await Delivery.escalate(device.engine)
            await Delivery.showNotice(device.engine)
        }
    }
}

struct DeviceSync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sync", abstract: "Push everything queued, with progress and a summary.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let summary = try await options.withDevice { try await Self.sync($0) }
        if !summary.isComplete { throw ExitCode(1) }
    }

    static func sync(_ device: Device) async throws -> SyncSummary {
        let summary = try await device.engine.sync { progress in
            say(Delivery.progressLine(progress, sending: "pushed chunk \(progress.chunk)"))
        }
        say("sync: \(summary)")
        return summary
    }
}

struct DeviceRetry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retry",
        abstract: "Send one record again, alone (a refused one as it is), or everything waiting with --all.")
    @Argument(help: "The record to retry.")
    var recordId: String?
    @Flag(help: "Retry everything (sync all).")
    var all = false
    @OptionGroup var options: DeviceStoreOptions

    func validate() throws {
        guard (recordId == nil) != !all else { throw ValidationError("give a RECORD_ID or --all, not both") }
    }

    func run() async throws {
        let summary: SyncSummary = try await options.withDevice { device in
            try await all ? device.engine.retryAll() : device.engine.retry(recordId: recordId ?? "")
        }
        say("sync: \(summary)")
        if !summary.isComplete { throw ExitCode(1) }
    }
}

struct DeviceRecords: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "records", abstract: "List the records on this device with their sync badges.")
    @Flag(help: "Only records waiting to sync.")
    var pending = false
    @Flag(help: "Only records that failed to sync and will be retried.")
    var failed = false
    @Flag(
        name: [.customLong("refused"), .customLong("rejected")],
        help: "Only records the server refused, or that conflict: they wait for you.")
    var refused = false
    @OptionGroup var options: DeviceStoreOptions

    func validate() throws {
        guard [pending, failed, refused].filter({ $0 }).count <= 1 else {
            throw ValidationError("give at most one of --pending, --failed and --refused")
        }
    }

    func run() async throws {
        let store = try options.openStore()
        let filter: LocalStore.Filter = pending ? .pending : failed ? .failed : refused ? .refused : .all
        let records = try await store.records(filter)
        // A record waiting longer than a day shows as not synced for that long, not as pending.
        let threshold = EscalationPolicy().threshold
        let cutoff = Date().addingTimeInterval(-Double(threshold.components.seconds))
        let overdue = Set(try await store.outbox.persistentFailures(writtenBefore: cutoff).map { "\($0.collection)/\($0.recordId)" })
        for record in records {
            let fields = Self.fieldsText(record)
            let badge = SyncBadge(
                status: record.syncStatus, error: record.syncError, isConflict: record.conflict != nil,
                isAtRelay: record.isAtRelay, overdue: overdue.contains("\(record.collection)/\(record.recordId)") ? threshold : nil)
            say("\(badge.symbol)  \(record.path)  \(record.tombstone ? "(deleted)" : fields)")
            for line in Self.details(record) { say("    \(line)") }
        }
        if records.isEmpty { say(refused ? "no refused records" : "no records") }
        // A synced build is on the server; whether the crew's sheet has it too is the archive's to say.
        if records.contains(where: { $0.collection == Build.collection && $0.syncStatus == .synced }) {
            say("synced: the server has the record; whether the crew's sheet has a build: outpost builds list")
        }
    }

    /// The record's fields as `name=value`, by name.
    static func fieldsText(_ record: LocalRecord) -> String {
        record.fields.keys.sorted().map { "\($0)=\(record.fields[$0]!.displayText)" }.joined(separator: " ")
    }

    /// The lines under a record that failed, was refused or conflicts: why, and what the person can do.
    static func details(_ record: LocalRecord) -> [String] {
        switch record.syncStatus {
        case .failed:
            return [record.syncError ?? "unknown error"]
        case .refused:
            if let conflict = record.conflict {
                let yours = conflict.fields.map { "\($0)=\(record.fields[$0]?.displayText ?? "(none)")" }.joined(separator: " ")
                let theirs = conflict.fields.map { "\($0)=\(conflict.serverFields[$0]?.displayText ?? "(none)")" }.joined(separator: " ")
                return [
                    record.syncError ?? "Conflict on a protected field",
                    "yours: \(yours)   server's: \(theirs)",
                    "keep the server's: outpost device resolve \(record.recordId) --keep-server; send yours on top: outpost device resolve \(record.recordId) --resend",
                ]
            }
            // Attendance records are written once: an edit would be refused again. A check-out refused for want
            // of a check-in goes through once the check-in, made on another device, has reached the server.
            let isAttendance = record.collection == Attendance.collection
            let edit =
                !isAttendance
                ? "edit it and it is sent again, or "
                : record.fields[Attendance.Field.action] == .string(Attendance.Action.checkOut.rawValue) && record.serverCopy == nil
                    ? "once your check-in has reached the server, send it again (outpost device retry \(record.recordId)), or " : ""
            return [
                record.syncError ?? "refused by the server",
                "\(edit)discard it (a copy stays on this device): outpost device discard \(record.recordId)",
            ]
        case .pending, .synced:
            return []
        }
    }
}

extension LocalRecord {
    /// "collection/id", or "collection/scope/id" for a record of a scope.
    var path: String { scope.isEmpty ? "\(collection)/\(recordId)" : "\(collection)/\(scope)/\(recordId)" }
}

/// Which record a command names: its id, narrowed by collection and scope when the id is not unique.
struct RecordOptions: ParsableArguments {
    @Argument(help: "The record id.")
    var recordId: String
    @Option(help: "The record's collection, when the id is in more than one.")
    var collection: String?
    @Option(help: "The record's scope (such as an event id), when the id is in more than one.")
    var scope: String?

    func find(in store: LocalStore, _ filter: LocalStore.Filter = .all) async throws -> LocalRecord {
        let found = try await store.records(filter, collection: collection, scope: scope, recordId: recordId)
        guard let record = found.first else {
            throw CLIError(filter == .refused ? "no refused record \(recordId) on this device" : "no record \(recordId) on this device")
        }
        guard found.count == 1 else {
            throw CLIError("\(recordId) names \(found.count) records (\(found.map(\.path).joined(separator: ", "))): add --collection or --scope")
        }
        return record
    }
}

struct DeviceDiscard: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "discard",
        abstract: "Give up a record the server refused; a sealed copy stays on this device for audit.")
    @OptionGroup var record: RecordOptions
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice { device in
            let found = try await record.find(in: device.store, .refused)
            try await device.engine.discard(collection: found.collection, scope: found.scope, recordId: found.recordId)
            say("discarded \(found.path); a sealed copy stays on this device")
            // A refused edit of a record the server holds: the server's version takes its place, from a pull.
            if found.version != nil {
                await Delivery.resume(device.engine)
                let engine = device.engine
                await Delivery.refresh(engine) {
                    _ = try await engine.pull(collection: found.collection, scope: found.scope.isEmpty ? nil : found.scope)
                }
                if let restored = try await device.store.record(collection: found.collection, scope: found.scope, recordId: found.recordId) {
                    say("the server's version: \(restored.badge.symbol)  \(restored.path)  \(DeviceRecords.fieldsText(restored))")
                } else {
                    say("the server's version comes back with the next refresh")
                }
            }
            await Delivery.showNotice(device.engine)
        }
    }
}

struct DeviceResolve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve", abstract: "Settle a conflict: keep the server's value, or send yours on top of it.")
    @OptionGroup var record: RecordOptions
    @Flag(name: .customLong("keep-server"), help: "Take the server's values of the conflicting fields.")
    var keepServer = false
    @Flag(help: "Send your values again, on top of the server's version.")
    var resend = false
    @OptionGroup var options: DeviceStoreOptions

    func validate() throws {
        guard keepServer != resend else { throw ValidationError("give --keep-server or --resend") }
    }

    func run() async throws {
        try await options.withDevice { device in
            let found = try await record.find(in: device.store, .refused)
            guard found.conflict != nil else {
                throw CLIError("\(found.path) has no conflict: it was refused (\(found.syncError ?? "no reason")); edit or discard it")
            }
            if keepServer {
                try await device.engine.keepServerValue(collection: found.collection, scope: found.scope, recordId: found.recordId)
                say("\(found.path): kept the server's value")
            } else {
                try await device.engine.resendOverServerValue(collection: found.collection, scope: found.scope, recordId: found.recordId)
                say("\(found.path): your value is saved again on top of the server's")
                try await Delivery.report(device, collection: found.collection, scope: found.scope, recordId: found.recordId)
            }
        }
    }
}

struct DevicePut: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "put", abstract: "Write any record: saved locally first, then synced if the server answers.")
    @Argument(help: "The collection, such as notes.")
    var collection: String
    @Argument(help: "The record id.")
    var recordId: String
    @Argument(help: "Fields as key=value; values that parse as JSON (numbers, true, null, {…}) keep their type.")
    var fields: [String] = []
    @Option(help: "The record's scope, such as an event id, in a collection with scopes (default: the scope its fields name).")
    var scope: String?
    @Flag(help: "Delete the record instead.")
    var delete = false
    @Option(name: .customLong("file"), help: "Attach a file as field=path (repeatable); it uploads before the record.")
    var files: [String] = []
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let values = try fieldValues(fields)
        let attached = try attachments(files)
        if delete && !attached.isEmpty { throw CLIError("a delete carries no files") }
        let scope = self.scope ?? StoreSchema.fieldApps.scope(of: values, in: collection)
        try await options.withDevice { device in
            let saved = try await device.engine.save(
                LocalStore.Write(
                    collection: collection, scope: scope, recordId: recordId, op: delete ? .delete : .upsert, fields: values),
                attaching: attached)
            say("saved \(saved.path) on this device: pending sync (\(await device.engine.status.offlineIndicatorText))")
            try await Delivery.report(device, collection: collection, scope: saved.scope, recordId: saved.recordId)
            if let record = try await device.engine.store.record(collection: collection, scope: saved.scope, recordId: saved.recordId) {
                for line in try await fileLines(record, engine: device.engine) { say("    \(line)") }
            }
        }
    }
}

struct DeviceNotice: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notice",
        abstract: "The persistent-failure notice: records failing to sync for too long. It cannot be dismissed.")
    @Flag(help: "Retry sync (the notice's action).")
    var retry = false
    @Flag(help: "Try to dismiss the notice (refused: it goes when those records sync).")
    var dismiss = false
    @OptionGroup var escalation: EscalationOptions
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice(escalateAfter: escalation.escalateAfter.duration) { device in
            let engine = device.engine
            await engine.probe()
            try await Delivery.escalate(engine)
            guard await engine.status.persistentFailureNotice != nil else {
                say("no notice: nothing has waited to sync for longer than \(escalation.escalateAfter)")
                if let refused = await engine.status.refusedText { say("attention: \(refused) (outpost device records --refused)") }
                return
            }
            if dismiss { try await engine.dismissPersistentFailureNotice() }
            if retry {
                say("retrying…")
                if case .finished(let summary) = try await engine.retryPersistentFailures() { say("sync: \(summary)") }
            }
            if await engine.status.persistentFailureNotice != nil {
                await Delivery.showNotice(engine)
                if retry { throw ExitCode(1) }
            } else {
                say("notice cleared: every record that can sync has synced")
                if let refused = await engine.status.refusedText { say("attention: \(refused) (outpost device records --refused)") }
            }
        }
    }
}
