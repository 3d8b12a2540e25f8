import OutpostProtocol
import OutpostRecords
import PostgresNIO

extension PostgresStorage {
    package func recordHeartbeat(_ report: DeviceReport) async throws {
        _ = try await committed { connection in
            try await connection.query(
                """
                INSERT INTO devices (tenant, fingerprint, user_id, staff_name, event, pending_count, failed_count,
                                     last_roster_fetch, app_version, last_seen, rejected_count, pending_upload_bytes)
                VALUES (\(report.tenant), \(report.fingerprint), \(report.userId), \(report.staffName), \(report.event),
                        \(Int64(report.pendingCount)), \(Int64(report.failedCount)), \(report.lastRosterFetch),
                        \(report.appVersion), \(report.lastSeen), \(Int64(report.rejectedCount)), \(report.pendingUploadBytes))
                ON CONFLICT (tenant, fingerprint) DO UPDATE SET
                  user_id = excluded.user_id, staff_name = excluded.staff_name, event = excluded.event,
                  pending_count = excluded.pending_count, failed_count = excluded.failed_count,
                  rejected_count = excluded.rejected_count, pending_upload_bytes = excluded.pending_upload_bytes,
                  last_roster_fetch = excluded.last_roster_fetch, app_version = excluded.app_version,
                  last_seen = excluded.last_seen
                WHERE devices.last_seen <= excluded.last_seen
                """, logger: logger)
        }
    }

