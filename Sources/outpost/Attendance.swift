import ArgumentParser
import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol

/// `outpost attendance …`: staff check in and out for the day with GPS.
struct AttendanceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attendance",
        abstract: "Check in and out for the day with a GPS fix, online or offline.",
        subcommands: [AttendanceCheckIn.self, AttendanceCheckOut.self, AttendanceHistory.self, AttendanceStatus.self])
}

/// Where the device is: `--lat/--lon`, or `--no-fix` to act as a phone with no signal.
struct LocationOptions: ParsableArguments {
    // Unconditional, so that a negative coordinate is read as a value, not as an option.
    @Option(parsing: .unconditional, help: "Latitude of the GPS fix, -90…90.")
    var lat: Double?
    @Option(parsing: .unconditional, help: "Longitude of the GPS fix, -180…180.")
    var lon: Double?
    @Option(help: "Accuracy of the fix in metres.")
    var accuracy: Double?
    @Flag(name: .customLong("no-fix"), help: "Simulate no GPS signal.")
    var noFix = false

    func validate() throws {
        if noFix {
            guard lat == nil, lon == nil else { throw ValidationError("give --lat/--lon or --no-fix, not both") }
        } else {
            guard lat != nil, lon != nil else { throw ValidationError("give --lat and --lon (or --no-fix)") }
        }
    }

    var provider: FixedLocation {
        guard !noFix, let lat, let lon else { return FixedLocation(nil) }
        return FixedLocation(LocationFix(latitude: lat, longitude: lon, accuracy: accuracy))
    }
}

extension DeviceStoreOptions {
    /// Opens the device, asks the server whether it is reachable, and opens the attendance log. A command
    /// that is `saving` pushes after its save instead of syncing what is pending before it.
    func withAttendance<T>(
        location: FixedLocation = FixedLocation(nil), saving: Bool = false, _ body: (AttendanceLog) async throws -> T
    ) async throws -> T {
        try await withDevice { device in
            await device.engine.probe(syncingPending: !saving)
            return try await body(try AttendanceLog(device: device, location: location))
        }
    }
}

struct AttendanceCheckIn: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-in", abstract: "Check in for today.")
    @OptionGroup var location: LocationOptions
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withAttendance(location: location.provider, saving: true) { log in
            say(describe(try await log.checkIn(), log: log))
        }
    }
}

struct AttendanceCheckOut: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-out", abstract: "Check out for today.")
    @OptionGroup var location: LocationOptions
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withAttendance(location: location.provider, saving: true) { log in
            say(describe(try await log.checkOut(), log: log))
        }
    }
}

/// "Checked In at 08:02 — saved offline, pending sync".
private func describe(_ entry: AttendanceEntry, log: AttendanceLog) -> String {
    "\(entry.action.stateText) at \(log.clock(entry.time)) — \(syncNote(entry.syncStatus, error: entry.syncError, offline: entry.isOfflineEntry))"
}

/// How a just-saved record stands, in words.
func syncNote(_ status: RecordSyncStatus, error: String?, offline: Bool) -> String {
    switch status {
    case .synced: return "synced"
    case .pending: return offline ? "saved offline, pending sync" : "saved, pending sync"
    case .failed: return "saved on this device; sync failed: \(error ?? "unknown error")"
    }
}

struct AttendanceStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Today's state, with the pending-sync indicator.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withAttendance { log in
            let state = try await log.state()
            guard let latest = state.latest else {
                say("Not checked in today")
                return
            }
            let since = latest.action == .checkIn ? "since" : "at"
            say("\(state.text) \(since) \(log.clock(latest.time)) · \(latest.badge.symbol)")
        }
    }
}

struct AttendanceHistory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "history", abstract: "Your check-ins and check-outs, each with its sync badge.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withAttendance { log in
            let entries = try await log.history()
            if entries.isEmpty { say("no attendance records") }
            for entry in entries {
                let place = String(format: "%.5f,%.5f", entry.latitude, entry.longitude)
                let offline = entry.isOfflineEntry ? "  (offline entry)" : ""
                say("\(entry.day) \(log.clock(entry.time))  \(entry.action == .checkIn ? "check-in " : "check-out")  \(place)  \(entry.badge.symbol)\(offline)")
                if entry.syncStatus == .failed, let error = entry.syncError { say("    \(error)") }
            }
        }
    }
}
