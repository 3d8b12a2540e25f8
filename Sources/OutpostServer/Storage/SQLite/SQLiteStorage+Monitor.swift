import GRDB
import OutpostProtocol
import OutpostRecords

extension SQLiteStorage {
    package func recordHeartbeat(_ report: DeviceReport) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO devices (tenant, fingerprint, user_id, staff_name, event, pending_count, failed_count,
                                         last_roster_fetch, app_version, last_seen, rejected_count, pending_upload_bytes)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (tenant, fingerprint) DO UPDATE SET
                      user_id = excluded.user_id, staff_name = excluded.staff_name, event = excluded.event,
                      pending_count = excluded.pending_count, failed_count = excluded.failed_count,
                      rejected_count = excluded.rejected_count, pending_upload_bytes = excluded.pending_upload_bytes,
                      last_roster_fetch = excluded.last_roster_fetch, app_version = excluded.app_version,
                      last_seen = excluded.last_seen
                    WHERE devices.last_seen <= excluded.last_seen
                    """,
                arguments: [
                    report.tenant, report.fingerprint, report.userId, report.staffName, report.event,
                    report.pendingCount, report.failedCount, report.lastRosterFetch, report.appVersion, report.lastSeen,
                    report.rejectedCount, report.pendingUploadBytes,
                ])
        }
    }

    package func deviceReports(tenant: String, event: String?) async throws -> [DeviceReport] {
        try await pool.read { db in
            var sql = "SELECT * FROM devices WHERE tenant = ?"
            var arguments: StatementArguments = [tenant]
            if let event {
                sql += " AND event = ?"
                arguments += [event]
            }
            sql += " ORDER BY last_seen DESC, fingerprint"
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map { row in
                DeviceReport(
                    tenant: row["tenant"], fingerprint: row["fingerprint"], userId: row["user_id"],
                    staffName: row["staff_name"], event: row["event"], pendingCount: row["pending_count"],
                    failedCount: row["failed_count"], rejectedCount: row["rejected_count"],
                    pendingUploadBytes: row["pending_upload_bytes"], lastRosterFetch: row["last_roster_fetch"],
                    appVersion: row["app_version"], lastSeen: row["last_seen"])
            }
        }
    }

    package func events(tenant: String) async throws -> [MonitorEvent] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT record_id,
                           CASE WHEN json_type(fields, '$.name') = 'text' THEN json_extract(fields, '$.name') END AS name
                    FROM records WHERE tenant = ? AND collection = ? AND NOT tombstone
                    ORDER BY created_at DESC, record_id
                    """, arguments: [tenant, EventRecord.collection]
            ).map { row in
                let id: String = row["record_id"]
                return MonitorEvent(id: id, name: row["name"] ?? id)
            }
        }
    }

    package func bindDevice(tenant: String, fingerprint: String, userId: String, at time: Int64) async throws -> String {
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO device_owners (tenant, fingerprint, user_id, bound_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [tenant, fingerprint, userId, time])
            guard
                let owner = try String.fetchOne(
                    db, sql: "SELECT user_id FROM device_owners WHERE tenant = ? AND fingerprint = ?",
                    arguments: [tenant, fingerprint])
            else { throw StorageError(.corrupt, "a device binding vanished") }
            return owner
        }
    }

    package func releaseDevice(tenant: String, fingerprint: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM device_owners WHERE tenant = ? AND fingerprint = ?", arguments: [tenant, fingerprint])
            return db.changesCount > 0
        }
    }

    package func eventProgress(tenant: String, event: String, since: Int64) async throws -> EventProgress {
        try await pool.read { db in
            let row = try Row.fetchOne(
                db,
                sql: """
                    WITH roster AS (
                      SELECT record_id FROM records WHERE tenant = ?1 AND collection = ?3 AND scope = ?4 AND NOT tombstone
                        AND coalesce(json_extract(fields, '$.status'), '') <> 'cancelled'
                    ), arrived AS (
                      -- Check-ins of guests still on the roster: one cancelled since counts on neither side.
                      SELECT created_at FROM records
                      WHERE tenant = ?1 AND collection = ?2 AND scope = ?4 AND NOT tombstone
                        AND record_id IN (SELECT record_id FROM roster)
                    )
                    SELECT (SELECT count(*) FROM arrived), (SELECT count(*) FROM arrived WHERE created_at >= ?5),
                           (SELECT count(*) FROM roster)
                    """, arguments: [tenant, CheckIn.collection, Guest.collection, event, since])
            return EventProgress(checkedIn: row?[0] ?? 0, onRoster: row?[2] ?? 0, lastFiveMinutes: row?[1] ?? 0)
        }
    }

    package func checkInScans(tenant: String, event: String, since: Int64) async throws -> [(scannedBy: String, at: Int64)] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT json_extract(fields, '$.scanned_by') AS scanned_by, created_at FROM records
                    WHERE tenant = ? AND collection = ? AND scope = ? AND created_at >= ? AND NOT tombstone
                    """, arguments: [tenant, CheckIn.collection, event, since]
            ).compactMap { row in
                guard let device: String = row["scanned_by"] else { return nil }
                return (device, row["created_at"])
            }
        }
    }

    package func recordSyncFailures(_ failures: [StoredSyncFailure]) async throws -> [Bool] {
        try await pool.write { db in
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO sync_failures (tenant, fingerprint, collection, record_id, user_id, first_attempt,
                                               last_error, reported_at, kind)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (tenant, fingerprint, collection, record_id) DO UPDATE
                    SET kind = excluded.kind, first_attempt = excluded.first_attempt, last_error = excluded.last_error,
                        reported_at = excluded.reported_at
                    WHERE sync_failures.kind <> excluded.kind
                    """)
            return try failures.map { failure in
                try statement.execute(arguments: [
                    failure.tenant, failure.fingerprint, failure.collection, failure.recordId, failure.userId,
                    failure.firstAttempt, failure.lastError, failure.reportedAt, failure.kind.rawValue,
                ])
                return db.changesCount > 0
            }
        }
    }

    package func syncFailures(tenant: String) async throws -> [StoredSyncFailure] {
        try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM sync_failures WHERE tenant = ? ORDER BY first_attempt, record_id",
                arguments: [tenant]
            ).map { row in
                StoredSyncFailure(
                    tenant: row["tenant"], fingerprint: row["fingerprint"], userId: row["user_id"],
                    collection: row["collection"], recordId: row["record_id"], firstAttempt: row["first_attempt"],
                    lastError: row["last_error"], reportedAt: row["reported_at"],
                    kind: SyncFailure.Kind(rawValue: row["kind"]))
            }
        }
    }

    package func recordWriters(tenant: String, collection: String, recordId: String) async throws -> Set<RecordWriter> {
        try await pool.read { db in
            Set(
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT DISTINCT device_id, user_id FROM mutations
                        WHERE tenant = ? AND collection = ? AND record_id = ?
                        """,
                    arguments: [tenant, collection, recordId]
                ).map { RecordWriter(deviceId: $0["device_id"], userId: $0["user_id"]) })
        }
    }

    package func record(tenant: String, collection: String, recordId: String, scope: String) async throws -> StoredRecord? {
        try await pool.read { db in
            try Row.fetchOne(
                db, sql: "SELECT * FROM records WHERE tenant = ? AND collection = ? AND record_id = ? AND scope = ?",
                arguments: [tenant, collection, recordId, scope]
            ).map(Self.record)
        }
    }

    package func deviceStateCounts(now: Int64) async throws -> [DeviceState: Int] {
        try await pool.read { db in
            var counts: [DeviceState: Int] = [:]
            for lastSeen in try Int64.fetchAll(
                db, sql: "SELECT last_seen FROM devices WHERE last_seen >= ?", arguments: [now - Self.activeWindow])
            {
                counts[DeviceState(lastSeen: Timestamp(millisecondsSince1970: lastSeen), now: Timestamp(millisecondsSince1970: now)), default: 0] += 1
            }
            return counts
        }
    }

    package func recordRelayReport(_ report: RelayReport) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO relays (tenant, relay_id, name, scopes, waiting, oldest_waiting, last_error, last_contact)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (tenant, relay_id) DO UPDATE SET
                      name = excluded.name, scopes = excluded.scopes, waiting = excluded.waiting,
                      oldest_waiting = excluded.oldest_waiting, last_error = excluded.last_error,
                      last_contact = excluded.last_contact
                    """,
                arguments: [
                    report.tenant, report.relayId, report.name, report.scopes.joined(separator: ","), report.waiting,
                    report.oldestWaiting, report.lastError, report.lastContact,
                ])
        }
    }

    package func relayReports(tenant: String, since: Int64) async throws -> [RelayReport] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT * FROM relays WHERE tenant = ? AND last_contact >= ? ORDER BY last_contact DESC, relay_id",
                arguments: [tenant, since]
            ).map { row in
                RelayReport(
                    tenant: row["tenant"], relayId: row["relay_id"], name: row["name"],
                    scopes: (row["scopes"] as String).split(separator: ",").map(String.init), waiting: row["waiting"],
                    oldestWaiting: row["oldest_waiting"], lastError: row["last_error"], lastContact: row["last_contact"])
            }
        }
    }
}
