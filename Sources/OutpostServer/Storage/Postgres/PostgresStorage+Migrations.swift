extension PostgresStorage {
    struct Migration {
        var version: String
        var statements: [String]
    }

    /// The versioned schema. Append new migrations; never edit a shipped one.
    static let migrations: [Migration] = [
        Migration(
            version: "v1",
            statements: [
                "CREATE SEQUENCE change_seq",
                """
                CREATE TABLE records (
                  tenant TEXT COLLATE "C" NOT NULL,
                  collection TEXT COLLATE "C" NOT NULL,
                  record_id TEXT COLLATE "C" NOT NULL,
                  scope TEXT COLLATE "C" NOT NULL DEFAULT '',
                  version BIGINT NOT NULL,
                  tombstone BOOLEAN NOT NULL,
                  fields TEXT NOT NULL,
                  meta TEXT NOT NULL,
                  created_at BIGINT NOT NULL,
                  updated_at BIGINT NOT NULL,
                  change_xid BIGINT NOT NULL,
                  change_seq BIGINT NOT NULL,
                  PRIMARY KEY (tenant, collection, record_id)
                )
                """,
                "CREATE INDEX records_by_change ON records (tenant, collection, change_xid, change_seq)",
                "CREATE INDEX records_by_scope_change ON records (tenant, collection, scope, change_xid, change_seq)",
                "CREATE INDEX records_by_scope_id ON records (tenant, collection, scope, record_id)",
                """
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
                  client_ts BIGINT NOT NULL,
                  base_version BIGINT,
                  received_at BIGINT NOT NULL,
                  status TEXT NOT NULL,
                  version BIGINT NOT NULL,
                  conflict TEXT,
                  PRIMARY KEY (tenant, idempotency_key)
                )
                """,
                "CREATE INDEX mutations_by_record ON mutations (tenant, collection, record_id, client_ts)",
                """
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
                  base_version BIGINT,
                  server_version BIGINT NOT NULL,
                  client_ts BIGINT NOT NULL,
                  received_at BIGINT NOT NULL,
                  PRIMARY KEY (tenant, conflict_id)
                )
                """,
                "CREATE INDEX conflicts_by_time ON conflicts (tenant, received_at)",
                "CREATE TABLE outpost_settings (name TEXT PRIMARY KEY, value BYTEA NOT NULL)",
            ]),
        Migration(
            version: "v2-monitor",
            statements: [
                // Devices by a tenant-scoped fingerprint, never their id; failures once per device and record.
                """
                CREATE TABLE devices (
                  tenant TEXT NOT NULL,
                  fingerprint TEXT NOT NULL,
                  user_id TEXT NOT NULL,
                  staff_name TEXT NOT NULL,
                  event TEXT NOT NULL,
                  pending_count BIGINT NOT NULL,
                  failed_count BIGINT NOT NULL,
                  last_roster_fetch BIGINT,
                  app_version TEXT NOT NULL,
                  last_seen BIGINT NOT NULL,
                  PRIMARY KEY (tenant, fingerprint)
                )
                """,
                "CREATE INDEX devices_by_event ON devices (tenant, event, last_seen)",
                "CREATE INDEX devices_by_last_seen ON devices (last_seen)",
                """
                CREATE TABLE sync_failures (
                  tenant TEXT NOT NULL,
                  fingerprint TEXT NOT NULL,
                  collection TEXT NOT NULL,
                  record_id TEXT NOT NULL,
                  user_id TEXT NOT NULL,
                  first_attempt BIGINT NOT NULL,
                  last_error TEXT NOT NULL,
                  reported_at BIGINT NOT NULL,
                  PRIMARY KEY (tenant, fingerprint, collection, record_id)
                )
                """,
            ]),
        Migration(
            version: "v3-conditional-push",
            statements: [
                // A push's conditional write raises this when another writer got in first; SQLSTATE 40001 makes
                // it a retried concurrent claim, like a serialization failure.
                """
                CREATE FUNCTION outpost_concurrent_change() RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
                BEGIN
                  RAISE EXCEPTION 'a record or an idempotency key changed concurrently' USING ERRCODE = '40001';
                END
                $$
                """
            ]),
        Migration(
            version: "v4-scoped-indexes",
            statements: [
                // The scope indexes hold only records with a scope: no read of a collection without one (every
                // record's scope is '') uses them, since a pull of the whole collection reads records_by_change,
                // and a page by id the primary key. Scoped reads name a scope, which proves `scope <> ''` once
                // PostgreSQL plans them with their values, as it plans every read here. A write to such a
                // collection then keeps two fewer index entries.
                // The table is locked first, whole: building an index takes a lock that a push's write waits
                // for, and dropping one a lock that waits for a push's read, so a migration that took them in
                // turn could deadlock with another server's push that had read and was about to write. Reads
                // and writes of `records` wait until the migration commits.
                "LOCK TABLE records IN ACCESS EXCLUSIVE MODE",
                """
                CREATE INDEX records_scoped_by_change ON records (tenant, collection, scope, change_xid, change_seq)
                WHERE scope <> ''
                """,
                "CREATE INDEX records_scoped_by_id ON records (tenant, collection, scope, record_id) WHERE scope <> ''",
                "DROP INDEX records_by_scope_change",
                "DROP INDEX records_by_scope_id",
            ]),
        Migration(
            version: "v5-scoped-records",
            statements: [
                // A record's scope is part of its key, and a record knows who created it: the user of its first
                // mutation. The table is locked whole first, as in v4, for the same reason.
                "LOCK TABLE records IN ACCESS EXCLUSIVE MODE",
                #"ALTER TABLE records ADD COLUMN owner TEXT COLLATE "C" NOT NULL DEFAULT ''"#,
                #"""
                UPDATE records r SET owner = m.user_id
                FROM (SELECT DISTINCT ON (tenant, collection, record_id) tenant, collection, record_id, user_id
                      FROM mutations ORDER BY tenant, collection, record_id, received_at, client_ts) AS m
                WHERE r.tenant = m.tenant COLLATE "C" AND r.collection = m.collection COLLATE "C"
                  AND r.record_id = m.record_id COLLATE "C"
                """#,
                "ALTER TABLE records DROP CONSTRAINT records_pkey, ADD PRIMARY KEY (tenant, collection, record_id, scope)",
                "ALTER TABLE mutations ADD COLUMN scope TEXT NOT NULL DEFAULT ''",
                #"""
                UPDATE mutations m SET scope = r.scope FROM records r
                WHERE r.scope <> '' AND r.tenant = m.tenant COLLATE "C" AND r.collection = m.collection COLLATE "C"
                  AND r.record_id = m.record_id COLLATE "C"
                """#,
                "ALTER TABLE conflicts ADD COLUMN scope TEXT NOT NULL DEFAULT ''",
                #"""
                UPDATE conflicts c SET scope = r.scope FROM records r
                WHERE r.scope <> '' AND r.tenant = c.tenant COLLATE "C" AND r.collection = c.collection COLLATE "C"
                  AND r.record_id = c.record_id COLLATE "C"
                """#,
                // The user each device id speaks for, by the device's fingerprint: the first to use it.
                """
                CREATE TABLE device_owners (
                  tenant TEXT NOT NULL,
                  fingerprint TEXT NOT NULL,
                  user_id TEXT NOT NULL,
                  bound_at BIGINT NOT NULL,
                  PRIMARY KEY (tenant, fingerprint)
                )
                """,
            ]),
        Migration(
            version: "v6-admin-grants",
            statements: [
                // The monitor's sessions and sign-in codes, by the SHA-256 of their secret.
                """
                CREATE TABLE admin_grants (
                  kind TEXT NOT NULL,
                  hash TEXT NOT NULL,
                  tenant TEXT NOT NULL,
                  user_id TEXT NOT NULL,
                  role TEXT NOT NULL,
                  name TEXT NOT NULL,
                  csrf TEXT NOT NULL,
                  expires_at BIGINT NOT NULL,
                  session_expires_at BIGINT NOT NULL,
                  PRIMARY KEY (kind, hash)
                )
                """,
                "CREATE INDEX admin_grants_by_expiry ON admin_grants (expires_at)",
            ]),
        Migration(
            version: "v7-notifications",
            statements: [
                // Where an event's organizer hears about its devices, and the episodes already announced.
                """
                CREATE TABLE event_notifications (
                  tenant TEXT NOT NULL,
                  event TEXT NOT NULL,
                  url TEXT NOT NULL,
                  format TEXT NOT NULL,
                  PRIMARY KEY (tenant, event)
                )
                """,
                """
                CREATE TABLE notification_episodes (
                  tenant TEXT NOT NULL,
                  event TEXT NOT NULL,
                  fingerprint TEXT NOT NULL,
                  kind TEXT NOT NULL,
                  opened_at BIGINT NOT NULL,
                  PRIMARY KEY (tenant, event, fingerprint, kind)
                )
                """,
            ]),
        Migration(
            version: "v8-connectors",
            statements: [
                // Connectors, and where each has got to; a lease names the one server delivering it.
                """
                CREATE TABLE connectors (
                  tenant TEXT NOT NULL,
                  id TEXT NOT NULL,
                  collection TEXT NOT NULL,
                  scope TEXT NOT NULL,
                  url TEXT NOT NULL,
                  secret TEXT NOT NULL,
                  format TEXT NOT NULL,
                  paused BOOLEAN NOT NULL,
                  cursor_xid BIGINT NOT NULL,
                  cursor_seq BIGINT NOT NULL,
                  pending_xid BIGINT,
                  pending_seq BIGINT,
                  delivered BIGINT NOT NULL,
                  delivered_changes BIGINT NOT NULL,
                  replays INTEGER NOT NULL,
                  failures INTEGER NOT NULL,
                  last_error TEXT,
                  last_delivered_at BIGINT,
                  last_failed_at BIGINT,
                  next_attempt_at BIGINT NOT NULL,
                  created_at BIGINT NOT NULL,
                  lease_owner TEXT,
                  lease_until BIGINT NOT NULL,
                  PRIMARY KEY (tenant, id)
                )
                """
            ]),
        Migration(
            version: "v9-sync-failure-kinds",
            statements: [
                // What a device reported: waiting too long, or refused by the server. Devices before the kind
                // wrote a refusal's reason as "Refused: …".
                "ALTER TABLE sync_failures ADD COLUMN kind TEXT NOT NULL DEFAULT 'persistent'",
                "UPDATE sync_failures SET kind = 'rejected' WHERE last_error LIKE 'Refused: %'",
            ]),
        Migration(
            version: "v10-device-rejected-count",
            statements: [
                // The records a device's last heartbeat said the server refused, apart from the failed ones.
                "ALTER TABLE devices ADD COLUMN rejected_count BIGINT NOT NULL DEFAULT 0"
            ]),
        Migration(
            version: "v11-relays",
            statements: [
                // Each venue relay's last status report, as the server's monitor shows it.
                """
                CREATE TABLE relays (
                  tenant TEXT NOT NULL,
                  relay_id TEXT NOT NULL,
                  name TEXT NOT NULL,
                  scopes TEXT NOT NULL,
                  waiting BIGINT NOT NULL,
                  oldest_waiting BIGINT,
                  last_error TEXT,
                  last_contact BIGINT NOT NULL,
                  PRIMARY KEY (tenant, relay_id)
                )
                """
            ]),
        Migration(
            version: "v12-files",
            statements: [
                // The files records carry, once per tenant and digest, and their bytes as the ranges that were
                // uploaded.
                """
                CREATE TABLE files (
                  tenant TEXT NOT NULL,
                  sha256 TEXT NOT NULL,
                  size BIGINT NOT NULL,
                  type TEXT NOT NULL,
                  received BIGINT NOT NULL,
                  complete BOOLEAN NOT NULL,
                  created_at BIGINT NOT NULL,
                  PRIMARY KEY (tenant, sha256)
                )
                """,
                """
                CREATE TABLE file_chunks (
                  tenant TEXT NOT NULL,
                  sha256 TEXT NOT NULL,
                  start BIGINT NOT NULL,
                  bytes BYTEA NOT NULL,
                  PRIMARY KEY (tenant, sha256, start)
                )
                """,
                // Stored out of line uncompressed: photos and PDFs are compressed already, so compressing them
                // again costs CPU for nothing.
                "ALTER TABLE file_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL",
            ]),
        Migration(
            version: "v13-device-pending-upload-bytes",
            statements: ["ALTER TABLE devices ADD COLUMN pending_upload_bytes BIGINT NOT NULL DEFAULT 0"]),
        // When an upload last took bytes, and the unfinished ones by it, for their expiry.
        Migration(
            version: "v14-unfinished-uploads",
            statements: [
                "ALTER TABLE files ADD COLUMN touched_at BIGINT NOT NULL DEFAULT 0",
                "UPDATE files SET touched_at = created_at",
                "CREATE INDEX files_unfinished ON files (touched_at) WHERE NOT complete",
            ]),
    ]
}
