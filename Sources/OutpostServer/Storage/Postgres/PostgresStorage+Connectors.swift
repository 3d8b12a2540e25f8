import Foundation
import PostgresNIO

extension PostgresStorage {
    package func addConnector(_ connector: Connector) async throws {
        try await committed { connection in
            try await connection.query(
                """
                INSERT INTO connectors (tenant, id, collection, scope, url, secret, format, paused, cursor_xid, cursor_seq,
                  delivered, delivered_changes, replays, failures, next_attempt_at, created_at, lease_until)
                VALUES (\(connector.tenant), \(connector.id), \(connector.collection), \(connector.scope), \(connector.url),
                  \(connector.secret), \(connector.format.rawValue), \(connector.paused), \(connector.cursor.xid),
                  \(connector.cursor.seq), \(connector.delivered), \(connector.deliveredChanges), \(Int32(connector.replays)),
                  \(Int32(connector.failures)),
                  \(connector.nextAttemptAt), \(connector.createdAt), 0)
                """, logger: logger)
        }
    }

    package func connectors(tenant: String) async throws -> [Connector] {
        try await guarded {
            try await Self.connectors(
                try await client.query(
                    "SELECT * FROM connectors WHERE tenant = \(tenant) ORDER BY created_at, id", logger: logger))
        }
    }

    package func connector(tenant: String, id: String) async throws -> Connector? {
        try await guarded {
            try await Self.connectors(
                try await client.query("SELECT * FROM connectors WHERE tenant = \(tenant) AND id = \(id)", logger: logger)
            ).first
        }
    }

    package func setConnectorPaused(tenant: String, id: String, paused: Bool) async throws -> Bool {
        try await changedRow(
            "UPDATE connectors SET paused = \(paused) WHERE tenant = \(tenant) AND id = \(id) RETURNING id")
    }

    package func replayConnector(tenant: String, id: String, from cursor: PullCursor) async throws -> Bool {
        try await changedRow(
            """
            UPDATE connectors SET cursor_xid = \(cursor.xid), cursor_seq = \(cursor.seq), pending_xid = NULL,
              pending_seq = NULL, replays = replays + 1, failures = 0, last_error = NULL, next_attempt_at = 0
            WHERE tenant = \(tenant) AND id = \(id) RETURNING id
            """)
    }

    package func removeConnector(tenant: String, id: String) async throws -> Bool {
        try await changedRow("DELETE FROM connectors WHERE tenant = \(tenant) AND id = \(id) RETURNING id")
    }

    package func activeConnectors() async throws -> [Connector] {
        try await guarded {
            try await Self.connectors(
                try await client.query(
                    "SELECT * FROM connectors WHERE NOT paused ORDER BY tenant, created_at, id", logger: logger))
        }
    }

    package func leaseConnector(tenant: String, id: String, owner: String, now: Int64, until: Int64) async throws -> Bool {
        try await changedRow(
            """
            UPDATE connectors SET lease_owner = \(owner), lease_until = \(until)
            WHERE tenant = \(tenant) AND id = \(id) AND (lease_owner IS NULL OR lease_owner = \(owner) OR lease_until < \(now))
            RETURNING id
            """)
    }

    package func releaseConnectors(owner: String) async throws {
        try await committed { connection in
            try await connection.query(
                "UPDATE connectors SET lease_owner = NULL, lease_until = 0 WHERE lease_owner = \(owner)", logger: logger)
        }
    }

    package func connectorSending(
        tenant: String, id: String, owner: String, from: PullCursor, to: PullCursor, until: Int64
    ) async throws -> Bool {
        try await changedRow(
            """
            UPDATE connectors SET pending_xid = \(to.xid), pending_seq = \(to.seq), lease_until = \(until)
            WHERE tenant = \(tenant) AND id = \(id) AND lease_owner = \(owner) AND cursor_xid = \(from.xid)
              AND cursor_seq = \(from.seq)
            RETURNING id
            """)
    }

    package func connectorDelivered(
        tenant: String, id: String, owner: String, from: PullCursor, to: PullCursor, changes: Int, at time: Int64
    ) async throws -> Bool {
        try await changedRow(
            """
            UPDATE connectors SET cursor_xid = \(to.xid), cursor_seq = \(to.seq), pending_xid = NULL, pending_seq = NULL,
              delivered = delivered + 1,
              delivered_changes = delivered_changes + \(Int64(changes)), failures = 0, last_error = NULL,
              last_delivered_at = \(time), next_attempt_at = 0
            WHERE tenant = \(tenant) AND id = \(id) AND lease_owner = \(owner) AND cursor_xid = \(from.xid)
              AND cursor_seq = \(from.seq)
            RETURNING id
            """)
    }

