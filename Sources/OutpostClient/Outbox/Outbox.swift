import Foundation
import GRDB
import OutpostProtocol

/// One queued mutation: what the device will push, in chronological order.
package struct OutboxEntry: Sendable, Hashable {
    package var seq: Int64
    package var mutation: Mutation
    package var attempts: Int
}

/// The queue of mutations not yet confirmed by the server, kept in the device store's `outbox` table
/// (``OutboxRow``): what the engine pushes, in the order the writes were made, and what becomes of each answer.
///
/// A local write queues its entry in the record's own transaction (``LocalStore/write(_:deviceId:at:offline:)``);
/// everything after, this type does.
package struct Outbox: Sendable {
    let store: LocalStore
}

extension LocalStore {
    /// The store's queue of mutations waiting for the server.
    package var outbox: Outbox { Outbox(store: self) }
}

extension Outbox {
    /// What the fields of one chunk may take, at most: half a server's default body limit, so that a chunk of
    /// large records is never refused as too large.
    package static let chunkMaxBytes = 4 * 1024 * 1024

    /// The next `limit` mutations to push after local sequence `seq`: by client time, then local sequence.
    /// Rejected ones are skipped until retried, so they never block the records behind them.
    package func nextChunk(
        after seq: Int64 = 0, limit: Int, maxBytes: Int = Outbox.chunkMaxBytes
    ) async throws
        -> [OutboxEntry]
    {
        try await chunk(after: seq, limit: limit, maxBytes: maxBytes, only: nil)
    }

    /// ``nextChunk(after:limit:maxBytes:)`` of the entries of `records` alone, or of all when nil.
    func chunk(
        after seq: Int64 = 0, limit: Int, maxBytes: Int = Outbox.chunkMaxBytes, only records: Set<RecordKey>?
    )
        async throws -> [OutboxEntry]
    {
        let sealer = store.sealer
        return try await store.perform {
            try await store.read { db in
                let rows = try OutboxRow.pending(after: seq, limit: limit, of: records, db)
                // A push must fit the server's body limit (8 MiB): the chunk ends before the entry whose sealed
                // fields (their JSON, 28 bytes longer) would take it past `maxBytes`, and holds at least one.
                var bytes = 0
                var count = 0
                for row in rows {
                    bytes += row.payload.count + 256
                    if count > 0 && bytes > maxBytes { break }
                    count += 1
                }
                return try rows.prefix(count).map { try $0.entry(opening: sealer) }
            }
        }
    }

    /// How many mutations wait in the outbox (rejected ones excluded).
    package func count() async throws -> Int {
        try await store.perform {
            try await store.read { db in
                try OutboxRow.pendingCount(db)
            }
        }
    }

    /// Applies the server's answer to one pushed chunk, in one transaction.
    ///
    /// `applied` and `duplicate` confirm the entry; `conflict` confirms it and marks the record rejected with
    /// the server's value beside its own, for the user to choose; `rejected` keeps the entry as rejected and marks
    /// the record rejected with the reason, except a refusal the device can outgrow (its clock ran ahead of
    /// the server's, or a venue relay does not carry the write; see ``isRetriable(_:)``), which keeps the entry
    /// queued and marks the record failed.
    /// A record becomes synced only when none of its entries remain.
    ///
    /// The server can give every one of these answers again, so the commit does not flush (see
    /// ``LocalStore/writeUnflushed(changing:_:)``).
    func apply(_ results: [(OutboxEntry, MutationResult)], at date: Date) async throws {
        let sealer = store.sealer
        let decision = Self.decide(results)
        let through = results.map(\.0.seq).max() ?? 0
        try await store.perform {
            try await store.writeUnflushed(changing: Set(results.map(\.0.mutation.collection))) { db in
                try Self.store(decision, at: Timestamp(date).millisecondsSince1970, db: db)
                try Self.storeRecords(decision, through: through, at: date, sealer: sealer, db: db)
            }
        }
    }

