import Foundation
import OutpostProtocol
import OutpostRecords

/// Who pushed, from where, and when the server received it.
package struct PushContext: Sendable {
    var tenant: String
    var deviceId: String
    var userId: String
    var userName: String
    /// The pusher's role: a member of staff changes only their own records in a collection of own records.
    var role: Role = .staff
    var receivedAt: Timestamp
    /// The pusher's key for attendance record ids, when the push holds attendance records.
    var attendanceKey: Attendance.IdKey?
    /// On a venue relay: each mutation the push processes is journaled in its transaction, to be forwarded.
    var relayJournal: RelayJournaling?
    /// On a venue relay, for the server's changes its mirror applies: each record's version on the server, which
    /// the relay's copy takes when it is behind (see ``PushPlan/adopting(_:stored:)``).
    var serverVersions: [RecordKey: Int64]?
}

/// One mutation of a push after validation.
package enum PushItem: Sendable {
    case rejected(MutationResult)
    /// A mutation that passed validation, its scope resolved, and the hash of its content as sent.
    case valid(Mutation, contentHash: String)

    var key: String? {
        if case .valid(let mutation, _) = self { return mutation.idempotencyKey }
        return nil
    }
}

/// What an earlier push left under an idempotency key: enough to answer a duplicate.
struct ProcessedMutation: Sendable, Hashable {
    var contentHash: String
    var status: MutationResult.Status
    var version: Int64
    var conflict: ConflictDetail?
}

/// A processed mutation to store: the idempotency claim and the audit entry in one row.
struct MutationRow: Sendable {
    var mutation: Mutation
    var contentHash: String
    var deviceId: String
    var userId: String
    var userName: String
    var receivedAt: Timestamp
    var status: MutationResult.Status
    var version: Int64
    var conflict: ConflictDetail?
}

/// Everything one push writes, computed before any of it is written.
struct PushPlan: Sendable {
    var results: [MutationResult] = []
    /// Changed records in their final state, one entry per record.
    var records: [StoredRecord] = []
    var mutations: [MutationRow] = []
    var conflicts: [ConflictRecord] = []

    /// The plan with each record of `versions` numbered at least as the server numbers it, so that a device moving
    /// between the server and a venue relay finds a record at the same version at both. A change of the server's
    /// that leaves every value as the relay holds it (the server's copy of a write the relay forwarded) changes
    /// nothing but that number. A record this plan does not change is written again with the higher number; one
    /// at or above it keeps its own. Versions only rise.
    func adopting(_ versions: [RecordKey: Int64], stored: [RecordKey: StoredRecord]) -> PushPlan {
        var plan = self
        var raised: [RecordKey: Int64] = [:]
        var changed = Set<RecordKey>()
        var unchanged = Set<RecordKey>()
        for index in plan.records.indices {
            let key = plan.records[index].key
            guard let version = versions[key] else { continue }
            if let before = stored[key], before.fields == plan.records[index].fields,
                before.tombstone == plan.records[index].tombstone
            {
                plan.records[index] = before
                if version > before.version {
                    plan.records[index].version = version
                } else {
                    unchanged.insert(key)
                }
                raised[key] = plan.records[index].version
                continue
            }
            changed.insert(key)
            if version > plan.records[index].version {
                plan.records[index].version = version
                raised[key] = version
            }
        }
        plan.records.removeAll { unchanged.contains($0.key) }
        changed.formUnion(unchanged)
        changed.formUnion(raised.keys)
        // A record the server's change did not reach (refused, or a first write that stood at the relay) is the
        // relay's own and keeps its number.
        var taken = Set<RecordKey>()
        for row in plan.mutations where row.status == .applied || row.status == .conflict {
            taken.insert(RecordKey(collection: row.mutation.collection, recordId: row.mutation.recordId, scope: row.mutation.scope ?? ""))
        }
        for (key, version) in versions.sorted(by: { $0.key < $1.key }) where !changed.contains(key) && taken.contains(key) {
            guard var record = stored[key], version > record.version else { continue }
            record.version = version
            plan.records.append(record)
            raised[key] = version
        }
        guard !raised.isEmpty else { return plan }
        for index in plan.mutations.indices {
            let mutation = plan.mutations[index].mutation
            let key = RecordKey(
                collection: mutation.collection, recordId: mutation.recordId, scope: mutation.scope ?? "")
            guard let version = raised[key] else { continue }
            plan.mutations[index].version = version
            if let result = plan.results.firstIndex(where: { $0.idempotencyKey == mutation.idempotencyKey }) {
                plan.results[result].version = version
            }
        }
        return plan
    }
}

