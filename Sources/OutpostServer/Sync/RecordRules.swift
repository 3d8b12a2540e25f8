import Foundation
import OutpostProtocol
import OutpostRecords

/// The rules a field app's records must satisfy whichever client wrote them, checked against the stored
/// state when a push is planned.
///
/// Stateless field checks run earlier, in ``MutationValidator``; these need other records: whether a
/// check-in exists before its check-out, whether a scanned guest is on the roster. The records a rule reads
/// are loaded (and, on PostgreSQL, locked) with the push's own, and within a push a rule sees the
/// mutations planned before it.
struct RecordRule: Sendable {
    /// The state a rule reads.
    struct Input {
        var mutation: Mutation
        var existing: StoredRecord?
        var context: PushContext
        var record: (RecordKey) -> StoredRecord?
    }

    /// Records besides the mutation's own that ``check`` reads.
    var related: @Sendable (Mutation, PushContext) -> [RecordKey] = { _, _ in [] }
    /// The refusal of a mutation, or nil when it may be merged.
    var check: @Sendable (Input) -> WireError.Detail?

    /// The rules of the standard collections, by collection name.
    static let standard: [String: RecordRule] = [
        Attendance.collection: attendance,
        CheckIn.collection: checkIn,
        Activity.collection: RecordRule { input in
            created(input).flatMap { Activity.missingOnCreate($0) }.map { .init(code: .invalidFields, message: $0) }
        },
        Build.collection: RecordRule { input in
            created(input).flatMap { Build.missingOnCreate($0) }.map { .init(code: .invalidFields, message: $0) }
        },
    ]

    /// The fields of an upsert that creates its record (or revives a deleted one), else nil.
    private static func created(_ input: Input) -> [String: JSONValue]? {
        guard input.mutation.op == .upsert, input.existing.map(\.tombstone) ?? true else { return nil }
        return input.mutation.fields
    }

    /// Attendance records are the staff member's own, written once, and a check-out follows a check-in.
    ///
    /// Every device of one user names a day's check-in with the same id, so a check-in from a second device is
    /// a second write of the same record: the collection keeps the first by device time, and the later one is
    /// answered `superseded` with the record kept, not refused (the person is checked in).
    ///
    /// By the time a rule sees it, a provisional id has become the derived one (``MutationValidator``), so
    /// that the record is stored and locked under an id that names no one. Records stored before ids were
    /// derived keep their provisional ids: each slot is looked up under both, and one found under its
    /// provisional id alone refuses the write, which would make a second record of the day.
    static let attendance = RecordRule(
        related: { mutation, context in
            guard let slot = AttendanceSlot(mutation, context: context) else { return [] }
            return slot.provisionalKey + (slot.action == .checkOut ? slot.keys(of: .checkIn) : [])
        },
        check: { input in
            let mutation = input.mutation
            guard mutation.op == .upsert else {
                return .init(code: .stateConflict, message: "attendance records cannot be deleted")
            }
            guard let slot = AttendanceSlot(mutation, context: input.context) else {
                return .init(code: .invalidFields, message: "an attendance record names its day and action")
            }
            guard mutation.fields[Attendance.Field.userId] == .string(input.context.userId) else {
                return .init(code: .forbidden, message: "staff record only their own attendance")
            }
            guard mutation.recordId == slot.derivedId(slot.action) else {
                if Attendance.parse(recordId: mutation.recordId) != nil {
                    return .init(code: .forbidden, message: "staff record only their own attendance")
                }
                return .init(
                    code: .invalidRecordId,
                    message: "the record id is not this user's id for the record's day and action; sign in again")
            }
            let actionDay = CalendarDay(mutation.clientTimestamp.date, timeZone: TimeZone(identifier: "UTC")!)
            // The device's day is its local calendar's; no time zone is more than a day from UTC.
            guard abs(actionDay.ordinal - slot.day.ordinal) <= 1 else {
                return .init(code: .invalidFields, message: "the record's day is not the day of its client timestamp")
            }
            let legacy = slot.provisionalKey.compactMap(input.record)
            if input.existing.map(\.tombstone) ?? true, legacy.contains(where: { !$0.tombstone }) {
                let verb = slot.action == .checkIn ? "checked in" : "checked out"
                return .init(code: .stateConflict, message: "already \(verb) on \(slot.day)")
            }
            if slot.action == .checkOut {
                guard slot.keys(of: .checkIn).contains(where: { input.record($0).map { !$0.tombstone } ?? false }) else {
                    return .init(code: .stateConflict, message: "a check-out needs a check-in on the same day")
                }
            }
            return nil
        })

