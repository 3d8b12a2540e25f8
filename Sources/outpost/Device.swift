import ArgumentParser
import AsyncHTTPClient
import Foundation
import OutpostClient
import OutpostProtocol

/// `outpost device …`: act as a field device from a terminal.
struct DeviceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device",
        abstract: "Act as a field device: a durable encrypted store, an outbox and a sync engine.",
        subcommands: [
            DeviceInit.self, DeviceStatus.self, DeviceSync.self, DeviceRetry.self, DeviceRun.self,
            DeviceRecords.self, DevicePut.self, DeviceNotice.self,
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
        try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url))
    }

    /// Opens the device, runs `body`, and shuts its HTTP client down, whatever happens.
    func withDevice<T>(escalateAfter: Duration? = nil, _ body: (Device) async throws -> T) async throws -> T {
        try await withDeviceHTTPClient { client in
            // The SDK's errors (ClientError) reach `Main`, which prints their message as the one line.
            let device = try await Device.open(store: try openStore(), httpClient: client, configure: { configuration in
                configuration.appVersion = "outpost-cli/\(OutpostVersion.current)"
                if let escalateAfter { configuration.escalation.threshold = escalateAfter }
            })
            return try await body(device)
        }
    }
}

struct DeviceInit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "init", abstract: "Set up a device store: server, token, device id.")

    @Option(help: "The server, such as http://127.0.0.1:8080.")
    var server: String
    @Option(help: "The bearer token from `outpost token`.")
    var token: String
    @Option(name: .customLong("device-id"), help: "This device's id (default: a new random one).")
    var deviceId: String?
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        guard let url = URL(string: server) else { throw CLIError("--server must be a URL such as http://127.0.0.1:8080") }
        let deviceId = self.deviceId ?? "device-\(UUID().uuidString.prefix(8).lowercased())"
        try await Device.initialize(store: try options.openStore(), server: url, token: token, deviceId: deviceId)
        say("device \(deviceId) ready: store \(options.url.path), server \(url.absoluteString)")
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
            await device.engine.probe()
            let status = await device.engine.status
            say("device:   \(device.deviceId)")
            say("server:   \(device.serverURL.absoluteString) (\(status.connectionText))")
            say("pending:  \(status.pendingCount)")
            say("failed:   \(status.failedCount)")
            say("status:   \(status.offlineIndicatorText)")
            _ = try? await device.engine.checkPersistentFailures()
            if let notice = await device.engine.status.persistentFailureNotice {
                say("notice:   \(notice.message) [\(PersistentFailureNotice.actionTitle): outpost device notice --retry]")
            }
        }
    }
}

struct DeviceSync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sync", abstract: "Push everything queued, with progress and a summary.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let summary = try await options.withDevice { try await Self.sync($0) }
        if summary.failed > 0 { throw ExitCode(1) }
    }

    static func sync(_ device: Device) async throws -> SyncSummary {
        let summary = try await device.engine.sync { progress in
            say("pushed chunk \(progress.chunk): \(progress.sent)/\(progress.total)")
        }
        say("sync: \(summary)")
        return summary
    }
}

struct DeviceRetry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "retry", abstract: "Retry one record, or every failed one with --all.")
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
        if summary.failed > 0 { throw ExitCode(1) }
    }
}

struct DeviceRecords: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "records", abstract: "List the records on this device with their sync badges.")
    @Flag(help: "Only records waiting to sync.")
    var pending = false
    @Flag(help: "Only records that failed to sync.")
    var failed = false
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let store = try options.openStore()
        let filter: LocalStore.Filter = pending ? .pending : failed ? .failed : .all
        let records = try await store.records(filter)
        for record in records {
            let fields = record.fields.keys.sorted().map { "\($0)=\(record.fields[$0]!.displayText)" }.joined(separator: " ")
            let path = record.scope.isEmpty ? "\(record.collection)/\(record.recordId)" : "\(record.collection)/\(record.scope)/\(record.recordId)"
            say("\(record.badge.symbol)  \(path)  \(record.deleted ? "(deleted)" : fields)")
            if record.syncStatus == .failed, let error = record.syncError {
                say("    \(error)")
            }
        }
        if records.isEmpty { say("no records") }
    }
}

struct DevicePut: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "put", abstract: "Write any record: saved locally first, then synced if the server answers.")
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
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let values = try fieldValues(fields)
        let scope = self.scope ?? LocalRecord.scope(of: values, in: collection)
        try await options.withDevice { device in
            await device.engine.probe(syncingPending: false)
            let saved = try await device.engine.saveAndPush(
                LocalStore.Write(
                    collection: collection, scope: scope, recordId: recordId, op: delete ? .delete : .upsert, fields: values))
            switch saved.syncStatus {
            case .synced: say("saved \(collection)/\(recordId): synced")
            case .pending: say("saved \(collection)/\(recordId) locally: pending sync (\(await device.engine.status.offlineIndicatorText))")
            case .failed: say("saved \(collection)/\(recordId) locally: sync failed: \(saved.syncError ?? "unknown"); retry with `outpost device retry \(recordId)`")
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
            _ = try await engine.checkPersistentFailures()
            guard await engine.status.persistentFailureNotice != nil else {
                say("no notice: nothing has failed to sync for longer than \(escalation.escalateAfter)")
                return
            }
            if dismiss { try await engine.dismissPersistentFailureNotice() }
            if retry {
                say("retrying…")
                if case .finished(let summary) = try await engine.retryPersistentFailures() { say("sync: \(summary)") }
            }
            if let notice = await engine.status.persistentFailureNotice {
                say("notice: \(notice.message) [\(PersistentFailureNotice.actionTitle): outpost device notice --retry]")
                if let error = notice.retryError { say("    \(error)") }
                if retry { throw ExitCode(1) }
            } else {
                say("notice cleared: every record has synced")
            }
        }
    }
}