    /// What one chunk's answers decide, before anything is stored.
    struct ChunkDecision {
        /// Entries the server has: they leave the outbox.
        var confirmed: [Int64] = []
        /// Entries refused, and the state each keeps: `pending` for a refusal the device can outgrow, `rejected`
        /// for the others.
        var refused: [(seq: Int64, state: OutboxRow.State)] = []
        /// What the answers did to each record.
        var outcomes: [RecordKey: Outcome] = [:]
        /// The device time of each record's last entry in the chunk.
        var lastEntry: [RecordKey: Int64] = [:]
        /// The answers decided on, for the rare record whose conflict needs to know what its entries wrote.
        var results: [(OutboxEntry, MutationResult)] = []
    }

    /// Decides, from the server's answers alone, what becomes of each entry and each record.
    static func decide(_ results: [(OutboxEntry, MutationResult)]) -> ChunkDecision {
        var decision = ChunkDecision(results: results)
        decision.confirmed.reserveCapacity(results.count)
        for (entry, result) in results {
            let key = RecordKey(entry.mutation)
            var outcome = decision.outcomes[key] ?? Outcome()
            let status = result.settledStatus
            switch status {
            case .applied, .duplicate:
                decision.confirmed.append(entry.seq)
                outcome.version = result.version ?? outcome.version
            case .superseded:
                // The server keeps an earlier write: the record shows it, from the answer or from the next pull.
                decision.confirmed.append(entry.seq)
                outcome.version = result.version ?? outcome.version
                outcome.serverFields = result.serverFields
                outcome.serverCreatedAt = result.serverCreatedAt
                outcome.superseded = true
            case .conflict:
                decision.confirmed.append(entry.seq)
                outcome.version = result.version ?? outcome.version
                outcome.conflict = result.conflict
                let fields = result.conflict?.fields.joined(separator: ", ") ?? "a protected field"
                outcome.error = "Conflict: \(fields) changed on the server; the server kept its value"
                outcome.code = "conflict"
                outcome.status = .refused
            case .rejected where result.error?.code == .heldAtRelay:
                // Not refused: the venue relay holds it, and answers for the server once the server has it.
                decision.refused.append((entry.seq, .pending))
                if outcome.status != .refused && outcome.status != .failed || outcome.error == nil {
                    outcome.error = result.error?.message ?? "held at the venue relay"
                    outcome.code = WireError.Code.heldAtRelay.rawValue
                    outcome.status = .pending
                }
            case .rejected:
                let retriable = isRetriable(result.error?.code)
                decision.refused.append((entry.seq, retriable ? .pending : .rejected))
                outcome.error = retriable ? retriableMessage(result) : result.error?.message ?? "refused by the server"
                outcome.code = result.error?.code.rawValue
                if outcome.status != .refused { outcome.status = retriable ? .failed : .refused }
            }
            decision.outcomes[key] = outcome
            decision.lastEntry[key] = max(decision.lastEntry[key] ?? .min, entry.mutation.clientTimestamp.millisecondsSince1970)
        }
        return decision
    }

    /// Stores what becomes of the chunk's entries: confirmed ones deleted, refused ones kept with their state.
    private static func store(_ decision: ChunkDecision, at now: Int64, db: Database) throws {
        for (seq, state) in decision.refused {
            try OutboxRow.markAttempt(seq, state: state, at: now, db)
        }
        try OutboxRow.remove(decision.confirmed, db)
    }

