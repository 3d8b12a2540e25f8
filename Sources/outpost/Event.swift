import ArgumentParser
import Foundation
import NIOConcurrencyHelpers
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// `outpost event …`: an event's roster on this device.
struct EventCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "event",
        abstract: "Download an event's roster to this device, refresh it, and look guests up offline.",
        subcommands: [EventOpen.self, EventRefresh.self, EventScan.self, EventFind.self, EventLookup.self, EventPending.self])
}

/// The event a command acts on: `--event`, or the last one opened on this device.
struct EventOption: ParsableArguments {
    @Option(help: "The event id (default: the last one opened on this device).")
    var event: String?

    /// The opened event's roster, from the device store alone (no network), once fully downloaded.
    func offlineRoster(_ options: DeviceStoreOptions) async throws -> (ReferenceData, String) {
        let store = try options.openStore()
        return (ReferenceData(store: store, transport: OfflineTransport()), try await resolve(store))
    }

    func resolve(_ store: LocalStore) async throws -> String {
        if let event { return try checkedEvent(event) }
        guard let current = try await store.setting(LocalStore.currentEventSetting) else {
            throw CLIError("no event opened on this device yet: run `outpost event open EVENT`")
        }
        return current
    }
}

struct EventOpen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "Download the event's whole roster (resumes where it stopped); then it works offline.")

    @Argument(help: "The event id.")
    var event: String
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let event = try checkedEvent(self.event)
        try await options.withDevice { device in
            try await device.engine.setCurrentEvent(event)
            let data = ReferenceData(store: device.store, transport: device.transport)
            let bar = ProgressBar(label: "roster \(event)")
            do {
                let state = try await data.download(collection: Guest.collection, scope: event) { bar.update($0) }
                bar.finish()
                say("\(event): \(state.message())")
            } catch let error as TransportError {
                try await stopped(data, event: event, bar: bar, because: error.cliMessage)
            } catch let error as ClientError where error.code == .busy {
                try await stopped(
                    data, event: event, bar: bar, because: "another `outpost` process downloaded this roster meanwhile")
            }
        }
    }

    /// Ends an `open` whose download stopped: the progress bar's line, what is stored, and how to go on.
    private func stopped(_ data: ReferenceData, event: String, bar: ProgressBar, because reason: String) async throws -> Never {
        bar.finish()
        if case .incomplete(let stored, let total) = try await data.state(collection: Guest.collection, scope: event) {
            say("\(event): \(ReferenceMessages.incomplete) (\(stored) of \(total) stored)")
        }
        throw CLIError("the download stopped: \(reason); run `outpost event open \(event)` again to resume")
    }
}

struct EventRefresh: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refresh", abstract: "Fetch only what changed since the last download or refresh.")

    @OptionGroup var eventOption: EventOption
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice { device in
            let event = try await eventOption.resolve(device.store)
            let data = ReferenceData(store: device.store, transport: device.transport)
            do {
                let summary = try await data.refresh(collection: Guest.collection, scope: event)
                say("\(event): \(summary.updated) updated, \(summary.removed) removed")
                // The doors' check-ins too: a guest checked in elsewhere, or a scan the server kept over this
                // door's, shows as the server has it.
                let checkIns = try await device.engine.pull(collection: CheckIn.collection, scope: event)
                say("\(event): \(checkIns == 1 ? "1 check-in" : "\(checkIns) check-ins") fetched from the server")
            } catch let error as TransportError {
                throw CLIError("refresh failed: \(error.cliMessage)")
            }
        }
    }
}

