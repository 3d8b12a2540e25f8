import Foundation
import GRDB
import OutpostProtocol

/// What a relay journals with each push: the role the relay verified, and the mutations as the device sent them
/// (by idempotency key), which the server upstream must hash as the device's own push would.
package struct RelayJournaling: Sendable {
    var role: Role
    var sent: [String: Mutation]
}

/// A write a relay accepted and has not yet forwarded.
package struct JournalEntry: Sendable, Hashable {
    package var seq: Int64
    package var deviceId: String
    package var userId: String
    package var userName: String
    package var role: Role
    package var mutation: Mutation
}

/// How far a relay's forwarding has got, for its monitor and metrics.
package struct RelayBacklog: Sendable, Hashable {
    /// Writes accepted and not yet taken upstream.
    package var waiting: Int
    /// When the oldest of them was accepted (milliseconds since 1970).
    package var oldestAcceptedAt: Int64?
    /// Writes the server took, and those it refused.
    package var forwarded: Int
    package var refused: Int
    package var lastAttemptAt: Int64?
    package var lastSuccessAt: Int64?
    /// Why the last forward failed, while the line is down; nil once one succeeds.
    package var lastError: String?
}

/// The storage of a venue relay: its journal of writes to forward. SQLite only: a relay runs on a laptop.
package protocol RelayJournalStorage: SyncStorage {
    /// The oldest writes not yet forwarded, in the order they were accepted.
    func waitingEntries(limit: Int) async throws -> [JournalEntry]
    /// Keeps the server's answer to each forwarded entry, and clears the line's last error.
    func recordForwarded(_ outcomes: [(seq: Int64, result: MutationResult)], at time: Int64) async throws
    /// Notes a forward that failed, and why (no payload, no token).
    func recordLineFailure(_ reason: String, at time: Int64) async throws
    func relayBacklog() async throws -> RelayBacklog
    /// How many writes wait, and since when (milliseconds): ``relayBacklog()``'s first figures, from the index of
    /// waiting entries alone.
    func relayWaiting() async throws -> (count: Int, oldestAcceptedAt: Int64?)
    /// Where the relay's copy of `collection` in `scope` has got to upstream: the server's opaque cursor.
    func relayCursor(collection: String, scope: String) async throws -> String?
    func setRelayCursor(_ cursor: String, collection: String, scope: String) async throws
    /// What became of each of `keys` the relay journaled: nil while the server has not answered, else its answer.
    /// Keys the relay never journaled are left out.
    func journaled(tenant: String, keys: [String]) async throws -> [String: MutationResult?]
}