    /// Stores what becomes of the chunk's records, once its entries are stored: each one's version, status and
    /// sync error, synced only when none of its entries remain (entries up to `through` were in the chunk).
    private static func storeRecords(
        _ decision: ChunkDecision, through: Int64, at date: Date, sealer: Sealer, db: Database
    ) throws {
        let now = Timestamp(date).millisecondsSince1970
        let (updatedAt, sealedDetail) = try RecordRow.plainColumns(of: decision.outcomes.keys, db)
        let queued = try stillQueued(updatedAt: updatedAt, lastEntry: decision.lastEntry, through: through, db: db)
        for (key, outcome) in decision.outcomes where updatedAt[key] != nil {
            let stillQueued = queued[key] ?? 0
            // Confirmed, with no sync error or conflict in the sealed payload to clear (or with entries still
            // queued, which leave it as it is): the sealed payload stays as it is.
            if outcome.error == nil && !outcome.superseded && (stillQueued > 0 || !sealedDetail.contains(key)) {
                try RecordRow.markAttempt(key, version: outcome.version, at: now, status: stillQueued == 0 ? .synced : nil, db)
                continue
            }
            guard var record = try RecordRow.find(key, db)?.open(with: sealer)
            else { continue }
            if let version = outcome.version { record.version = max(record.version ?? 0, version) }
            record.lastSyncAttempt = date
            if outcome.superseded && stillQueued == 0 {
                if let fields = outcome.serverFields {
                    // The record the server keeps, whole: its fields, its offline flag, and its time when the
                    // answer gives it.
                    record.fields = fields
                    record.isOfflineEntry = fields[LocalRecord.offlineEntryField] == .bool(true)
                    if let createdAt = outcome.serverCreatedAt { record.createdAt = createdAt }
                } else {
                    // An answer repeated without the stored fields: the next pull of the collection, from its
                    // start, brings them (a synced record takes the server's fields at its version).
                    try LocalStore.forgetPullCursors(collection: key.collection, scope: key.scope, db: db)
                }
            }
            if let error = outcome.error {
                record.syncStatus = outcome.status
                record.syncError = error
                record.syncErrorCode = outcome.code
                if let conflict = outcome.conflict { record.conflict = conflict }
            } else if let conflict = record.conflict, !outcome.writing(decision.results, of: key).settles(conflict) {
                record.syncStatus = .refused
            } else {
                // Entries still queued keep the record pending.
                record.syncStatus = stillQueued == 0 ? .synced : .pending
                record.syncError = nil
                record.syncErrorCode = nil
                record.conflict = nil
                if stillQueued == 0 { record.serverCopy = nil }
            }
            try RecordRow(record, sealer: sealer).insert(db)
        }
    }

    /// What one chunk's answers did to one record.
    struct Outcome {
        var error: String?
        var code: String?
        var status = RecordSyncStatus.failed
        var conflict: ConflictDetail?
        var version: Int64?
        /// The fields the server took from the chunk's entries, and whether one of them deleted the record.
        var written: Set<String> = []
        var deleted = false
        /// Whether the server kept an earlier write instead of the chunk's; with the stored fields when the
        /// answer carried them (``MutationResult/serverFields``).
        var superseded = false
        var serverFields: [String: JSONValue]?
        var serverCreatedAt: Timestamp?

        /// Whether what the server took settles `conflict`: the user wrote every conflicting field again (a
        /// resend), or deleted the record. Any other write leaves the conflict to the user.
        func settles(_ conflict: ConflictDetail) -> Bool {
            deleted || conflict.fields.allSatisfy(written.contains)
        }

        /// This outcome with what the server took of `key`'s entries among `results`: gathered only for a record in
        /// conflict, so that every other answer costs nothing for it.
        func writing(_ results: [(OutboxEntry, MutationResult)], of key: RecordKey) -> Outcome {
            var outcome = self
            for (entry, result) in results where RecordKey(entry.mutation) == key {
                guard result.settledStatus == .applied || result.settledStatus == .duplicate else { continue }
                if entry.mutation.op == .delete { outcome.deleted = true }
                outcome.written.formUnion(entry.mutation.fields.keys)
            }
            return outcome
        }
    }

    /// Whether a refusal may pass on its own, so that its entry stays queued: a client time ahead of the
    /// server's clock (the device clock had jumped), which ``restampFutureEntries(now:maxLead:)`` corrects
    /// once the device clock is right again; or a write a venue relay does not carry, which goes when the
    /// device reaches the server.
    static func isRetriable(_ code: WireError.Code?) -> Bool {
        code == .invalidTimestamp || code == .notCarriedByRelay
    }

    /// What the person is told of a retriable refusal: the device clock's, in their words, or the relay's own.
    static func retriableMessage(_ result: MutationResult) -> String {
        result.error?.code == .invalidTimestamp ? clockAheadMessage : result.error?.message ?? "not taken yet; tried again later"
    }

    /// A retriable refusal's reason, in the words of the person holding the device.
    static let clockAheadMessage = "The device's clock is ahead of the server's: check the date and time settings"