/// Decides the outcome of a whole push from the stored state it touches. Pure: both engines load the
/// state inside their transaction, call ``plan(_:context:processed:records:collections:rules:newConflictId:)``,
/// and write the plan.
enum PushPlanner {
    /// The records a push reads: those it writes, and those their collections' rules consult.
    ///
    /// Mutations already `processed` (duplicates, reused keys) are answered from their idempotency row alone:
    /// their records need not be read.
    static func recordKeys(
        of items: [PushItem], context: PushContext, excluding processed: Set<String> = [],
        rules: [String: RecordRule] = RecordRule.standard
    ) -> Set<RecordKey> {
        var keys = Set<RecordKey>()
        for case .valid(let mutation, _) in items where !processed.contains(mutation.idempotencyKey) {
            keys.insert(RecordKey(mutation))
            if let rule = rules[mutation.collection] { keys.formUnion(rule.related(mutation, context)) }
        }
        return keys
    }

    /// ``recordKeys(of:context:excluding:rules:)`` leaving out only the duplicates answered from their idempotency row
    /// alone: a duplicate of a `superseded` write carries the record the server keeps, which is read.
    static func recordKeys(
        of items: [PushItem], context: PushContext, excludingAnswered processed: [String: ProcessedMutation],
        rules: [String: RecordRule] = RecordRule.standard
    ) -> Set<RecordKey> {
        var keys = recordKeys(
            of: items, context: context, excluding: Set(processed.filter { $0.value.status != .superseded }.keys), rules: rules)
        // A superseded write's related records need no reading: only its own record is answered.
        for case .valid(let mutation, _) in items where processed[mutation.idempotencyKey]?.status == .superseded {
            keys.insert(RecordKey(mutation))
        }
        return keys
    }