struct EventScan: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scan", abstract: "Check a guest in: decided on the device, queued offline, pushed when online.")

    @Argument(help: "The guest id, as the badge's code reads.")
    var guestId: String
    @Option(
        name: .customLong("lookup-wait"),
        help: "How long the scan may spend, before it is saved, asking the server for other doors' check-ins, such as 150ms.")
    var lookupWait: DurationArgument = DurationArgument(argument: "150ms")!
    @OptionGroup var eventOption: EventOption
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice { device in
            let event = try await eventOption.resolve(device.store)
            let desk = CheckInDesk(device: device, event: event, lookupBound: lookupWait.duration)
            let outcome: ScanOutcome
            do {
                outcome = try await desk.scan(guestId)
            } catch let error as ClientError where error.code == .unknownGuest {
                throw CLIError(walkInMessage)
            }
            switch outcome {
            case .checkedIn(let scan, let warning):
                let name = scan.guestName.map { " \($0)" } ?? ""
                let connection = await device.engine.status.connection
                let state: String
                switch scan.syncStatus {
                case .synced: state = "synced"
                case .failed: state = "saved on this device; sync failed, will retry: \(scan.syncError ?? "unknown error")"
                case .pending where scan.isAtRelay: state = "saved at the venue relay, not yet on the server"
                default:
                    switch connection {
                    case .online: state = "saved; the server has not confirmed it yet"
                    case .offline: state = "saved offline, pending sync"
                    case .unknown: state = "saved on this device, pending sync"
                    case .serverTrouble(let problem): state = "saved on this device, pending sync; the server is having trouble (\(problem))"
                    }
                }
                say("Checked in: \(scan.guestId)\(name) at \(clockText(scan.scannedAt)) (\(state))")
                guestLines(scan.guest)
                if let warning { say(warning) }
                // The door has its answer; a server that was not known to take records yet is given the scan now,
                // as every other save does, and a verdict that comes then is the door's too.
                if scan.syncStatus == .pending, connection != .online, connection != .offline {
                    try await deliverLate(scan, desk: desk, device: device)
                }
            case .alreadyCheckedIn(let first):
                say("Already checked in at \(clockText(first.scannedAt)) by \(first.scannedBy)")
            case .refused(let scan, let reason):
                guestLines(scan.guest)
                await Delivery.showNotice(device.engine)
                throw CLIError(reason)
            }
            await Delivery.showNotice(device.engine)
        }
    }
}

extension EventScan {
    /// The second line of a scan saved before the server was known to take records: delivers it as the other
    /// saves do (``Delivery/deliver(_:)``) and says where it then stands. A refusal that comes now ends the
    /// command as a refused scan does: the guest may not go in.
    private func deliverLate(_ scan: ScanRecord, desk: CheckInDesk, device: Device) async throws {
        let ended = await Delivery.deliver(device.engine)
        guard var record = try await device.store.record(collection: CheckIn.collection, scope: scan.event, recordId: scan.guestId)
        else { return }
        if record.syncStatus == .refused {
            throw CLIError("refused by the server after all: \(CheckInDesk.verdict(of: record))")
        }
        // The scan was decided without the other doors' scans: the server keeps the first.
        if record.syncStatus == .synced, let kept = try await desk.confirm(scan.guestId) { record = kept }
        if let first = ScanRecord(record, guest: nil), first.scannedBy != device.deviceId {
            say("already checked in at \(clockText(first.scannedAt)) by \(first.scannedBy): the server keeps that scan")
            return
        }
        let status = await device.engine.status
        say(Delivery.line(record, ended: ended, connection: status.connection, lastFailure: status.lastFailure))
    }
}

/// What the door reads when a guest is not on the device's roster: a walk-in added since the last refresh, or
/// a wrong code.
let walkInMessage = "\(ReferenceMessages.notFound) (`outpost event refresh` fetches walk-ins)"

/// The organizer's note and the arrival alert of a guest, under a scan or a lookup.
func guestLines(_ guest: GuestDetails?) {
    if let alert = guest?.alert { say("  alert: \(alert)") }
    if let note = guest?.note { say("  note:  \(note)") }
}

