import Foundation
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// Staff attendance over the sync engine: check in and out with a GPS fix, online or offline.
///
/// Each action is a write-once record (see ``Attendance``): saved locally first, so the state changes at
/// once, then pushed when the device is online. The rules the app applies before saving (a fix, one
/// check-in a day, a check-out after a check-in) are enforced again by the server.
public struct AttendanceLog: Sendable {
    public let engine: SyncEngine
    public let userId: String
    public let location: any LocationProvider
    /// The zone whose calendar decides "today".
    public let timeZone: TimeZone

    public init(engine: SyncEngine, userId: String, location: any LocationProvider, timeZone: TimeZone = .current) {
        self.engine = engine
        self.userId = userId
        self.location = location
        self.timeZone = timeZone
    }

    /// Opens the log for the user a device's token names.
    /// - Throws: ``ClientError`` `noUser` when the token names nobody.
    public init(device: Device, location: any LocationProvider, timeZone: TimeZone = .current) throws {
        guard let user = device.user else {
            throw ClientError(.noUser, "this device's token names no user")
        }
        self.init(engine: device.engine, userId: user.userId, location: location, timeZone: timeZone)
    }

    /// Checks in for today.
    /// - Parameter photo: an optional photo taken with it, saved with the record and uploaded before it.
    /// - Throws: ``ClientError`` `noLocationFix` without a GPS fix, `alreadyCheckedIn` when today has a
    ///   check-in; nothing is written then.
    @discardableResult
    public func checkIn(photo: Attachment? = nil) async throws -> AttendanceEntry { try await record(.checkIn, photo: photo) }

    /// Checks out for today.
    ///
    /// A check-out needs the day's check-in. A device that has not heard from the server today may not know
    /// of one made on another of the person's devices (a phone borrowed at the end of the day, offline), so
    /// there the check-out is saved without one (``AttendanceEntry/awaitsCheckIn``) and the server decides:
    /// it takes it when it holds the check-in, and refuses it otherwise. A device that has refreshed today
    /// (``refresh()``) knows, and refuses at once.
    ///
    /// - Parameter photo: an optional photo taken with it, as ``checkIn(photo:)`` takes.
    /// - Throws: ``ClientError`` `noLocationFix`, `notCheckedIn` or `alreadyCheckedOut`; nothing is written then.
    @discardableResult
    public func checkOut(photo: Attachment? = nil) async throws -> AttendanceEntry { try await record(.checkOut, photo: photo) }

    /// The setting that holds the last day ``refresh()`` brought the user's records from the server.
    static let refreshedDaySetting = "attendance_refreshed_day"

    private func record(_ action: Attendance.Action, photo: Attachment?) async throws -> AttendanceEntry {
        guard let fix = await location.currentFix() else {
            throw ClientError(.noLocationFix, AppText.noLocationFix)
        }
        guard Attendance.isValidCoordinate(latitude: fix.latitude, longitude: fix.longitude) else {
            throw ClientError(.invalidInput, "latitude must be within -90…90 and longitude within -180…180")
        }
        let day = CalendarDay(engine.now(), timeZone: timeZone)
        let key = try await settledKey()
        let today = try await entries(on: day, key: key)
        switch action {
        case .checkIn:
            if let earlier = today[.checkIn] {
                throw ClientError(.alreadyCheckedIn, "Already checked in today at \(clock(earlier.time)).")
            }
        case .checkOut:
            if today[.checkIn] == nil, try await engine.store.setting(Self.refreshedDaySetting) == day.description {
                throw ClientError(.notCheckedIn, "Not checked in today: check in first.")
            }
            if let earlier = today[.checkOut] {
                throw ClientError(.alreadyCheckedOut, "Already checked out today at \(clock(earlier.time)).")
            }
        }
        var fields: [String: JSONValue] = [
            Attendance.Field.userId: .string(userId),
            Attendance.Field.action: .string(action.rawValue),
            Attendance.Field.day: .string(day.description),
            Attendance.Field.latitude: .number(fix.latitude),
            Attendance.Field.longitude: .number(fix.longitude),
        ]
        if let accuracy = fix.accuracy { fields[Attendance.Field.accuracy] = .number(accuracy) }
        // Saved and returned at once; delivery runs in the background (see `SyncEngine.save`).
        let record = try await engine.save(
            LocalStore.Write(
                collection: Attendance.collection,
                recordId: key.map { Attendance.recordId(key: $0, day: day, action: action) }
                    ?? Attendance.provisionalRecordId(userId: userId, day: day, action: action),
                fields: fields),
            attaching: photo.map { [Attendance.Field.photo: $0] } ?? [:])
        guard var entry = AttendanceEntry(record) else {
            throw ClientError(.storeUnavailable, "the attendance record could not be read back")
        }
        entry.awaitsCheckIn = action == .checkOut && today[.checkIn] == nil
        return entry
    }

