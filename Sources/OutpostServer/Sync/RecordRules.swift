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
    var related: @Sendable (Mutation) -> [RecordKey] = { _ in [] }
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
    static let attendance = RecordRule(
        related: { mutation in checkInOfCheckOut(mutation.recordId).map { [$0] } ?? [] },
        check: { input in
            let mutation = input.mutation
            guard mutation.op == .upsert else {
                return .init(code: .stateConflict, message: "attendance records cannot be deleted")
            }
            guard let parts = Attendance.parse(recordId: mutation.recordId) else {
                return .init(code: .invalidRecordId, message: "attendance record ids are USER.YYYY-MM-DD.in or .out")
            }
            guard parts.userId == input.context.userId else {
                return .init(code: .forbidden, message: "staff record only their own attendance")
            }
            let actionDay = CalendarDay(mutation.clientTimestamp.date, timeZone: TimeZone(identifier: "UTC")!)
            // The device's day is its local calendar's; no time zone is more than a day from UTC.
            guard abs(actionDay.ordinal - parts.day.ordinal) <= 1 else {
                return .init(code: .invalidFields, message: "the record's day is not the day of its client timestamp")
            }
            if let existing = input.existing, !existing.tombstone {
                let verb = parts.action == .checkIn ? "checked in" : "checked out"
                return .init(code: .stateConflict, message: "already \(verb) on \(parts.day)")
            }
            if let checkIn = checkInOfCheckOut(mutation.recordId) {
                guard let record = input.record(checkIn), !record.tombstone else {
                    return .init(code: .stateConflict, message: "a check-out needs a check-in on the same day")
                }
            }
            return nil
        })

    /// The check-in a check-out record needs: the same user's, the same day; nil for anything else.
    static func checkInOfCheckOut(_ recordId: String) -> RecordKey? {
        guard let parts = Attendance.parse(recordId: recordId), parts.action == .checkOut else { return nil }
        return RecordKey(
            collection: Attendance.collection,
            recordId: Attendance.recordId(userId: parts.userId, day: parts.day, action: .checkIn))
    }

    /// A check-in names a guest on its event's roster who has not cancelled, and the device and time of its scan.
    static let checkIn = RecordRule(
        related: { mutation in [guestKey(of: mutation)] },
        check: { input in
            let mutation = input.mutation
            guard mutation.op == .upsert else {
                return .init(code: .stateConflict, message: "check-ins cannot be deleted; cancel the guest instead")
            }
            let fields = mutation.fields
            guard fields[CheckIn.Field.guestId]?.stringValue == mutation.recordId else {
                return .init(code: .invalidFields, message: "a check-in's record id is its guest_id")
            }
            guard fields[CheckIn.Field.scannedBy]?.stringValue == input.context.deviceId else {
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