    /// How many outbox entries each record (given by its `updated_at`) still has, after a chunk's entries up to
    /// `maxSeq` were confirmed or rejected.
    ///
    /// The outbox has no index on record ids, so that local writes stay cheap, and a pass over all of it per
    /// chunk would slow a drain. Most records need none. One whose last local write is its last entry in
    /// the chunk (its `updated_at` is that entry's time, and device time only moves forward) has no entry after
    /// the chunk; what can remain of it lies at or below `maxSeq`, where, the chunk's entries gone, only
    /// entries rejected or put back by a retry are left, a short walk by sequence. The others, written again
    /// meanwhile or changed by a pull, are counted in one pass over the outbox.
    static func stillQueued(
        updatedAt: [RecordKey: Int64], lastEntry: [RecordKey: Int64], through maxSeq: Int64, db: Database
    ) throws -> [RecordKey: Int] {
        var queued: [RecordKey: Int] = [:]
        var exact = Set<RecordKey>()
        var unsure = Set<RecordKey>()
        for (key, time) in updatedAt {
            if time == lastEntry[key] { exact.insert(key) } else { unsure.insert(key) }
        }
        func count(_ keys: Set<RecordKey>, through maxSeq: Int64) throws {
            guard !keys.isEmpty else { return }
            for key in try OutboxRow.records(of: keys, through: maxSeq, db) { queued[key, default: 0] += 1 }
        }
        try count(exact, through: maxSeq)
        try count(unsure, through: .max)
        return queued
    }

    /// Marks the records with queued mutations failed, after the network gave up; the entries stay queued. With
    /// `refusedAs`, the server refused the whole push for a reason no resend outgrows (a device id another user
    /// owns): the entries are set aside and the records rejected with that code, waiting for a person.
    ///
    /// - Parameter records: the records the sync was of (a retry of one record), when not the whole outbox: the
    ///   others were not tried and keep their state. A refusal of the device is every record's.
    func markUndelivered(
        error: String, refusedAs code: String? = nil, at date: Date, only records: Set<RecordKey>? = nil
    ) async throws {
        let sealer = store.sealer
        let records = code == nil ? records : nil
        try await store.perform {
            try await store.writeImmediate { db in
                let now = Timestamp(date).millisecondsSince1970
                let keys = try OutboxRow.pendingRecords(db).filter { key in records.map { $0.contains(key) } ?? true }
                try OutboxRow.markAttempted(at: now, only: records == nil ? nil : keys, db)
                if code != nil { try OutboxRow.refuseAllPending(db) }
                for key in keys {
                    guard var record = try RecordRow.find(key, db)?.open(with: sealer) else { continue }
                    // A conflict still awaits the user's choice: it stays the record's state.
                    if record.conflict == nil {
                        record.syncStatus = code == nil ? .failed : .refused
                        record.syncError = error
                        record.syncErrorCode = code
                    }
                    record.lastSyncAttempt = date
                    try RecordRow(record, sealer: sealer).insert(db)
                }
            }
        }
    }

    /// Puts a record's rejected mutations back in the queue as they are, and makes the record
    /// pending again; a nil `collection` or `scope` matches any. Returns how many entries were requeued.
    @discardableResult
    package func requeue(collection: String? = nil, scope: String? = nil, recordId: String) async throws -> Int {
        try await store.perform {
            try await store.writeImmediate { db in
                let requeued = try OutboxRow.requeue(recordId: recordId, collection: collection, scope: scope, db)
                try RecordRow.markPendingWhereQueued(recordId: recordId, collection: collection, scope: scope, db)
                if requeued > 0 { store.requeues.withLockedValue { $0 += 1 } }
                return requeued
            }
        }
    }