    /// One user's attendance record of one action on one day, and the ids it may be stored under.
    struct AttendanceSlot {
        var key: Attendance.IdKey
        var userId: String
        var day: CalendarDay
        var action: Attendance.Action

        init?(_ mutation: Mutation, context: PushContext) {
            guard let key = context.attendanceKey, let (day, action) = Attendance.dayAndAction(in: mutation.fields)
            else { return nil }
            self.init(key: key, userId: context.userId, day: day, action: action)
        }

        init(key: Attendance.IdKey, userId: String, day: CalendarDay, action: Attendance.Action) {
            self.key = key
            self.userId = userId
            self.day = day
            self.action = action
        }

        func derivedId(_ action: Attendance.Action) -> String {
            Attendance.recordId(key: key, day: day, action: action)
        }

        /// Both ids of the day's record of `action`.
        func keys(of action: Attendance.Action) -> [RecordKey] {
            [
                RecordKey(collection: Attendance.collection, recordId: derivedId(action)),
                RecordKey(
                    collection: Attendance.collection,
                    recordId: Attendance.provisionalRecordId(userId: userId, day: day, action: action)),
            ]
        }

        /// The provisional key of the slot's own record, read beside its derived one.
        var provisionalKey: [RecordKey] { Array(keys(of: action).dropFirst()) }
    }

    /// A check-in names a guest on its event's roster who has not cancelled, and the device and time of its scan.
    static let checkIn = RecordRule(
        related: { mutation, _ in [guestKey(of: mutation)] },
        check: { input in
            let mutation = input.mutation
            guard mutation.op == .upsert else {
                return .init(code: .stateConflict, message: "check-ins cannot be deleted; cancel the guest instead")
            }
            let fields = mutation.fields
            guard fields[CheckIn.Field.guestId]?.stringValue == mutation.recordId else {
                return .init(code: .invalidFields, message: "a check-in's record id is its guest_id")
            }
            // A venue relay's mirror applies the server's check-ins, made by other devices.
            guard fields[CheckIn.Field.scannedBy]?.stringValue == input.context.deviceId || input.context.serverVersions != nil
            else {
                return .init(code: .invalidFields, message: "scanned_by must be the pushing device")
            }
            guard
                fields[CheckIn.Field.scannedAt]?.stringValue.flatMap(Timestamp.init(iso8601:))
                    == mutation.clientTimestamp
            else {
                return .init(code: .invalidFields, message: "scanned_at must equal the mutation's client timestamp")
            }
            let event = mutation.scope ?? ""
            let guest = input.record(guestKey(of: mutation))
            // A cancelled registration is a deleted guest (`roster cancel`) or one with the status cancelled.
            if let guest, guest.tombstone || guest.fields["status"]?.stringValue == "cancelled" {
                return .init(code: .guestCancelled, message: "guest \(mutation.recordId)'s registration is cancelled")
            }
            guard guest != nil else {
                return .init(code: .unknownGuest, message: "guest \(mutation.recordId) is not on the roster of event \(event)")
            }
            return nil
        })

    /// The roster entry a check-in names: the guest of the same id in the same event.
    static func guestKey(of checkIn: Mutation) -> RecordKey {
        RecordKey(collection: Guest.collection, recordId: checkIn.recordId, scope: checkIn.scope ?? "")
    }
}
