import ArgumentParser
import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// `outpost activity …`: peer mentors register their activities.
struct ActivityCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activity",
        abstract: "Register activities, online or offline; list and edit them.",
        subcommands: [ActivityRegister.self, ActivityList.self, ActivityEdit.self])
}

/// The fields of an activity as options; all optional so that `edit` can share them.
struct ActivityFieldOptions: ParsableArguments {
    @Option(help: "The kind of activity, such as home-visit.")
    var type: String?
    @Option(help: "The day, YYYY-MM-DD.")
    var date: String?
    @Option(help: "How long: minutes (90) or 1h30m.")
    var duration: String?
    @Option(help: "How many took part.")
    var participants: Int64?
    @Option(help: "Free notes.")
    var notes: String?
    @Option(name: .customLong("travel-expense"), help: "Travel expense, such as 12.50 (a protected money field).")
    var travelExpense: String?

    /// The fields given, in their wire form.
    func fields() throws -> [String: JSONValue] {
        var fields: [String: JSONValue] = [:]
        if let type { fields[Activity.Field.type] = .string(type) }
        if let date {
            guard let day = CalendarDay(date) else { throw CLIError("--date must be a date written YYYY-MM-DD") }
            fields[Activity.Field.date] = .string(day.description)
        }
        if let duration {
            guard let minutes = Activity.parseDuration(duration) else {
                throw CLIError("--duration must be minutes (90) or hours and minutes (1h30m)")
            }
            fields[Activity.Field.durationMinutes] = .integer(minutes)
        }
        if let participants { fields[Activity.Field.participants] = .integer(participants) }
        if let notes { fields[Activity.Field.notes] = .string(notes) }
        if let travelExpense {
            guard let amount = Activity.parseMoney(travelExpense) else {
                throw CLIError("--travel-expense must be an amount such as 12.50")
            }
            fields[Activity.Field.travelExpense] = .string(amount)
        }
        return fields
    }
}

struct ActivityRegister: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "register", abstract: "Register an activity: saved on the device first, then synced.")
    @OptionGroup var activity: ActivityFieldOptions
    @OptionGroup var options: DeviceStoreOptions

    func validate() throws {
        guard activity.type != nil, activity.date != nil, activity.duration != nil else {
            throw ValidationError("--type, --date and --duration are required")
        }
    }

    func run() async throws {
        let fields = try activity.fields()
        guard let type = activity.type, let date = fields[Activity.Field.date]?.stringValue.flatMap(CalendarDay.init),
            let minutes = FieldRules.integer(fields[Activity.Field.durationMinutes])
        else { throw CLIError("--type, --date and --duration are required") }
        let draft = ActivityDraft(
            type: type, date: date, durationMinutes: minutes, participants: activity.participants,
            notes: activity.notes, travelExpense: fields[Activity.Field.travelExpense]?.stringValue)
        try await options.withDevice { device in
            let log = ActivityLog(engine: device.engine)
            try await confirm(try await log.register(draft), log: log, device: device)
        }
    }
}

struct ActivityEdit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "edit", abstract: "Change fields of an activity; money fields conflict instead of overwriting.")
    @Argument(help: "The activity id.")
    var activityId: String
    @OptionGroup var activity: ActivityFieldOptions
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let changes = try activity.fields()
        try await options.withDevice { device in
            // An edit starts from the server's latest version when it answers, so that a money field conflicts
            // only with a change this device has not seen.
            await Bounded.run(for: Delivery.probeBound, clock: ContinuousClock()) { await device.engine.probe(syncingPending: false) }
            let log = ActivityLog(engine: device.engine)
            if await device.engine.status.isOnline {
                await Bounded.run(for: Delivery.wait, clock: ContinuousClock()) { _ = try? await log.refresh() }
            }
            try await confirm(try await log.edit(activityId, changes: changes), log: log, device: device)
        }
    }
}

/// The confirmation the moment the activity is saved, then, once its delivery ended or was waited on, the
/// confirmation of where it stands, when that changed.
private func confirm(_ saved: ActivitySave, log: ActivityLog, device: Device) async throws {
    say("\(saved.confirmation) (\(saved.activity.recordId))")
    let ended = await Delivery.deliver(device.engine)
    let now = try await log.current(saved)
    let status = await device.engine.status
    // Still pending while the server answers: why it has not taken the activity yet, not that it is "syncing now".
    let waitingOnServer = now.activity.syncStatus == .pending && (status.connection == .online || status.connection == .unknown)
    if now.confirmation != saved.confirmation && !waitingOnServer {
        say(now.confirmation)
    } else if now.activity.syncStatus == .pending {
        say(Delivery.stillPending(ended: ended, connection: status.connection, lastFailure: status.lastFailure))
    }
}

struct ActivityList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Activities on this device, with sync badges; online, fetches changes first.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice { device in
            let log = ActivityLog(engine: device.engine)
            await Delivery.resume(device.engine)
            await Delivery.refresh(device.engine) { try await log.refresh() }
            let activities = try await log.list()
            if activities.isEmpty { say("no activities") }
            for entry in activities {
                var line = "\(entry.recordId)  \(entry.date)  \(entry.type)  \(entry.durationMinutes.map { "\($0) min" } ?? "")"
                if let participants = FieldRules.integer(entry.fields[Activity.Field.participants]) {
                    line += participants == 1 ? "  1 participant" : "  \(participants) participants"
                }
                if let expense = entry.travelExpense { line += "  travel \(expense)" }
                line += "  \(entry.badge.symbol)"
                if entry.isOfflineEntry && entry.syncStatus != .synced { line += "  (saved offline)" }
                say(line)
                if entry.syncStatus == .failed || entry.syncStatus == .refused, let error = entry.syncError { say("    \(error)") }
            }
            await Delivery.showNotice(device.engine)
        }
    }
}