    /// Brings the staff member's attendance records made on their other devices from the server, so that a
    /// check-in made on another phone shows here: what an app runs when it opens online. Queued local records
    /// stay on top.
    ///
    /// - Returns: how many records changed.
    /// - Throws: ``TransportError`` when the server cannot be reached; nothing changes then.
    @discardableResult
    public func refresh() async throws -> Int {
        let day = CalendarDay(engine.now(), timeZone: timeZone)
        await engine.fetchRecordIdKeys()
        let changed = try await engine.pull(collection: Attendance.collection)
        _ = try await settledKey()
        try await engine.store.setSetting(Self.refreshedDaySetting, day.description)
        return changed
    }

    /// Where the staff member stands today, as the home screen shows it.
    public func state() async throws -> AttendanceState {
        let key = try await settledKey()
        let today = try await entries(on: CalendarDay(engine.now(), timeZone: timeZone), key: key)
        return AttendanceState(latest: today[.checkOut] ?? today[.checkIn])
    }

    /// This user's attendance records, newest first, each with its sync badge.
    public func history() async throws -> [AttendanceEntry] {
        let key = try await settledKey()
        return await engine.markingOverdue(
            try await engine.store.records(collection: Attendance.collection)
                .compactMap(AttendanceEntry.init)
                .filter { recordIds(day: $0.day, action: $0.action, key: key).contains($0.recordId) }
                .sorted { $0.time > $1.time },
            collection: Attendance.collection)
    }

    private func entries(on day: CalendarDay, key: Attendance.IdKey?) async throws -> [Attendance.Action: AttendanceEntry] {
        var found: [Attendance.Action: AttendanceEntry] = [:]
        for action in Attendance.Action.allCases {
            for id in recordIds(day: day, action: action, key: key) {
                if let record = try await engine.store.record(collection: Attendance.collection, recordId: id),
                    let entry = AttendanceEntry(record)
                {
                    found[action] = entry
                    break
                }
            }
        }
        return found
    }

    /// The ids this user's record of `action` on `day` may have here. The provisional one comes first: once
    /// the key is known, a record keeps it only while it waits or was refused beside the server's copy (see
    /// ``settledKey()``), and the device's own action is what it shows.
    private func recordIds(day: CalendarDay, action: Attendance.Action, key: Attendance.IdKey?) -> [String] {
        let provisional = Attendance.provisionalRecordId(userId: userId, day: day, action: action)
        guard let key else { return [provisional] }
        return [provisional, Attendance.recordId(key: key, day: day, action: action)]
    }

    /// The user's key for record ids, once the device holds it, with every record this user wrote under a
    /// provisional id renamed to its derived id (``RecordIdSettlement/attendance``), as the engine does after
    /// each sync: from then on no id on the device names the user or a day.
    private func settledKey() async throws -> Attendance.IdKey? {
        guard let keys = try await engine.settleRecordIds([.attendance]), keys.userId == userId else { return nil }
        return Attendance.IdKey(hex: keys.attendance)
    }

    /// "HH:mm" in the log's time zone.
    public func clock(_ date: Date) -> String { AppText.clock(date, timeZone: timeZone) }
}

