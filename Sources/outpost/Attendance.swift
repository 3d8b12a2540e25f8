import ArgumentParser
import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostRecords

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
    /// Opens the device and the attendance log. A screen that saves nothing (`resuming`) first asks the server
    /// whether it is reachable for at most a second and delivers what waits from earlier, as an app does when
    /// it opens; a save never waits on the network.
    func withAttendance<T>(
        location: FixedLocation = FixedLocation(nil), resuming: Bool = false,
        _ body: (AttendanceLog, Device) async throws -> T
    ) async throws -> T {
        try await withDevice { device in
            let log = try AttendanceLog(device: device, location: location)
            if resuming {
                await Delivery.resume(device.engine)
                // The records of the person's other devices, within the screen's bound.
                await Delivery.refresh(device.engine) { try await log.refresh() }
            }
            return try await body(log, device)
        }
    }
}

struct AttendanceCheckIn: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-in", abstract: "Check in for today.")
    @OptionGroup var location: LocationOptions
    @Option(help: "A photo taken with it, such as the signed sheet: saved with it, uploaded before it.")
    var photo: String?
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let attached = try photo.map(attachment)
        try await options.withAttendance(location: location.provider) { log, device in
            try await record(try await log.checkIn(photo: attached), log: log, device: device)
        }
    }
}

struct AttendanceCheckOut: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-out", abstract: "Check out for today.")
    @OptionGroup var location: LocationOptions
    @Option(help: "A photo taken with it, such as the signed sheet: saved with it, uploaded before it.")
    var photo: String?
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        let attached = try photo.map(attachment)
        try await options.withAttendance(location: location.provider) { log, device in
            try await record(try await log.checkOut(photo: attached), log: log, device: device)
        }
    }
}

/// Says what was saved, "Check-in at 08:02 — saved offline, pending sync", the moment the save is durable;
/// then where it stands once delivered. When the day's record of the action was already made on another of the
/// person's devices, the server keeps that one, and its time and sync state are said, read from the server.
private func record(_ entry: AttendanceEntry, log: AttendanceLog, device: Device) async throws {
    let action = entry.action == .checkIn ? "Check-in" : "Check-out"
    say("\(action) at \(log.clock(entry.time)) — \(Delivery.saved(await device.engine.status.connection))")
    let record = try await Delivery.report(device, collection: Attendance.collection, recordId: entry.recordId)
    if entry.awaitsCheckIn, record?.isWaitingToSync == true {
        say("no check-in of today on this device: the server takes this check-out if it holds one from your other devices")
    }
    if record?.syncStatus == .synced,
        await device.engine.wasKeptElsewhere(collection: Attendance.collection, recordId: entry.recordId)
    {
        // The record's time is the first write's: a pull brings it.
        await Delivery.refresh(device.engine) { _ = try await log.refresh() }
        let state = try await log.state()
        if let latest = state.latest { say("\(state.line(clock: log.clock)) · \(latest.badge.symbol)") }
    }
}

struct AttendanceStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Today's state, with the pending-sync indicator.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withAttendance(resuming: true) { log, device in
            let state = try await log.state()
            if let latest = state.latest {
                say("\(state.line(clock: log.clock)) · \(latest.badge.symbol)")
                if latest.syncStatus == .failed, let error = latest.syncError { say("    \(error)") }
                if state.isRefused {
                    say("    discard it (a copy stays on this device): outpost device discard \(latest.recordId) --collection attendance")
                }
            } else {
                say("Not checked in today")
            }
            say(Delivery.indicator(await device.engine.status))
            await Delivery.showNotice(device.engine)
        }
    }
}

struct AttendanceHistory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "history", abstract: "Your check-ins and check-outs, each with its sync badge.")
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withAttendance(resuming: true) { log, device in
            let entries = try await log.history()
            if entries.isEmpty { say("no attendance records") }
            for entry in entries {
                let place = String(format: "%.5f,%.5f", entry.latitude, entry.longitude)
                let offline = entry.isOfflineEntry ? "  (offline entry)" : ""
                say(
                    "\(entry.day) \(log.clock(entry.time))  \(entry.action == .checkIn ? "check-in " : "check-out")  \(place)  \(entry.badge.symbol)\(offline)"
                )
                if entry.syncStatus == .failed || entry.syncStatus == .refused, let error = entry.syncError { say("    \(error)") }
            }
            await Delivery.showNotice(device.engine)
        }
    }
}