struct EventPending: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pending", abstract: "The event's scans that have not reached the server yet.")

    @OptionGroup var eventOption: EventOption
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        // Read from the device store alone: no network.
        try await options.withDevice { device in
            let desk = CheckInDesk(device: device, event: try await eventOption.resolve(device.store))
            let scans = try await desk.pending()
            say(scans.count == 1 ? "1 check-in pending sync" : "\(scans.count) check-ins pending sync")
            for scan in scans {
                say("\(scan.guestId)  \(clockText(scan.scannedAt))  \(scan.badge.symbol)")
                if scan.syncStatus == .failed, let error = scan.syncError { say("    \(error)") }
            }
            if let warning = try await desk.largeQueueWarning() { say(warning) }
            let refused = try await desk.refused()
            if !refused.isEmpty {
                say(refused.count == 1 ? "1 check-in refused by the server:" : "\(refused.count) check-ins refused by the server:")
                for (scan, reason) in refused {
                    say("\(scan.guestId)  \(clockText(scan.scannedAt))  \(scan.badge.symbol)  \(reason)")
                }
                say("    discard one (a copy stays on this device): outpost device discard GUEST_ID --collection checkins")
            }
            await Delivery.showNotice(device.engine)
        }
    }
}

/// "HH:mm:ss" in the terminal's time zone.
func clockText(_ date: Date) -> String {
    let formatter = DateFormatter()
    formatter.dateFormat = "HH:mm:ss"
    formatter.timeZone = .current
    return formatter.string(from: date)
}

struct EventFind: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find", abstract: "Find guests by name prefix or e-mail, offline.")

    @Argument(help: "A name prefix (two letters at least) or an e-mail.")
    var query: String
    @OptionGroup var eventOption: EventOption
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let (data, event) = try await eventOption.offlineRoster(options)
        guard try await data.state(collection: Guest.collection, scope: event).isReady else {
            throw CLIError(ReferenceMessages.incomplete)
        }
        let found = try await data.search(collection: Guest.collection, scope: event, query: query)
        if found.isEmpty { say(walkInMessage) }
        for guest in found {
            say("\(guest.recordId)  \(guest.fields["name"]?.displayText ?? "")  \(guest.fields["email"]?.displayText ?? "")")
        }
    }
}

struct EventLookup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lookup", abstract: "Look one guest up by id, offline.")

    @Argument(help: "The guest id.")
    var guestId: String
    @OptionGroup var eventOption: EventOption
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let (data, event) = try await eventOption.offlineRoster(options)
        let result = try await data.lookup(collection: Guest.collection, scope: event, recordId: guestId)
        switch result {
        case .found(let guest):
            let status = guest.fields["status"]?.stringValue
            if status == "cancelled" { throw CLIError(ReferenceMessages.cancelled) }
            say("\(guest.recordId)  \(guest.fields["name"]?.displayText ?? "")  \(guest.fields["email"]?.displayText ?? "")")
            guestLines(GuestDetails(guest))
        case .notFound:
            throw CLIError(walkInMessage)
        default:
            throw CLIError(result.message ?? walkInMessage)
        }
    }
}

/// For commands that work from the device store alone.
struct OfflineTransport: SyncTransport {
    func push(_ request: PushRequest) async throws -> PushResponse { throw Self.offline }
    func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse { throw Self.offline }
    func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse { throw Self.offline }
    func health() async throws -> HealthResponse { throw Self.offline }
    static let offline = TransportError(kind: .network, message: "offline")
}

/// A progress bar on a terminal; plain lines every 10 % in a pipe.
final class ProgressBar: Sendable {
    let label: String
    private let isTerminal = isatty(STDOUT_FILENO) != 0
    /// The last tenth said in a pipe; held while a line is written, so that updates never interleave.
    private let lastDecile = NIOLockedValueBox(-1)

    init(label: String) {
        self.label = label
    }

    func update(_ progress: DownloadProgress) {
        lastDecile.withLockedValue { lastDecile in
            let fraction = progress.total == 0 ? 1 : Double(progress.stored) / Double(progress.total)
            let rate = "\(Int(progress.rate)) rows/s"
            if isTerminal {
                let width = 30
                let filled = Int(fraction * Double(width))
                let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
                FileHandle.standardOutput.write(Data("\r\(label) \(bar) \(progress.stored)/\(progress.total) \(rate)   ".utf8))
            } else {
                let decile = Int(fraction * 10)
                if decile != lastDecile {
                    lastDecile = decile
                    say("\(label): \(progress.stored)/\(progress.total) (\(Int(fraction * 100)) %, \(rate))")
                }
            }
        }
    }

    func finish() {
        if isTerminal { FileHandle.standardOutput.write(Data("\n".utf8)) }
    }
}