    package func deviceReports(tenant: String, event: String?) async throws -> [DeviceReport] {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT tenant, fingerprint, user_id, staff_name, event, pending_count, failed_count, last_roster_fetch,
                       app_version, last_seen, rejected_count, pending_upload_bytes
                FROM devices WHERE tenant = \(tenant) AND (\(event)::text IS NULL OR event = \(event))
                ORDER BY last_seen DESC, fingerprint
                """, logger: logger)
            var reports: [DeviceReport] = []
            for try await (tenant, fingerprint, userId, staffName, event, pending, failed, rosterFetch, version, lastSeen, rejected, uploads)
                in rows.decode((String, String, String, String, String, Int64, Int64, Int64?, String, Int64, Int64, Int64).self)
            {
                reports.append(
                    DeviceReport(
                        tenant: tenant, fingerprint: fingerprint, userId: userId, staffName: staffName, event: event,
                        pendingCount: Int(pending), failedCount: Int(failed), rejectedCount: Int(rejected),
                        pendingUploadBytes: uploads, lastRosterFetch: rosterFetch, appVersion: version, lastSeen: lastSeen))
            }
            return reports
        }
    }

    package func events(tenant: String) async throws -> [MonitorEvent] {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT record_id,
                       CASE WHEN jsonb_typeof(fields::jsonb -> 'name') = 'string' THEN fields::jsonb ->> 'name' END
                FROM records
                WHERE tenant = \(tenant) AND collection = \(EventRecord.collection) AND NOT tombstone
                ORDER BY created_at DESC, record_id
                """, logger: logger)
            var events: [MonitorEvent] = []
            for try await (id, name) in rows.decode((String, String?).self) { events.append(MonitorEvent(id: id, name: name ?? id)) }
            return events
        }
    }

    package func bindDevice(tenant: String, fingerprint: String, userId: String, at time: Int64) async throws -> String {
        try await committed { connection in
            // Two statements: a binding another transaction commits while the insert waits is visible only to
            // a statement that starts after it.
            try await connection.query(
                """
                INSERT INTO device_owners (tenant, fingerprint, user_id, bound_at)
                VALUES (\(tenant), \(fingerprint), \(userId), \(time)) ON CONFLICT DO NOTHING
                """, logger: logger)
            let rows = try await connection.query(
                "SELECT user_id FROM device_owners WHERE tenant = \(tenant) AND fingerprint = \(fingerprint)",
                logger: logger)
            var owner: String?
            for try await user in rows.decode(String.self) { owner = user }
            guard let owner else { throw StorageError(.corrupt, "a device binding vanished") }
            return owner
        }
    }

    package func releaseDevice(tenant: String, fingerprint: String) async throws -> Bool {
        try await changedRow("DELETE FROM device_owners WHERE tenant = \(tenant) AND fingerprint = \(fingerprint) RETURNING 1")
    }

    package func eventProgress(tenant: String, event: String, since: Int64) async throws -> EventProgress {
        try await guarded {
            let rows = try await client.query(
                """
                WITH roster AS (
                  SELECT record_id FROM records WHERE tenant = \(tenant) AND collection = \(Guest.collection)
                    AND scope = \(event) AND NOT tombstone AND coalesce(fields::jsonb ->> 'status', '') <> 'cancelled'
                ), arrived AS (
                  -- Check-ins of guests still on the roster: one cancelled since counts on neither side.
                  SELECT created_at FROM records
                  WHERE tenant = \(tenant) AND collection = \(CheckIn.collection) AND scope = \(event) AND NOT tombstone
                    AND record_id IN (SELECT record_id FROM roster)
                )
                SELECT (SELECT count(*) FROM arrived), (SELECT count(*) FROM arrived WHERE created_at >= \(since)),
                       (SELECT count(*) FROM roster)
                """, logger: logger)
            for try await (checkedIn, recent, onRoster) in rows.decode((Int64, Int64, Int64).self) {
                return EventProgress(checkedIn: Int(checkedIn), onRoster: Int(onRoster), lastFiveMinutes: Int(recent))
            }
            return EventProgress(checkedIn: 0, onRoster: 0, lastFiveMinutes: 0)
        }
    }

    package func checkInScans(tenant: String, event: String, since: Int64) async throws -> [(scannedBy: String, at: Int64)] {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT fields::jsonb ->> 'scanned_by', created_at FROM records
                WHERE tenant = \(tenant) AND collection = \(CheckIn.collection) AND scope = \(event)
                  AND created_at >= \(since) AND NOT tombstone
                """, logger: logger)
            var scans: [(scannedBy: String, at: Int64)] = []
            for try await (device, at) in rows.decode((String?, Int64).self) {
                if let device { scans.append((device, at)) }
            }
            return scans
        }
    }

    package func recordSyncFailures(_ failures: [StoredSyncFailure]) async throws -> [Bool] {
        try await guarded {
            try await client.withTransaction(logger: logger) { connection in
                // In key order, so that two reports naming the same records in another order cannot deadlock.
                var stored = [Bool](repeating: false, count: failures.count)
                let order = failures.indices.sorted {
                    (failures[$0].collection, failures[$0].recordId) < (failures[$1].collection, failures[$1].recordId)
                }
                for index in order {
                    let failure = failures[index]
                    let rows = try await connection.query(
                        """
                        INSERT INTO sync_failures (tenant, fingerprint, collection, record_id, user_id, first_attempt,
                                                   last_error, reported_at, kind)
                        VALUES (\(failure.tenant), \(failure.fingerprint), \(failure.collection), \(failure.recordId),
                                \(failure.userId), \(failure.firstAttempt), \(failure.lastError), \(failure.reportedAt),
                                \(failure.kind.rawValue))
                        ON CONFLICT (tenant, fingerprint, collection, record_id) DO UPDATE
                        SET kind = excluded.kind, first_attempt = excluded.first_attempt,
                            last_error = excluded.last_error, reported_at = excluded.reported_at
                        WHERE sync_failures.kind <> excluded.kind
                        RETURNING 1
                        """, logger: logger)
                    var inserted = false
                    for try await _ in rows { inserted = true }
                    stored[index] = inserted
                }
                return stored
            }
        }
    }

    package func syncFailures(tenant: String) async throws -> [StoredSyncFailure] {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT tenant, fingerprint, user_id, collection, record_id, first_attempt, last_error, reported_at, kind
                FROM sync_failures WHERE tenant = \(tenant) ORDER BY first_attempt, record_id
                """, logger: logger)
            var failures: [StoredSyncFailure] = []
            for try await (tenant, fingerprint, userId, collection, recordId, firstAttempt, lastError, reportedAt, kind)
                in rows.decode((String, String, String, String, String, Int64, String, Int64, String).self)
            {
                failures.append(
                    StoredSyncFailure(
                        tenant: tenant, fingerprint: fingerprint, userId: userId, collection: collection,
                        recordId: recordId, firstAttempt: firstAttempt, lastError: lastError, reportedAt: reportedAt,
                        kind: SyncFailure.Kind(rawValue: kind)))
            }
            return failures
        }
    }

    package func recordWriters(tenant: String, collection: String, recordId: String) async throws -> Set<RecordWriter> {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT DISTINCT device_id, user_id FROM mutations
                WHERE tenant = \(tenant) AND collection = \(collection) AND record_id = \(recordId)
                """, logger: logger)
            var writers = Set<RecordWriter>()
            for try await (device, user) in rows.decode((String, String).self) {
                writers.insert(RecordWriter(deviceId: device, userId: user))
            }
            return writers
        }
    }

    package func record(tenant: String, collection: String, recordId: String, scope: String) async throws -> StoredRecord? {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT \(unescaped: Self.recordColumns) FROM records
                WHERE tenant = \(tenant) AND collection = \(collection) AND record_id = \(recordId) AND scope = \(scope)
                """, logger: logger)
            for try await row in rows { return try Self.record(row) }
            return nil
        }
    }

    package func deviceStateCounts(now: Int64) async throws -> [DeviceState: Int] {
        try await guarded {
            let rows = try await client.query(
                "SELECT last_seen FROM devices WHERE last_seen >= \(now - Self.activeWindow)", logger: logger)
            var counts: [DeviceState: Int] = [:]
            for try await lastSeen in rows.decode(Int64.self) {
                let state = DeviceState(
                    lastSeen: Timestamp(millisecondsSince1970: lastSeen), now: Timestamp(millisecondsSince1970: now))
                counts[state, default: 0] += 1
            }
            return counts
        }
    }

    package func recordRelayReport(_ report: RelayReport) async throws {
        _ = try await committed { connection in
            try await connection.query(
                """
                INSERT INTO relays (tenant, relay_id, name, scopes, waiting, oldest_waiting, last_error, last_contact)
                VALUES (\(report.tenant), \(report.relayId), \(report.name), \(report.scopes.joined(separator: ",")),
                        \(Int64(report.waiting)), \(report.oldestWaiting), \(report.lastError), \(report.lastContact))
                ON CONFLICT (tenant, relay_id) DO UPDATE SET
                  name = excluded.name, scopes = excluded.scopes, waiting = excluded.waiting,
                  oldest_waiting = excluded.oldest_waiting, last_error = excluded.last_error,
                  last_contact = excluded.last_contact
                """, logger: logger)
        }
    }

    package func relayReports(tenant: String, since: Int64) async throws -> [RelayReport] {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT tenant, relay_id, name, scopes, waiting, oldest_waiting, last_error, last_contact
                FROM relays WHERE tenant = \(tenant) AND last_contact >= \(since)
                ORDER BY last_contact DESC, relay_id
                """, logger: logger)
            var reports: [RelayReport] = []
            for try await (tenant, relayId, name, scopes, waiting, oldest, lastError, lastContact)
                in rows.decode((String, String, String, String, Int64, Int64?, String?, Int64).self)
            {
                reports.append(
                    RelayReport(
                        tenant: tenant, relayId: relayId, name: name, scopes: scopes.split(separator: ",").map(String.init),
                        waiting: Int(waiting), oldestWaiting: oldest, lastError: lastError, lastContact: lastContact))
            }
            return reports
        }
    }
}