    static func plan(
        _ items: [PushItem],
        context: PushContext,
        processed: [String: ProcessedMutation],
        records: [RecordKey: StoredRecord],
        collections: CollectionRegistry,
        rules: [String: RecordRule] = RecordRule.standard,
        newConflictId: () -> String = { UUID().uuidString.lowercased() }
    ) -> PushPlan {
        var plan = PushPlan()
        var processed = processed
        var records = records
        // Each changed record, with the position of the mutation that last changed it.
        var lastChange: [RecordKey: Int] = [:]

        for (position, item) in items.enumerated() {
            switch item {
            case .rejected(let result):
                plan.results.append(result)
            case .valid(let mutation, let hash):
                let key = mutation.idempotencyKey
                if let earlier = processed[key] {
                    guard earlier.contentHash == hash else {
                        plan.results.append(
                            .rejected(
                                key, .idempotencyKeyReused,
                                "this idempotency key was already used for a different mutation"))
                        continue
                    }
                    var answer = MutationResult(
                        idempotencyKey: key, status: .duplicate, version: earlier.version,
                        originalStatus: earlier.status, conflict: earlier.conflict)
                    // A write the server did not take: the record it keeps now, so that a device that lost the
                    // first answer shows it too.
                    if earlier.status == .superseded, let policy = collections[mutation.collection],
                        let stored = records[RecordKey(mutation)], !stored.tombstone,
                        Self.mayRead(stored, policy: policy, context: context)
                    {
                        answer.version = stored.version
                        answer.serverFields = stored.fields
                        answer.serverCreatedAt = Timestamp(millisecondsSince1970: stored.createdAt)
                    }
                    plan.results.append(answer)
                    continue
                }
                guard let policy = collections[mutation.collection] else {
                    plan.results.append(.rejected(key, .unknownCollection, "unknown collection"))
                    continue
                }
                let recordKey = RecordKey(mutation)
                if let refusal = policy.writeRefusal(
                    role: context.role, userId: context.userId, existing: records[recordKey])
                {
                    plan.results.append(.rejected(key, .forbidden, refusal))
                    continue
                }
                // A base newer than anything stored claims to have seen a version that never existed: it would
                // pass every protected field's review.
                if let base = mutation.baseVersion, base > records[recordKey]?.version ?? 0 {
                    plan.results.append(
                        .rejected(key, .invalidBaseVersion, "baseVersion is newer than the stored record's version"))
                    continue
                }
                if let rule = rules[mutation.collection] {
                    let input = RecordRule.Input(
                        mutation: mutation, existing: records[recordKey], context: context, record: { records[$0] })
                    if let refusal = rule.check(input) {
                        plan.results.append(.rejected(key, refusal.code, refusal.message))
                        continue
                    }
                }
                let existing = records[recordKey]
                let outcome = RecordMerge.apply(
                    mutation, deviceId: context.deviceId, owner: context.userId, to: existing, policy: policy)
                // The mutation alone was weighed before; the fields it adds to a stored record may still make
                // that record too large, and then nothing of it is applied.
                if outcome.changed, let existing = records[recordKey],
                    let problem = Mutation.sizeProblem(of: outcome.record.fields, growingFrom: existing.fields)
                {
                    plan.results.append(.rejected(key, .invalidFields, problem))
                    continue
                }
                if outcome.changed {
                    lastChange[recordKey] = position
                    records[recordKey] = outcome.record
                }
                let version = outcome.record.version
                // An answer carries the server's values only to a caller who may read the record; the
                // organizers' review keeps them whole.
                let readable = existing.map { Self.mayRead($0, policy: policy, context: context) } ?? true
                var detail: ConflictDetail?
                if let conflict = outcome.conflict {
                    let id = newConflictId()
                    detail = ConflictDetail(
                        conflictId: id, fields: conflict.attempted.keys.sorted(),
                        serverFields: readable ? conflict.serverFields : [:], serverVersion: conflict.serverVersion)
                    plan.conflicts.append(
                        ConflictRecord(
                            conflictId: id, collection: mutation.collection, recordId: mutation.recordId,
                            scope: mutation.scope ?? "", idempotencyKey: key, deviceId: context.deviceId, userId: context.userId,
                            attemptedFields: conflict.attempted, serverFields: conflict.serverFields,
                            baseVersion: mutation.baseVersion, serverVersion: conflict.serverVersion,
                            clientTimestamp: mutation.clientTimestamp, receivedAt: context.receivedAt))
                }
                let status: MutationResult.Status = outcome.superseded ? .superseded : detail == nil ? .applied : .conflict
                plan.results.append(
                    MutationResult(
                        idempotencyKey: key, status: status, version: version, conflict: detail,
                        serverFields: outcome.superseded && readable ? outcome.record.fields : nil,
                        serverCreatedAt: outcome.superseded && readable
                            ? Timestamp(millisecondsSince1970: outcome.record.createdAt) : nil))
                plan.mutations.append(
                    MutationRow(
                        mutation: mutation, contentHash: hash, deviceId: context.deviceId, userId: context.userId,
                        userName: context.userName, receivedAt: context.receivedAt, status: status,
                        version: version, conflict: detail))
                processed[key] = ProcessedMutation(
                    contentHash: hash, status: status, version: version, conflict: detail)
            }
        }
        // Written in the order of their last change, so that pull order follows the order of the push.
        plan.records = lastChange.sorted { $0.value < $1.value }.compactMap { records[$0.key] }
        return plan
    }

    /// Whether the pusher may read `record`: an answer carries the server's values only then.
    static func mayRead(_ record: StoredRecord, policy: CollectionPolicy, context: PushContext) -> Bool {
        policy.read != .own || context.role >= .supervisor || record.owner == context.userId
    }
}
