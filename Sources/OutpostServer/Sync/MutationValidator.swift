import Crypto
import Foundation
import OutpostProtocol
import OutpostRecords

/// Checks one mutation against the rules every client must follow, before storage sees it.
///
/// A mutation that fails is rejected on its own; the others in the same push go on.
struct MutationValidator: Sendable {
    var collections: CollectionRegistry
    var earliest: Timestamp
    var maxClockSkew: Duration

    /// The rejection for `mutation`, or `nil` when it may be applied.
    func rejection(of mutation: Mutation, by identity: Identity, now: Date) -> MutationResult? {
        let key = mutation.idempotencyKey
        guard Identifier.isValidIdempotencyKey(key) else {
            return .rejected(
                String(key.prefix(256)), .invalidIdempotencyKey,
                "idempotencyKey must be 1 to 256 printable ASCII characters without spaces")
        }
        guard let policy = collections[mutation.collection] else {
            return .rejected(key, .unknownCollection, "unknown collection")
        }
        if let refusal = policy.writerRefusal(for: identity.role) {
            return .rejected(key, .forbidden, refusal)
        }
        guard Identifier.isValid(mutation.recordId) else {
            return .rejected(
                key, .invalidRecordId,
                "recordId must be 1 to 128 characters from A-Z a-z 0-9 . _ : @ - and must not contain '..'")
        }
        if case .failure(let problem) = policy.scope(of: mutation) {
            return .rejected(key, .invalidFields, problem.message)
        }
        let time = mutation.clientTimestamp
        guard time >= earliest else {
            return .rejected(key, .invalidTimestamp, "clientTimestamp is before \(earliest.iso8601)")
        }
        let skew = Int64(maxClockSkew.components.seconds) * 1000
        guard time.millisecondsSince1970 <= Timestamp(now).millisecondsSince1970 + skew else {
            return .rejected(key, .invalidTimestamp, "clientTimestamp is too far in the future")
        }
        if let base = mutation.baseVersion, base < 0 {
            return .rejected(key, .invalidBaseVersion, "baseVersion must not be negative")
        }
        switch mutation.op {
        case .delete:
            guard mutation.fields.isEmpty else {
                return .rejected(key, .invalidFields, "a delete carries no fields")
            }
        case .upsert:
            guard mutation.fields.count <= Mutation.maxFieldCount else {
                return .rejected(key, .invalidFields, "at most \(Mutation.maxFieldCount) fields per mutation")
            }
            for (name, value) in mutation.fields {
                guard Identifier.isValidFieldName(name) else {
                    return .rejected(
                        key, .invalidFields,
                        "field names must be 1 to 64 letters, digits or '_', starting with a letter or '_'")
                }
                guard !value.containsNUL else {
                    return .rejected(key, .invalidFields, "field values must not contain NUL characters")
                }
                guard value.depth <= Mutation.maxValueDepth else {
                    return .rejected(key, .invalidFields, "field values nest too deeply")
                }
            }
            if let problem = Mutation.sizeProblem(of: mutation.fields) {
                return .rejected(key, .invalidFields, problem)
            }
            if let refusal = Self.fileRefusal(in: mutation.fields, policy: policy) {
                return .rejected(key, refusal.code, refusal.message)
            }
        }
        if mutation.op == .upsert, let rule = Self.fieldRules[policy.name], let problem = rule(mutation) {
            return .rejected(key, .invalidFields, problem)
        }
        return nil
    }

    /// Why `fields` name a file the collection does not take, or nil: a field with a `$file` member that is not a
    /// valid ``FileReference`` (`invalid_fields`), or a file of a type or size the collection refuses. The first
    /// problem by field name, so that a mutation is always refused for the same one.
    static func fileRefusal(in fields: [String: JSONValue], policy: CollectionPolicy) -> FileRefusal? {
        // Nothing is sorted or kept for a mutation that names no file.
        var refusals: [(field: String, refusal: FileRefusal)] = []
        for (name, value) in fields {
            switch FileReference.parse(value) {
            case nil:
                continue
            case .failure(let problem)?:
                refusals.append((name, FileRefusal(code: .invalidFields, message: "\(name): \(problem)")))
            case .success(let file)?:
                if let refusal = policy.fileRefusal(type: file.type, size: file.size) {
                    refusals.append((name, FileRefusal(code: refusal.code, message: "\(name): \(refusal.message)")))
                }
            }
        }
        return refusals.min { $0.field < $1.field }?.refusal
    }

    /// What a push does with `mutation`: its rejection, or the mutation with its scope resolved and the hash
    /// of its content as sent (a replay from a device that named no scope must hash as it did).
    ///
    /// An attendance record's provisional id becomes its derived id under `attendanceKey`, and the content is
    /// hashed with the provisional id either way: a device that renames a queued record once it holds its key
    /// and sends it again is answered as a duplicate, as is one that sent it before ids were derived. The
    /// record is given its user when the device left it out, since its id no longer names them.
    func item(
        for mutation: Mutation, by identity: Identity, now: Date, attendanceKey: Attendance.IdKey? = nil
    ) -> PushItem {
        if let rejection = rejection(of: mutation, by: identity, now: now) { return .rejected(rejection) }
        var resolved = mutation
        if let policy = collections[mutation.collection], case .success(let scope) = policy.scope(of: mutation) {
            resolved.scope = scope
        }
        var hashed = mutation
        if mutation.collection == Attendance.collection, let attendanceKey,
            let (day, action) = Attendance.dayAndAction(in: mutation.fields)
        {
            let derived = Attendance.recordId(key: attendanceKey, day: day, action: action)
            let provisional = Attendance.provisionalRecordId(userId: identity.userId, day: day, action: action)
            if mutation.recordId == provisional || mutation.recordId == derived {
                resolved.recordId = derived
                hashed.recordId = provisional
            } else {
                // Refused before any record is read, so that the answer says nothing of whether the id is stored.
                let isProvisional = Attendance.parse(recordId: mutation.recordId) != nil
                return .rejected(
                    .rejected(
                        mutation.idempotencyKey, isProvisional ? .forbidden : .invalidRecordId,
                        isProvisional
                            ? "staff record only their own attendance"
                            : "the record id is not this user's id for the record's day and action; sign in again"))
            }
            if resolved.fields[Attendance.Field.userId] == nil {
                resolved.fields[Attendance.Field.userId] = .string(identity.userId)
            }
        }
        return .valid(resolved, contentHash: Self.contentHash(of: hashed))
    }

    /// Rules on the fields of particular collections, which must hold for every client. Rules that read
    /// stored records are ``RecordRule``s.
    static let fieldRules: [String: @Sendable (Mutation) -> String?] = [
        Guest.collection: { Guest.problem(in: $0.fields) },
        EventRecord.collection: { EventRecord.problem(in: $0.fields) },
        Attendance.collection: {
            Attendance.problem(in: $0.fields) ?? Attendance.problem(recordId: $0.recordId, fields: $0.fields)
        },
        CheckIn.collection: { CheckIn.problem(in: $0.fields) },
        Activity.collection: { Activity.problem(in: $0.fields) },
        Build.collection: { Build.problem(in: $0.fields) },
    ]

    /// A digest of everything a mutation says, so that a key sent again with other content is caught.
    static func contentHash(of mutation: Mutation) -> String {
        // The bytes a sorted-key JSONEncoder writes, as every stored hash was made (see `Mutation.jsonBytes()`).
        SHA256.hash(data: (try? mutation.jsonBytes()) ?? []).hexString
    }
}