    /// Stamps again the queued entries whose client time is more than `maxLead` ahead of `now`: written while
    /// the device clock had jumped ahead, they would be refused as from the future. Each takes a time just
    /// before the next entry queued after it and no later than `now`, so that a record's later write still
    /// wins over one made during the jump; the field each fills with its time (a check-in's `scanned_at`)
    /// follows. Their idempotency keys stay, so only entries the server holds none of are stamped: those never
    /// sent, and those of a record it last refused as from the future (``WireError/Code/invalidTimestamp``). An
    /// entry whose answer was lost, or that a venue relay holds, goes again as it was sent.
    ///
    /// - Returns: how many entries were stamped again.
    @discardableResult
    func restampFutureEntries(now: Date, maxLead: Duration) async throws -> Int {
        let sealer = store.sealer
        let limit = Timestamp(now).millisecondsSince1970 + Int64(maxLead.components.seconds) * 1000
        // A read first: almost always there is nothing to stamp, and a read costs no commit.
        let any = try await store.perform {
            try await store.read { db in
                try OutboxRow.hasPending(writtenAfter: limit, db)
            }
        }
        guard any else { return 0 }
        return try await store.perform {
            try await store.writeImmediate { db in
                // From the first entry to stamp on, newest first: each stamped entry goes just before the one after it.
                let rows = try OutboxRow.pendingNewestFirst(fromFirstWrittenAfter: limit, db)
                var ceiling = Timestamp(now).millisecondsSince1970 + 1
                var stamped = 0
                var refusedAsFuture: [RecordKey: Bool] = [:]
                func mayStamp(_ row: OutboxRow) throws -> Bool {
                    if row.attempts == 0 { return true }
                    if let known = refusedAsFuture[row.record] { return known }
                    let code = try RecordRow.find(row.record, db)?.open(with: sealer).syncErrorCode
                    refusedAsFuture[row.record] = code == WireError.Code.invalidTimestamp.rawValue
                    return refusedAsFuture[row.record]!
                }
                for var row in rows {
                    guard row.clientTime > limit, try mayStamp(row) else {
                        ceiling = min(ceiling, row.clientTime)
                        continue
                    }
                    ceiling -= 1
                    row.clientTime = ceiling
                    stamped += 1
                    if let field = row.timestampField {
                        var fields = try row.fields(opening: sealer)
                        fields[field] = .string(Timestamp(millisecondsSince1970: row.clientTime).iso8601)
                        try row.seal(fields, with: sealer)
                    }
                    try row.update(db, columns: ["client_ts", "payload"])
                }
                return stamped
            }
        }
    }
}

extension Outbox {
    /// Records still waiting to sync (pending or failed, not refused) whose oldest unsynced write was made at
    /// `cutoff` or earlier, whether or not a sync was ever tried: what the device escalates. Carries ids,
    /// times and the reason, never the payload.
    package func persistentFailures(writtenBefore cutoff: Date) async throws -> [SyncFailure] {
        let sealer = store.sealer
        return try await store.perform {
            try await store.read { db in
                try OutboxRow.pendingRecords(writtenBefore: Timestamp(cutoff).millisecondsSince1970, db).map { key, first in
                    let record = try RecordRow.find(key, db)?.open(with: sealer)
                    return SyncFailure(
                        collection: key.collection, recordId: key.recordId, firstAttempt: Timestamp(millisecondsSince1970: first),
                        lastError: SyncFailure.reportableError(record?.syncError ?? "not yet delivered: the device has been offline"))
                }
            }
        }
    }

    /// The ids of the records of `collection` (in `scope` when given) still waiting to sync whose oldest unsynced
    /// write was made at `cutoff` or earlier: ``persistentFailures(writtenBefore:)`` of one list, without reading
    /// a payload.
    package func overdueRecordIds(writtenBefore cutoff: Date, collection: String, scope: String?) async throws -> Set<String> {
        try await store.perform {
            try await store.read { db in
                try OutboxRow.pendingRecordIds(
                    writtenBefore: Timestamp(cutoff).millisecondsSince1970, collection: collection, scope: scope, db)
            }
        }
    }
}

/// A record's identity on the device.
struct RecordKey: Hashable, Sendable {
    var collection: String
    /// Empty for a collection without scopes.
    var scope: String
    var recordId: String

    init(_ collection: String, _ scope: String, _ recordId: String) {
        self.collection = collection
        self.scope = scope
        self.recordId = recordId
    }

    /// The record a queued mutation changes.
    init(_ mutation: Mutation) {
        self.init(mutation.collection, mutation.scope ?? "", mutation.recordId)
    }
}

extension MutationResult {
    /// How the mutation ended on the server: a duplicate answers as the first delivery was answered.
    var settledStatus: Status { status == .duplicate ? (originalStatus ?? .applied) : status }
}
