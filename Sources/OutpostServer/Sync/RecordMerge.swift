import OutpostProtocol

/// The conflict policy: how one mutation changes one record. A pure function of its inputs.
///
/// - Fields are last-write-wins by ``FieldStamp``: a value older than the one stored is dropped.
/// - A delete writes "absent" to every field at its stamp: fields stamped earlier go, a later one stays,
///   and the record becomes a tombstone when no field is left. Its stamp is a floor under which no later
///   arriving write can resurrect a field.
/// - A protected field that already has a value changes only when the mutation's `baseVersion` is at least
///   the version that last changed it; otherwise that part is not applied and is reported as a conflict.
///   Last-write-wins never resolves a protected field.
enum RecordMerge {
    struct Outcome: Sendable {
        var record: StoredRecord
        /// Whether anything in the record changed (its version then went up by one).
        var changed: Bool
        /// The protected fields that were not applied, with the server's values, if any.
        var conflict: Conflict?
        /// Whether the mutation was not written because the collection keeps the record's first write.
        var superseded = false
    }

    struct Conflict: Sendable, Hashable {
        var attempted: [String: JSONValue]
        var serverFields: [String: JSONValue]
        var serverVersion: Int64
    }

    static func apply(
        _ mutation: Mutation,
        deviceId: String,
        owner: String = "",
        to existing: StoredRecord?,
        policy: CollectionPolicy
    ) -> Outcome {
        let time = mutation.clientTimestamp.millisecondsSince1970
        var record =
            existing
            ?? StoredRecord(
                collection: mutation.collection, recordId: mutation.recordId, scope: mutation.scope ?? "",
                owner: owner, version: 0,
                tombstone: false, fields: [:], meta: .init(), createdAt: time, updatedAt: time
            )
        // A record a venue relay withdrew (a tombstone without stamps) is written afresh, as if never stored.
        let withdrawn = existing.map { $0.tombstone && $0.meta == StoredRecord.Meta() } ?? false
        if withdrawn {
            record.tombstone = false
            record.fields = [:]
            record.createdAt = time
            record.updatedAt = time
        }
        let isNew = existing == nil || withdrawn
        let newVersion = record.version + 1
        let stamp = FieldStamp(t: time, d: deviceId, k: mutation.idempotencyKey, v: newVersion)
        var changed = isNew
        var conflict = Conflict(attempted: [:], serverFields: [:], serverVersion: 0)

        // A protected field that holds a value may change only on a fresh enough base.
        func protectedFieldBlocks(_ name: String) -> Bool {
            guard policy.protectedFields.contains(name), let current = record.meta.stamps[name] else { return false }
            guard let base = mutation.baseVersion, base >= current.v else {
                conflict.attempted[name] = mutation.op == .delete ? .null : mutation.fields[name] ?? .null
                conflict.serverFields[name] = record.fields[name] ?? .null
                conflict.serverVersion = max(conflict.serverVersion, current.v)
                return true
            }
            return false
        }

        if policy.merge == .firstWriteWins, let existing, !existing.tombstone, mutation.op == .upsert {
            // The first write stands; one that happened earlier but arrived later takes its place whole.
            guard time < existing.createdAt else {
                return Outcome(record: existing, changed: false, conflict: nil, superseded: true)
            }
            record.fields = mutation.fields
            record.meta.stamps = mutation.fields.mapValues { _ in stamp }
            record.createdAt = time
            record.updatedAt = time
            record.version = newVersion
            return Outcome(record: record, changed: true, conflict: nil)
        }

        switch mutation.op {
        case .upsert where isNew:
            // Nothing stored yet: no stamp, deletion or protected value to weigh, so every field is written.
            record.fields = mutation.fields
            record.meta.stamps = mutation.fields.mapValues { _ in stamp }
        case .upsert:
            for (name, value) in mutation.fields.sorted(by: { $0.key < $1.key }) {
                if policy.protectedFields.contains(name) {
                    if protectedFieldBlocks(name) { continue }
                } else {
                    if let deletion = record.meta.deletion, stamp <= deletion { continue }
                    if let current = record.meta.stamps[name], stamp <= current { continue }
                }
                record.fields[name] = value
                record.meta.stamps[name] = stamp
                changed = true
            }
            if changed && record.tombstone {
                record.tombstone = false
            }
        case .delete:
            if record.meta.deletion.map({ stamp > $0 }) ?? true {
                for name in record.fields.keys.sorted() {
                    if policy.protectedFields.contains(name) {
                        if protectedFieldBlocks(name) { continue }
                    } else if let current = record.meta.stamps[name], stamp <= current {
                        continue
                    }
                    record.fields[name] = nil
                    record.meta.stamps[name] = nil
                    changed = true
                }
                record.meta.deletion = stamp
                changed = true
                if record.fields.isEmpty && !record.tombstone {
                    record.tombstone = true
                    changed = true
                }
            }
        }

        // The record's times are the device's: created at the earliest action seen, even one that arrives late.
        if !isNew && time < record.createdAt {
            record.createdAt = time
            changed = true
        }
        if changed {
            record.version = newVersion
            if isNew || time > record.updatedAt { record.updatedAt = time }
        }
        return Outcome(record: record, changed: changed, conflict: conflict.attempted.isEmpty ? nil : conflict)
    }
}