extension SQLiteStorage: RelayJournalStorage {
    /// Journals what `plan` processed anew, in the push's transaction: a write the relay answered is a write it
    /// will forward, even if it is killed the moment after.
    static func journal(_ plan: PushPlan, context: PushContext, journal: RelayJournaling, db: Database) throws {
        guard !plan.mutations.isEmpty else { return }
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO relay_journal (tenant, idempotency_key, device_id, user_id, user_name, role, mutation,
                                           accepted_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for row in plan.mutations {
            let key = row.mutation.idempotencyKey
            let sent = journal.sent[key] ?? row.mutation
            try insert.execute(
                arguments: [
                    context.tenant, key, row.deviceId, row.userId, row.userName, journal.role.rawValue,
                    String(decoding: try sent.jsonBytes(), as: UTF8.self), row.receivedAt.millisecondsSince1970,
                ])
        }
    }

    package func waitingEntries(limit: Int) async throws -> [JournalEntry] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT seq, device_id, user_id, user_name, role, mutation FROM relay_journal
                    WHERE forwarded_at IS NULL ORDER BY seq LIMIT ?
                    """, arguments: [limit]
            ).map { row in
                guard let role = Role(rawValue: row["role"]),
                    let mutation = try? Mutation(json: JSONValue(parsing: (row["mutation"] as String).utf8))
                else { throw StorageError(.corrupt, "a relay journal entry does not decode") }
                return JournalEntry(
                    seq: row["seq"], deviceId: row["device_id"], userId: row["user_id"], userName: row["user_name"],
                    role: role, mutation: mutation)
            }
        }
    }

    package func recordForwarded(_ outcomes: [(seq: Int64, result: MutationResult)], at time: Int64) async throws {
        try await pool.write { db in
            let update = try db.cachedStatement(
                sql: """
                    UPDATE relay_journal SET forwarded_at = ?, upstream_status = ?, upstream_result = ?
                    WHERE seq = ? AND forwarded_at IS NULL
                    """)
            for (seq, result) in outcomes {
                let json = String(decoding: try result.jsonBytes(), as: UTF8.self)
                try update.execute(arguments: [time, result.status.rawValue, json, seq])
            }
            try db.execute(
                sql: "UPDATE relay_line SET last_attempt_at = ?, last_success_at = ?, last_error = NULL WHERE id = 1",
                arguments: [time, time])
            let refused = outcomes.filter { $0.result.status == .rejected }.map(\.result.idempotencyKey)
            if !refused.isEmpty { try Self.withdraw(refused, at: time, db: db) }
        }
    }

    /// The device id of what the relay itself writes: the records it withdraws.
    static var relayDevice: String { "relay" }

    /// Takes back, at the relay, the records that exist only because of writes the server refused: the server
    /// has the last word, so other doors stop seeing a guest as checked in whose check-in the server refused.
    ///
    /// A record is withdrawn (a tombstone, without stamps, that a later write replaces whole) when the server
    /// never had it as far as the relay knows (no change of the server's reached it) and every venue write of it
    /// has been refused upstream. A record the server has keeps the relay's copy, which the server's next change
    /// replaces field by field; a record with a write still waiting or taken upstream is left as it is. The door
    /// that made a refused write keeps showing it refused: its own queued entries stay on top of the tombstone.
    static func withdraw(_ keys: [String], at time: Int64, db: Database) throws {
        let upstream = RelayMirror<SQLiteStorage>.upstreamDevice
        for key in keys {
            guard
                let write = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT m.tenant, m.collection, m.record_id, m.scope FROM relay_journal j
                        JOIN mutations m ON m.tenant = j.tenant AND m.idempotency_key = j.idempotency_key
                        WHERE j.idempotency_key = ? AND m.status IN ('applied', 'conflict')
                        """, arguments: [key])
            else { continue }
            let record: [any DatabaseValueConvertible] = [
                write["tenant"] as String, write["collection"] as String, write["record_id"] as String,
                write["scope"] as String,
            ]
            // Kept when the server has had the record (a change of the server's reached the relay, whatever the
            // relay made of it), or when a venue write of it, whatever the relay made of it, still waits or was
            // taken upstream. The relay's own withdrawals count for neither.
            let kept =
                try Bool.fetchOne(
                    db,
                    sql: """
                        SELECT EXISTS (
                          SELECT 1 FROM mutations m
                          LEFT JOIN relay_journal j ON j.tenant = m.tenant AND j.idempotency_key = m.idempotency_key
                          WHERE m.tenant = ? AND m.collection = ? AND m.record_id = ? AND m.scope = ?
                            AND (m.device_id = ?
                                 OR (j.seq IS NOT NULL AND (j.upstream_status IS NULL OR j.upstream_status <> 'rejected'))))
                        """, arguments: StatementArguments(record + [upstream])) ?? true
            guard !kept,
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT * FROM records
                        WHERE tenant = ? AND collection = ? AND record_id = ? AND scope = ? AND NOT tombstone
                        """, arguments: StatementArguments(record))
            else { continue }
            var withdrawn = try Self.record(row)
            withdrawn.version += 1
            withdrawn.tombstone = true
            withdrawn.fields = [:]
            withdrawn.meta = StoredRecord.Meta()
            withdrawn.updatedAt = time
            // The withdrawal in the record's history, under a key no device may send.
            let deletion = Mutation(
                idempotencyKey: "\(RelayMirror<SQLiteStorage>.keyPrefix)withdrawn:\(key)", collection: withdrawn.collection,
                recordId: withdrawn.recordId, scope: withdrawn.scope.isEmpty ? nil : withdrawn.scope, op: .delete,
                clientTimestamp: Timestamp(millisecondsSince1970: time), baseVersion: withdrawn.version - 1)
            let history = MutationRow(
                mutation: deletion, contentHash: "", deviceId: relayDevice, userId: relayDevice, userName: "Venue relay",
                receivedAt: Timestamp(millisecondsSince1970: time), status: .applied, version: withdrawn.version)
            try Self.write(PushPlan(records: [withdrawn], mutations: [history]), tenant: write["tenant"] as String, db: db)
        }
    }

    package func recordLineFailure(_ reason: String, at time: Int64) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE relay_line SET last_attempt_at = ?, last_error = ? WHERE id = 1", arguments: [time, reason])
        }
    }

    package func relayWaiting() async throws -> (count: Int, oldestAcceptedAt: Int64?) {
        try await pool.read { db in
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT count(*) AS n, (SELECT accepted_at FROM relay_journal WHERE forwarded_at IS NULL ORDER BY seq LIMIT 1) AS oldest
                    FROM relay_journal WHERE forwarded_at IS NULL
                    """)
            return (row?["n"] ?? 0, row?["oldest"])
        }
    }

    package func relayBacklog() async throws -> RelayBacklog {
        try await pool.read { db in
            let waiting = try Row.fetchOne(
                db, sql: "SELECT count(*) AS n, min(accepted_at) AS oldest FROM relay_journal WHERE forwarded_at IS NULL")
            let done = try Row.fetchOne(
                db,
                sql: """
                    SELECT count(*) FILTER (WHERE upstream_status <> 'rejected') AS taken,
                           count(*) FILTER (WHERE upstream_status = 'rejected') AS refused
                    FROM relay_journal WHERE forwarded_at IS NOT NULL
                    """)
            let line = try Row.fetchOne(db, sql: "SELECT * FROM relay_line WHERE id = 1")
            return RelayBacklog(
                waiting: waiting?["n"] ?? 0, oldestAcceptedAt: waiting?["oldest"], forwarded: done?["taken"] ?? 0,
                refused: done?["refused"] ?? 0, lastAttemptAt: line?["last_attempt_at"],
                lastSuccessAt: line?["last_success_at"], lastError: line?["last_error"])
        }
    }

    package func relayCursor(collection: String, scope: String) async throws -> String? {
        try await pool.read { db in
            try String.fetchOne(
                db, sql: "SELECT cursor FROM relay_cursors WHERE collection = ? AND scope = ?", arguments: [collection, scope])
        }
    }

    package func setRelayCursor(_ cursor: String, collection: String, scope: String) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO relay_cursors (collection, scope, cursor) VALUES (?, ?, ?)
                    ON CONFLICT (collection, scope) DO UPDATE SET cursor = excluded.cursor
                    """, arguments: [collection, scope, cursor])
        }
    }

    package func journaled(tenant: String, keys: [String]) async throws -> [String: MutationResult?] {
        guard !keys.isEmpty else { return [:] }
        return try await pool.read { db in
            let find = try db.cachedStatement(
                sql: "SELECT upstream_result FROM relay_journal WHERE tenant = ? AND idempotency_key = ?")
            var found: [String: MutationResult?] = [:]
            for key in keys {
                guard let row = try Row.fetchOne(find, arguments: [tenant, key]) else { continue }
                if let json: String = row["upstream_result"] {
                    guard let result = try? MutationResult(jsonBytes: json.utf8) else {
                        throw StorageError(.corrupt, "a relay journal entry's answer does not decode")
                    }
                    found[key] = .some(result)
                } else {
                    found[key] = .some(nil)
                }
            }
            return found
        }
    }
}
