import Foundation
import GRDB

extension SQLiteStorage {
    package func addConnector(_ connector: Connector) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO connectors (tenant, id, collection, scope, url, secret, format, paused, cursor_xid,
                      cursor_seq, delivered, delivered_changes, replays, failures, next_attempt_at, created_at, lease_until)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
                    """,
                arguments: [
                    connector.tenant, connector.id, connector.collection, connector.scope, connector.url, connector.secret,
                    connector.format.rawValue, connector.paused, connector.cursor.xid, connector.cursor.seq,
                    connector.delivered, connector.deliveredChanges, connector.replays, connector.failures, connector.nextAttemptAt,
                    connector.createdAt,
                ])
        }
    }

    package func connectors(tenant: String) async throws -> [Connector] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM connectors WHERE tenant = ? ORDER BY created_at, id", arguments: [tenant])
                .map(Self.connector)
        }
    }

    package func connector(tenant: String, id: String) async throws -> Connector? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM connectors WHERE tenant = ? AND id = ?", arguments: [tenant, id])
                .map(Self.connector)
        }
    }

    package func setConnectorPaused(tenant: String, id: String, paused: Bool) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE connectors SET paused = ? WHERE tenant = ? AND id = ?", arguments: [paused, tenant, id])
            return db.changesCount > 0
        }
    }

    package func replayConnector(tenant: String, id: String, from cursor: PullCursor) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE connectors SET cursor_xid = ?, cursor_seq = ?, pending_xid = NULL, pending_seq = NULL,
                      replays = replays + 1, failures = 0, last_error = NULL, next_attempt_at = 0
                    WHERE tenant = ? AND id = ?
                    """, arguments: [cursor.xid, cursor.seq, tenant, id])
            return db.changesCount > 0
        }
    }

    package func removeConnector(tenant: String, id: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM connectors WHERE tenant = ? AND id = ?", arguments: [tenant, id])
            return db.changesCount > 0
        }
    }

    package func activeConnectors() async throws -> [Connector] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM connectors WHERE NOT paused ORDER BY tenant, created_at, id")
                .map(Self.connector)
        }
    }

    package func leaseConnector(tenant: String, id: String, owner: String, now: Int64, until: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE connectors SET lease_owner = ?, lease_until = ?
                    WHERE tenant = ? AND id = ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_until < ?)
                    """, arguments: [owner, until, tenant, id, owner, now])
            return db.changesCount > 0
        }
    }

    package func releaseConnectors(owner: String) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE connectors SET lease_owner = NULL, lease_until = 0 WHERE lease_owner = ?", arguments: [owner])
        }
    }

    package func connectorSending(
        tenant: String, id: String, owner: String, from: PullCursor, to: PullCursor, until: Int64
    ) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE connectors SET pending_xid = ?, pending_seq = ?, lease_until = ?
                    WHERE tenant = ? AND id = ? AND lease_owner = ? AND cursor_xid = ? AND cursor_seq = ?
                    """, arguments: [to.xid, to.seq, until, tenant, id, owner, from.xid, from.seq])
            return db.changesCount > 0
        }
    }

    package func connectorDelivered(
        tenant: String, id: String, owner: String, from: PullCursor, to: PullCursor, changes: Int, at time: Int64
    ) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE connectors SET cursor_xid = ?, cursor_seq = ?, pending_xid = NULL, pending_seq = NULL,
                      delivered = delivered + 1,
                      delivered_changes = delivered_changes + ?, failures = 0, last_error = NULL, last_delivered_at = ?,
                      next_attempt_at = 0
                    WHERE tenant = ? AND id = ? AND lease_owner = ? AND cursor_xid = ? AND cursor_seq = ?
                    """, arguments: [to.xid, to.seq, changes, time, tenant, id, owner, from.xid, from.seq])
            return db.changesCount > 0
        }
    }

    package func connectorFailed(
        tenant: String, id: String, owner: String, error: String, at time: Int64, nextAttemptAt: Int64
    ) async throws -> Int? {
        try await pool.write { db in
            try Int.fetchOne(
                db,
                sql: """
                    UPDATE connectors SET failures = failures + 1, last_error = ?, last_failed_at = ?, next_attempt_at = ?
                    WHERE tenant = ? AND id = ? AND lease_owner = ?
                    RETURNING failures
                    """, arguments: [error, time, nextAttemptAt, tenant, id, owner])
        }
    }

    package func retryConnectorSoon(tenant: String, id: String, at time: Int64, spacing: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE connectors SET next_attempt_at = MAX(?1, COALESCE(last_failed_at, 0) + ?2)
                    WHERE tenant = ?3 AND id = ?4 AND NOT paused AND failures > 0
                      AND next_attempt_at > MAX(?1, COALESCE(last_failed_at, 0) + ?2)
                    """, arguments: [time, spacing, tenant, id])
            return db.changesCount > 0
        }
    }

    package func failingConnectorCount() async throws -> Int {
        try await pool.read { db in
            try Int.fetchOne(
                db, sql: "SELECT count(*) FROM connectors WHERE NOT paused AND failures >= ?",
                arguments: [Connector.failingAfter]) ?? 0
        }
    }

    package func changePositions(
        tenant: String, collection: String, scope: String?, owner: String?, recordIds: [String]
    ) async throws -> [RecordChangePosition] {
        guard !recordIds.isEmpty else { return [] }
        return try await pool.read { db in
            var sql = """
                SELECT record_id, scope, version, change_seq FROM records
                WHERE tenant = ? AND collection = ? AND record_id IN (SELECT value FROM json_each(?))
                """
            var arguments: StatementArguments = [
                tenant, collection, String(decoding: try JSONEncoder().encode(recordIds), as: UTF8.self),
            ]
            if let scope {
                sql += " AND scope = ?"
                arguments += [scope]
            }
            if let owner {
                sql += " AND owner = ?"
                arguments += [owner]
            }
            return try Row.fetchAll(db, sql: sql + " ORDER BY change_seq", arguments: arguments).map { row in
                RecordChangePosition(
                    recordId: row[0], scope: row[1], version: row[2], position: PullCursor(xid: 0, seq: row[3]))
            }
        }
    }

    package func receivedTimes(tenant: String, collection: String, recordIds: [String]) async throws -> [RecordVersion: Int64] {
        guard !recordIds.isEmpty else { return [:] }
        return try await pool.read { db in
            var times: [RecordVersion: Int64] = [:]
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT record_id, scope, version, max(received_at) AS received_at FROM mutations
                    WHERE tenant = ? AND collection = ? AND status = 'applied' AND record_id IN (SELECT value FROM json_each(?))
                    GROUP BY record_id, scope, version
                    """,
                arguments: [tenant, collection, String(decoding: try JSONEncoder().encode(recordIds), as: UTF8.self)])
            while let row = try rows.next() {
                times[RecordVersion(recordId: row["record_id"], scope: row["scope"], version: row["version"])] = row["received_at"]
            }
            return times
        }
    }

    private static func connector(_ row: Row) throws -> Connector {
        guard let format = NotificationFormat(rawValue: row["format"]) else {
            throw StorageError(.corrupt, "a connector has an unknown format")
        }
        var connector = Connector(
            tenant: row["tenant"], id: row["id"], collection: row["collection"], scope: row["scope"], url: row["url"],
            secret: row["secret"], format: format, createdAt: row["created_at"])
        connector.paused = row["paused"]
        connector.cursor = PullCursor(xid: row["cursor_xid"], seq: row["cursor_seq"])
        if let xid: Int64 = row["pending_xid"], let seq: Int64 = row["pending_seq"] {
            connector.pending = PullCursor(xid: xid, seq: seq)
        }
        connector.delivered = row["delivered"]
        connector.deliveredChanges = row["delivered_changes"]
        connector.replays = row["replays"]
        connector.failures = row["failures"]
        connector.lastError = row["last_error"]
        connector.lastDeliveredAt = row["last_delivered_at"]
        connector.lastFailedAt = row["last_failed_at"]
        connector.nextAttemptAt = row["next_attempt_at"]
        return connector
    }
}
