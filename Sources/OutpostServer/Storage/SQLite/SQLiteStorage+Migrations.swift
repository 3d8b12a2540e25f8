import GRDB

extension SQLiteStorage {
    /// The versioned schema. Append new migrations; never edit a shipped one.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            // Every key starts with the tenant, so the schema can later be distributed by tenant.
            try db.execute(
                sql: """
                    CREATE TABLE records (
                      tenant TEXT NOT NULL,
                      collection TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      scope TEXT NOT NULL DEFAULT '',
                      version INTEGER NOT NULL,
                      tombstone BOOLEAN NOT NULL,
                      fields TEXT NOT NULL,
                      meta TEXT NOT NULL,
                      created_at INTEGER NOT NULL,
                      updated_at INTEGER NOT NULL,
                      change_seq INTEGER NOT NULL,
                      PRIMARY KEY (tenant, collection, record_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX records_by_change ON records (tenant, collection, change_seq);
                    CREATE INDEX records_by_scope_change ON records (tenant, collection, scope, change_seq);
                    CREATE INDEX records_by_scope_id ON records (tenant, collection, scope, record_id);

                    CREATE TABLE mutations (
                      tenant TEXT NOT NULL,
                      idempotency_key TEXT NOT NULL,
                      content_hash TEXT NOT NULL,
                      device_id TEXT NOT NULL,
                      user_id TEXT NOT NULL,
                      user_name TEXT NOT NULL,
                      collection TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      op TEXT NOT NULL,
                      fields TEXT NOT NULL,
                      client_ts INTEGER NOT NULL,
                      base_version INTEGER,
                      received_at INTEGER NOT NULL,
                      status TEXT NOT NULL,
                      version INTEGER NOT NULL,
                      conflict TEXT,
                      PRIMARY KEY (tenant, idempotency_key)
                    ) WITHOUT ROWID;
                    CREATE INDEX mutations_by_record ON mutations (tenant, collection, record_id, client_ts);

                    CREATE TABLE conflicts (
                      tenant TEXT NOT NULL,
                      conflict_id TEXT NOT NULL,
                      collection TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      idempotency_key TEXT NOT NULL,
                      device_id TEXT NOT NULL,
                      user_id TEXT NOT NULL,
                      attempted TEXT NOT NULL,
                      server_fields TEXT NOT NULL,
                      base_version INTEGER,
                      server_version INTEGER NOT NULL,
                      client_ts INTEGER NOT NULL,
                      received_at INTEGER NOT NULL,
                      PRIMARY KEY (tenant, conflict_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX conflicts_by_time ON conflicts (tenant, received_at);

                    CREATE TABLE change_counter (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL);
                    INSERT INTO change_counter (id, seq) VALUES (1, 0);
                    """)
        }
        migrator.registerMigration("v2-monitor") { db in
            // Devices by a tenant-scoped fingerprint, never their id; failures once per device and record.
            try db.execute(
                sql: """
                    CREATE TABLE devices (
                      tenant TEXT NOT NULL,
                      fingerprint TEXT NOT NULL,
                      user_id TEXT NOT NULL,
                      staff_name TEXT NOT NULL,
                      event TEXT NOT NULL,
                      pending_count INTEGER NOT NULL,
                      failed_count INTEGER NOT NULL,
                      last_roster_fetch INTEGER,
                      app_version TEXT NOT NULL,
                      last_seen INTEGER NOT NULL,
                      PRIMARY KEY (tenant, fingerprint)
                    ) WITHOUT ROWID;
                    CREATE INDEX devices_by_event ON devices (tenant, event, last_seen);
                    CREATE INDEX devices_by_last_seen ON devices (last_seen);

                    CREATE TABLE sync_failures (
                      tenant TEXT NOT NULL,
                      fingerprint TEXT NOT NULL,
                      collection TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      user_id TEXT NOT NULL,
                      first_attempt INTEGER NOT NULL,
                      last_error TEXT NOT NULL,
                      reported_at INTEGER NOT NULL,
                      PRIMARY KEY (tenant, fingerprint, collection, record_id)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v3-scoped-records") { db in
            // A record's scope is part of its key, and a record knows who created it. The scope column was
            // kept already; the owner is the user of the record's first mutation.
            try db.execute(
                sql: """
                    CREATE TABLE records_scoped (
                      tenant TEXT NOT NULL,
                      collection TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      scope TEXT NOT NULL DEFAULT '',
                      owner TEXT NOT NULL DEFAULT '',
                      version INTEGER NOT NULL,
                      tombstone BOOLEAN NOT NULL,
                      fields TEXT NOT NULL,
                      meta TEXT NOT NULL,
                      created_at INTEGER NOT NULL,
                      updated_at INTEGER NOT NULL,
                      change_seq INTEGER NOT NULL,
                      PRIMARY KEY (tenant, collection, record_id, scope)
                    ) WITHOUT ROWID;
                    INSERT INTO records_scoped (tenant, collection, record_id, scope, owner, version, tombstone, fields,
                                                meta, created_at, updated_at, change_seq)
                    SELECT tenant, collection, record_id, scope,
                           COALESCE((SELECT m.user_id FROM mutations m
                                     WHERE m.tenant = r.tenant AND m.collection = r.collection
                                       AND m.record_id = r.record_id
                                     ORDER BY m.received_at, m.client_ts LIMIT 1), ''),
                           version, tombstone, fields, meta, created_at, updated_at, change_seq
                    FROM records r;
                    DROP TABLE records;
                    ALTER TABLE records_scoped RENAME TO records;
                    CREATE INDEX records_by_change ON records (tenant, collection, change_seq);
                    CREATE INDEX records_by_scope_change ON records (tenant, collection, scope, change_seq);
                    CREATE INDEX records_by_scope_id ON records (tenant, collection, scope, record_id);

                    ALTER TABLE mutations ADD COLUMN scope TEXT NOT NULL DEFAULT '';
                    UPDATE mutations SET scope = COALESCE((
                      SELECT r.scope FROM records r WHERE r.tenant = mutations.tenant
                        AND r.collection = mutations.collection AND r.record_id = mutations.record_id), '');
                    ALTER TABLE conflicts ADD COLUMN scope TEXT NOT NULL DEFAULT '';
                    UPDATE conflicts SET scope = COALESCE((
                      SELECT r.scope FROM records r WHERE r.tenant = conflicts.tenant
                        AND r.collection = conflicts.collection AND r.record_id = conflicts.record_id), '');

                    -- The user each device id speaks for, by the device's fingerprint: the first to use it.
                    CREATE TABLE device_owners (
                      tenant TEXT NOT NULL,
                      fingerprint TEXT NOT NULL,
                      user_id TEXT NOT NULL,
                      bound_at INTEGER NOT NULL,
                      PRIMARY KEY (tenant, fingerprint)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v4-admin-grants") { db in
            try db.execute(
                sql: """
                    -- The monitor's sessions and sign-in codes, by the SHA-256 of their secret.
                    CREATE TABLE admin_grants (
                      kind TEXT NOT NULL,
                      hash TEXT NOT NULL,
                      tenant TEXT NOT NULL,
                      user_id TEXT NOT NULL,
                      role TEXT NOT NULL,
                      name TEXT NOT NULL,
                      csrf TEXT NOT NULL,
                      expires_at INTEGER NOT NULL,
                      session_expires_at INTEGER NOT NULL,
                      PRIMARY KEY (kind, hash)
                    ) WITHOUT ROWID;
                    CREATE INDEX admin_grants_by_expiry ON admin_grants (expires_at);
                    """)
        }
        migrator.registerMigration("v5-notifications") { db in
            try db.execute(
                sql: """
                    -- Where an event's organizer hears about its devices, and the episodes already announced.
                    CREATE TABLE event_notifications (
                      tenant TEXT NOT NULL,
                      event TEXT NOT NULL,
                      url TEXT NOT NULL,
                      format TEXT NOT NULL,
                      PRIMARY KEY (tenant, event)
                    ) WITHOUT ROWID;
                    CREATE TABLE notification_episodes (
                      tenant TEXT NOT NULL,
                      event TEXT NOT NULL,
                      fingerprint TEXT NOT NULL,
                      kind TEXT NOT NULL,
                      opened_at INTEGER NOT NULL,
                      PRIMARY KEY (tenant, event, fingerprint, kind)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v6-connectors") { db in
            try db.execute(
                sql: """
                    -- Connectors, and where each has got to; a lease names the one server delivering it.
                    CREATE TABLE connectors (
                      tenant TEXT NOT NULL,
                      id TEXT NOT NULL,
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      url TEXT NOT NULL,
                      secret TEXT NOT NULL,
                      format TEXT NOT NULL,
                      paused BOOLEAN NOT NULL,
                      cursor_xid INTEGER NOT NULL,
                      cursor_seq INTEGER NOT NULL,
                      pending_xid INTEGER,
                      pending_seq INTEGER,
                      delivered INTEGER NOT NULL,
                      delivered_changes INTEGER NOT NULL,
                      replays INTEGER NOT NULL,
                      failures INTEGER NOT NULL,
                      last_error TEXT,
                      last_delivered_at INTEGER,
                      last_failed_at INTEGER,
                      next_attempt_at INTEGER NOT NULL,
                      created_at INTEGER NOT NULL,
                      lease_owner TEXT,
                      lease_until INTEGER NOT NULL,
                      PRIMARY KEY (tenant, id)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v7-sync-failure-kinds") { db in
            // What a device reported: waiting too long, or refused by the server. Devices before the kind wrote
            // a refusal's reason as "Refused: …".
            try db.execute(
                sql: """
                    ALTER TABLE sync_failures ADD COLUMN kind TEXT NOT NULL DEFAULT 'persistent';
                    UPDATE sync_failures SET kind = 'rejected' WHERE last_error LIKE 'Refused: %';
                    """)
        }
        migrator.registerMigration("v8-device-rejected-count") { db in
            // The records a device's last heartbeat said the server refused, apart from the failed ones.
            try db.execute(sql: "ALTER TABLE devices ADD COLUMN rejected_count INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v9-relay-journal") { db in
            // A venue relay's writes to forward upstream, in the order it accepted them; each mutation as its
            // device sent it. Forwarded rows keep the server's answer, for the devices and the monitor.
            try db.execute(
                sql: """
                    CREATE TABLE relay_journal (
                      seq INTEGER PRIMARY KEY AUTOINCREMENT,
                      tenant TEXT NOT NULL,
                      idempotency_key TEXT NOT NULL,
                      device_id TEXT NOT NULL,
                      user_id TEXT NOT NULL,
                      user_name TEXT NOT NULL,
                      role TEXT NOT NULL,
                      mutation TEXT NOT NULL,
                      accepted_at INTEGER NOT NULL,
                      forwarded_at INTEGER,
                      upstream_status TEXT,
                      upstream_result TEXT
                    );
                    CREATE UNIQUE INDEX relay_journal_by_key ON relay_journal (tenant, idempotency_key);
                    CREATE INDEX relay_journal_waiting ON relay_journal (seq) WHERE forwarded_at IS NULL;
                    -- How the line upstream fares: one row, for the monitor and the metrics.
                    CREATE TABLE relay_line (
                      id INTEGER PRIMARY KEY CHECK (id = 1),
                      last_attempt_at INTEGER,
                      last_success_at INTEGER,
                      last_error TEXT
                    );
                    INSERT INTO relay_line (id) VALUES (1);
                    -- Where the relay's copy of each of its events' collections has got to upstream.
                    CREATE TABLE relay_cursors (
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      cursor TEXT NOT NULL,
                      PRIMARY KEY (collection, scope)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v10-relays") { db in
            // Each venue relay's last status report, as the server's monitor shows it.
            try db.execute(
                sql: """
                    CREATE TABLE relays (
                      tenant TEXT NOT NULL,
                      relay_id TEXT NOT NULL,
                      name TEXT NOT NULL,
                      scopes TEXT NOT NULL,
                      waiting INTEGER NOT NULL,
                      oldest_waiting INTEGER,
                      last_error TEXT,
                      last_contact INTEGER NOT NULL,
                      PRIMARY KEY (tenant, relay_id)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v11-files") { db in
            // The files records carry, once per tenant and digest. Their bytes live in the file directory:
            // `file_chunks` is moved there and dropped as the store opens (`moveFileChunks`).
            try db.execute(
                sql: """
                    CREATE TABLE files (
                      tenant TEXT NOT NULL,
                      sha256 TEXT NOT NULL,
                      size INTEGER NOT NULL,
                      type TEXT NOT NULL,
                      received INTEGER NOT NULL,
                      complete BOOLEAN NOT NULL,
                      created_at INTEGER NOT NULL,
                      PRIMARY KEY (tenant, sha256)
                    ) WITHOUT ROWID;
                    CREATE TABLE file_chunks (
                      tenant TEXT NOT NULL,
                      sha256 TEXT NOT NULL,
                      start INTEGER NOT NULL,
                      bytes BLOB NOT NULL,
                      PRIMARY KEY (tenant, sha256, start)
                    );
                    """)
        }
        migrator.registerMigration("v12-device-pending-upload-bytes") { db in
            try db.execute(sql: "ALTER TABLE devices ADD COLUMN pending_upload_bytes INTEGER NOT NULL DEFAULT 0")
        }
        // When an upload last took bytes, and the unfinished ones by it, for their expiry.
        migrator.registerMigration("v13-unfinished-uploads") { db in
            try db.execute(
                sql: """
                    ALTER TABLE files ADD COLUMN touched_at INTEGER NOT NULL DEFAULT 0;
                    UPDATE files SET touched_at = created_at;
                    CREATE INDEX files_unfinished ON files (touched_at) WHERE NOT complete;
                    """)
        }
        return migrator
    }
}