    package func connectorFailed(
        tenant: String, id: String, owner: String, error: String, at time: Int64, nextAttemptAt: Int64
    ) async throws -> Int? {
        try await committed { connection in
            let rows = try await connection.query(
                """
                UPDATE connectors SET failures = failures + 1, last_error = \(error), last_failed_at = \(time),
                  next_attempt_at = \(nextAttemptAt)
                WHERE tenant = \(tenant) AND id = \(id) AND lease_owner = \(owner)
                RETURNING failures
                """, logger: logger)
            var count: Int?
            for try await failures in rows.decode(Int32.self) { count = Int(failures) }
            return count
        }
    }

    package func retryConnectorSoon(tenant: String, id: String, at time: Int64, spacing: Int64) async throws -> Bool {
        try await changedRow(
            """
            UPDATE connectors SET next_attempt_at = GREATEST(\(time), COALESCE(last_failed_at, 0) + \(spacing))
            WHERE tenant = \(tenant) AND id = \(id) AND NOT paused AND failures > 0
              AND next_attempt_at > GREATEST(\(time), COALESCE(last_failed_at, 0) + \(spacing))
            RETURNING id
            """)
    }

    package func failingConnectorCount() async throws -> Int {
        try await guarded {
            let rows = try await client.query(
                "SELECT count(*) FROM connectors WHERE NOT paused AND failures >= \(Int32(Connector.failingAfter))",
                logger: logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    package func changePositions(
        tenant: String, collection: String, scope: String?, owner: String?, recordIds: [String]
    ) async throws -> [RecordChangePosition] {
        guard !recordIds.isEmpty else { return [] }
        return try await guarded {
            let rows = try await client.query(
                """
                SELECT record_id, scope, version, change_xid, change_seq FROM records
                WHERE tenant = \(tenant) AND collection = \(collection) AND record_id = ANY(\(recordIds))
                  AND (\(scope)::text IS NULL OR scope = \(scope)::text)
                  AND (\(owner)::text IS NULL OR owner = \(owner)::text)
                ORDER BY change_xid, change_seq
                """, logger: logger)
            var positions: [RecordChangePosition] = []
            for try await (recordId, rowScope, version, xid, seq) in rows.decode((String, String, Int64, Int64, Int64).self) {
                positions.append(
                    RecordChangePosition(recordId: recordId, scope: rowScope, version: version, position: PullCursor(xid: xid, seq: seq)))
            }
            return positions
        }
    }

    package func receivedTimes(tenant: String, collection: String, recordIds: [String]) async throws -> [RecordVersion: Int64] {
        guard !recordIds.isEmpty else { return [:] }
        return try await guarded {
            let rows = try await client.query(
                """
                SELECT record_id, scope, version, max(received_at) FROM mutations
                WHERE tenant = \(tenant) AND collection = \(collection) AND status = 'applied'
                  AND record_id = ANY(\(recordIds))
                GROUP BY record_id, scope, version
                """, logger: logger)
            var times: [RecordVersion: Int64] = [:]
            for try await (recordId, scope, version, received) in rows.decode((String, String, Int64, Int64).self) {
                times[RecordVersion(recordId: recordId, scope: scope, version: version)] = received
            }
            return times
        }
    }

    private static func connectors(_ rows: PostgresRowSequence) async throws -> [Connector] {
        var found: [Connector] = []
        for try await row in rows {
            let c = row.makeRandomAccess()
            guard let format = NotificationFormat(rawValue: try c["format"].decode(String.self)) else {
                throw StorageError(.corrupt, "a connector has an unknown format")
            }
            var connector = Connector(
                tenant: try c["tenant"].decode(String.self), id: try c["id"].decode(String.self),
                collection: try c["collection"].decode(String.self), scope: try c["scope"].decode(String.self),
                url: try c["url"].decode(String.self), secret: try c["secret"].decode(String.self), format: format,
                createdAt: try c["created_at"].decode(Int64.self))
            connector.paused = try c["paused"].decode(Bool.self)
            connector.cursor = PullCursor(xid: try c["cursor_xid"].decode(Int64.self), seq: try c["cursor_seq"].decode(Int64.self))
            if let xid = try c["pending_xid"].decode(Int64?.self), let seq = try c["pending_seq"].decode(Int64?.self) {
                connector.pending = PullCursor(xid: xid, seq: seq)
            }
            connector.delivered = try c["delivered"].decode(Int64.self)
            connector.deliveredChanges = try c["delivered_changes"].decode(Int64.self)
            connector.replays = Int(try c["replays"].decode(Int32.self))
            connector.failures = Int(try c["failures"].decode(Int32.self))
            connector.lastError = try c["last_error"].decode(String?.self)
            connector.lastDeliveredAt = try c["last_delivered_at"].decode(Int64?.self)
            connector.lastFailedAt = try c["last_failed_at"].decode(Int64?.self)
            connector.nextAttemptAt = try c["next_attempt_at"].decode(Int64.self)
            found.append(connector)
        }
        return found
    }
}