/// One check-in or check-out, as the history lists it.
public struct AttendanceEntry: Sendable, Hashable {
    /// The record's id: derived from the user's key, it names no one (see ``Attendance``).
    public var recordId: String
    public var action: Attendance.Action
    public var day: CalendarDay
    /// The device's time of the action.
    public var time: Date
    public var latitude: Double
    public var longitude: Double
    public var accuracy: Double?
    public var isOfflineEntry: Bool
    public var syncStatus: RecordSyncStatus
    public var syncError: String?
    public var isConflict: Bool
    /// The escalation threshold, when the entry has waited to sync longer than it (see ``SyncBadge/overdue``).
    public var overdue: Duration?
    /// True for a check-out just saved on a device that holds no check-in of its day and has not heard from
    /// the server today: the server takes it when it holds a check-in from another of the person's devices,
    /// and refuses it otherwise (see ``AttendanceLog/checkOut()``).
    public var awaitsCheckIn = false
    /// True when the server refused a change to a record it has: the check-in or check-out itself stands (see
    /// ``LocalRecord/serverCopy``), and discarding the change brings it back.
    public var isRefusedChange = false
    /// The photo taken with it, when one was: it goes up before the entry, which is synced only once the server
    /// holds both.
    public var photo: FileReference?

    /// The entry a stored record holds, or nil when it is not an attendance record.
    public init?(_ record: LocalRecord) {
        guard record.collection == Attendance.collection, !record.tombstone,
            let (day, action) = Attendance.dayAndAction(in: record.fields),
            let latitude = FieldRules.number(record.fields[Attendance.Field.latitude]),
            let longitude = FieldRules.number(record.fields[Attendance.Field.longitude])
        else { return nil }
        self.recordId = record.recordId
        self.action = action
        self.day = day
        self.time = record.createdAt.date
        self.latitude = latitude
        self.longitude = longitude
        self.accuracy = FieldRules.number(record.fields[Attendance.Field.accuracy])
        self.isOfflineEntry = record.isOfflineEntry
        self.syncStatus = record.syncStatus
        self.syncError = record.syncError
        self.isConflict = record.conflict != nil
        self.isRefusedChange = record.syncStatus == .refused && record.serverCopy != nil
        self.photo = FileReference.references(in: record.fields)[Attendance.Field.photo]
    }

    public var badge: SyncBadge { SyncBadge(status: syncStatus, error: syncError, isConflict: isConflict, overdue: overdue) }
}

extension AttendanceEntry: WaitingEntry {
    var overdueKey: String { recordId }
}

/// Today's state: not checked in, checked in, or checked out; and whether the last action has synced.
public struct AttendanceState: Sendable, Hashable {
    /// The latest action today, or nil before the first.
    public var latest: AttendanceEntry?

    public var action: Attendance.Action? { latest?.action }

    /// "Checked In", "Checked Out" or "Not checked in".
    public var text: String { latest?.action.stateText ?? "Not checked in" }

    /// True while the latest action waits to reach the server: the pending-sync indicator.
    public var isPendingSync: Bool { latest.map { $0.syncStatus == .pending || $0.syncStatus == .failed } ?? false }

    /// True when the server refused the latest action: it needs the staff member's attention.
    public var isRefused: Bool { latest?.syncStatus == .refused }

    /// The state's line, with its time: "Checked In at 09:12", or what the server refused and why:
    /// "Check-in at 09:12 refused: already checked in on 2026-11-21". A refused action is never told as done.
    /// - Parameter clock: the time's words, such as ``AttendanceLog/clock(_:)``.
    public func line(clock: (Date) -> String) -> String {
        guard let latest else { return text }
        guard isRefused else { return "\(text) at \(clock(latest.time))" }
        if latest.isRefusedChange {
            return "\(text) at \(clock(latest.time)); a change to it was refused: \(latest.syncError ?? "refused by the server")"
        }
        let action = latest.action == .checkIn ? "Check-in" : "Check-out"
        return "\(action) at \(clock(latest.time)) refused: \(latest.syncError ?? "refused by the server")"
    }
}

extension RecordIdSettlement {
    /// Attendance records: a provisional id of the keys' user (`USER.YYYY-MM-DD.in`) becomes the id derived
    /// from the user's key (``Attendance/recordId(key:day:action:)``). Provisional ids hold dots; derived ones
    /// never do. Declare it in the engine's configuration so that records are renamed after each sync:
    /// `configuration.recordIdSettlements = [.attendance]`.
    public static let attendance = RecordIdSettlement(collection: Attendance.collection, marker: ".") { recordId, keys in
        Attendance.IdKey(hex: keys.attendance).flatMap {
            Attendance.derivedRecordId(of: recordId, userId: keys.userId, key: $0)
        }
    }
}
