import GRDB

extension LocalStore {
    /// The versioned device schema. Append migrations; never edit a shipped one.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE records (
                      collection TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      payload BLOB NOT NULL,
                      deleted BOOLEAN NOT NULL DEFAULT 0,
                      sync_status TEXT,
                      last_sync_attempt INTEGER,
                      is_offline_entry BOOLEAN NOT NULL DEFAULT 0,
                      created_at INTEGER NOT NULL,
                      updated_at INTEGER NOT NULL,
                      version INTEGER,
                      PRIMARY KEY (collection, record_id)
                    ) WITHOUT ROWID;
                    -- Only records waiting or failed: a synced record costs the index nothing.
                    CREATE INDEX records_unsynced ON records (sync_status) WHERE sync_status IN ('pending', 'failed');

                    CREATE TABLE outbox (
                      seq INTEGER PRIMARY KEY,
                      idempotency_key TEXT NOT NULL,
                      collection TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      op TEXT NOT NULL,
                      client_ts INTEGER NOT NULL,
                      base_version INTEGER,
                      payload BLOB NOT NULL,
                      state TEXT NOT NULL DEFAULT 'pending',
                      attempts INTEGER NOT NULL DEFAULT 0,
                      first_attempt INTEGER,
                      last_attempt INTEGER
                    );
                    -- No secondary index: every page a local write touches costs flush time, and a device's
                    -- timestamps only move forward, so seq order is client-time order.

                    CREATE TABLE settings (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v2-reference-data") { db in
            // Reference data (an event's roster): rows sealed like every payload; a blind search index of
            // truncated HMACs of name prefixes and e-mails; the ids deleted since download; download state.
            try db.execute(
                sql: """
                    CREATE TABLE reference_records (
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      payload BLOB NOT NULL,
                      version INTEGER NOT NULL,
                      PRIMARY KEY (collection, scope, record_id)
                    ) WITHOUT ROWID;
                    CREATE TABLE reference_search (
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      token INTEGER NOT NULL,
                      record_id TEXT NOT NULL,
                      PRIMARY KEY (collection, scope, token, record_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX reference_search_by_record ON reference_search (collection, scope, record_id);
                    CREATE TABLE reference_tombstones (
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      deleted_at INTEGER NOT NULL,
                      PRIMARY KEY (collection, scope, record_id)
                    ) WITHOUT ROWID;
                    CREATE TABLE reference_state (
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      continuation TEXT,
                      cursor TEXT,
                      total INTEGER NOT NULL DEFAULT 0,
                      stored INTEGER NOT NULL DEFAULT 0,
                      completed_at INTEGER,
                      refreshed_at INTEGER,
                      PRIMARY KEY (collection, scope)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v3-reference-tokens") { db in
            // Each reference row keeps its own search tokens (a JSON array), so that a change removes exactly
            // its old ones and a download builds the index in one sorted pass. They replace the index of the
            // search table by record, a second B-tree every download would build.
            try db.execute(
                sql: """
                    ALTER TABLE reference_records ADD COLUMN tokens TEXT;
                    UPDATE reference_records SET tokens = (
                      SELECT json_group_array(token) FROM (
                        SELECT token FROM reference_search s
                        WHERE s.collection = reference_records.collection AND s.scope = reference_records.scope
                          AND s.record_id = reference_records.record_id
                        ORDER BY token));
                    DROP INDEX reference_search_by_record;
                    """)
        }
        migrator.registerMigration("v4-record-sealed-detail") { db in
            // Whether a record's sealed payload holds a sync error or a conflict besides its fields: a push's
            // answer that leaves neither to clear changes only plain columns, and need not open and seal the
            // record again. Unknown (NULL) for rows written before; those take the full path.
            try db.execute(sql: "ALTER TABLE records ADD COLUMN sealed_detail BOOLEAN")
        }
        migrator.registerMigration("v5-reference-token-sets") { db in
            // The search index names its set (collection and scope) by a small number instead of repeating
            // both texts in each of its rows, about five per guest, so that a download writes fewer pages.
            try db.execute(
                sql: """
                    CREATE TABLE reference_sets (
                      set_id INTEGER PRIMARY KEY,
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      UNIQUE (collection, scope)
                    );
                    INSERT INTO reference_sets (collection, scope)
                      SELECT collection, scope FROM reference_search
                      UNION SELECT collection, scope FROM reference_records
                      UNION SELECT collection, scope FROM reference_state;
                    CREATE TABLE reference_tokens (
                      set_id INTEGER NOT NULL,
                      token INTEGER NOT NULL,
                      record_id TEXT NOT NULL,
                      PRIMARY KEY (set_id, token, record_id)
                    ) WITHOUT ROWID;
                    INSERT INTO reference_tokens (set_id, token, record_id)
                      SELECT s.set_id, r.token, r.record_id FROM reference_search r
                      JOIN reference_sets s ON s.collection = r.collection AND s.scope = r.scope
                      ORDER BY 1, 2, 3;
                    DROP TABLE reference_search;
                    """)
        }
        migrator.registerMigration("v7-reference-fts") { db in
            // The search index becomes SQLite's FTS5, over each row's tokens: it takes each stored page as a
            // small segment and merges segments as they accumulate, so that no B-tree of (token, record) pairs,
            // random keys, has to be sorted and built in one pass after a download's last page.
            // FTS5 names documents by integer: rows get one (`ordinal`), in the order they arrive.
            // Contentless: the index keeps tokens only, and each row keeps its own, as the index has them
            // (16 hex digits each, space-separated), so that a change removes exactly those.
            try db.execute(
                sql: """
                    CREATE TABLE reference_rows (
                      ordinal INTEGER PRIMARY KEY,
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      payload BLOB NOT NULL,
                      version INTEGER NOT NULL,
                      tokens TEXT,
                      UNIQUE (collection, scope, record_id)
                    );
                    INSERT INTO reference_rows (collection, scope, record_id, payload, version, tokens)
                      SELECT collection, scope, record_id, payload, version,
                             (SELECT group_concat(hex, ' ') FROM (
                                SELECT printf('%016llx', value) AS hex FROM json_each(r.tokens) ORDER BY key))
                      FROM reference_records r ORDER BY collection, scope, record_id;
                    DROP TABLE reference_records;
                    ALTER TABLE reference_rows RENAME TO reference_records;
                    CREATE VIRTUAL TABLE reference_index USING fts5(tokens, content='', columnsize=0, detail=none);
                    INSERT INTO reference_index (rowid, tokens)
                      SELECT ordinal, tokens FROM reference_records WHERE tokens IS NOT NULL;
                    DROP TABLE reference_tokens;
                    DROP TABLE reference_sets;
                    """)
        }
        migrator.registerMigration("v8-reference-fingerprints") { db in
            // A keyed digest of each row's name and e-mail (`ReferenceIndex.fingerprint`), so that a refresh
            // works out tokens only for rows whose name or e-mail changed. Rows stored before have none: a
            // refresh works theirs out, and keeps their index entries when the tokens come out the same.
            try db.execute(sql: "ALTER TABLE reference_records ADD COLUMN fingerprint INTEGER")
        }
        migrator.registerMigration("v9-record-scopes") { db in
            // A record's scope (the event of a check-in) is part of its identity, as on the server: the same id
            // in two events is two records. SQLite cannot change the key of a WITHOUT ROWID table, so the table
            // is built again. Rows kept get the empty scope; `LocalStore.fillScopes` then moves those of scoped
            // collections into the scope their sealed fields name, which needs the key this migration lacks.
            try db.execute(
                sql: """
                    CREATE TABLE records_by_scope (
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL DEFAULT '',
                      record_id TEXT NOT NULL,
                      payload BLOB NOT NULL,
                      deleted BOOLEAN NOT NULL DEFAULT 0,
                      sync_status TEXT,
                      last_sync_attempt INTEGER,
                      is_offline_entry BOOLEAN NOT NULL DEFAULT 0,
                      created_at INTEGER NOT NULL,
                      updated_at INTEGER NOT NULL,
                      version INTEGER,
                      sealed_detail BOOLEAN,
                      PRIMARY KEY (collection, scope, record_id)
                    ) WITHOUT ROWID;
                    INSERT INTO records_by_scope (collection, scope, record_id, payload, deleted, sync_status,
                                                  last_sync_attempt, is_offline_entry, created_at, updated_at,
                                                  version, sealed_detail)
                      SELECT collection, '', record_id, payload, deleted, sync_status, last_sync_attempt,
                             is_offline_entry, created_at, updated_at, version, sealed_detail
                      FROM records ORDER BY collection, record_id;
                    DROP TABLE records;
                    ALTER TABLE records_by_scope RENAME TO records;
                    CREATE INDEX records_unsynced ON records (sync_status) WHERE sync_status IN ('pending', 'failed');
                    ALTER TABLE outbox ADD COLUMN scope TEXT NOT NULL DEFAULT '';
                    """)
        }
        migrator.registerMigration("v10-rejected-records") { db in
            // A record the server refused waits for the user, not for the network: `rejected`, counted from the
            // same partial index. Records whose only entries were rejected become rejected. An outbox entry
            // names the field its client time fills (a check-in's `scanned_at`), so that an entry stamped by a
            // clock that had jumped ahead can be stamped again. A discarded record leaves a sealed copy.
            try db.execute(
                sql: """
                    DROP INDEX records_unsynced;
                    CREATE INDEX records_unsynced ON records (sync_status)
                      WHERE sync_status IN ('pending', 'failed', 'rejected');
                    UPDATE records SET sync_status = 'rejected'
                      WHERE sync_status = 'failed'
                        AND EXISTS (SELECT 1 FROM outbox o WHERE o.state = 'rejected' AND o.collection = records.collection
                                      AND o.scope = records.scope AND o.record_id = records.record_id)
                        AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.state = 'pending' AND o.collection = records.collection
                                          AND o.scope = records.scope AND o.record_id = records.record_id);
                    ALTER TABLE outbox ADD COLUMN timestamp_field TEXT;
                    CREATE TABLE discarded (
                      seq INTEGER PRIMARY KEY,
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      discarded_at INTEGER NOT NULL,
                      payload BLOB NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("v11-record-tombstones") { db in
            // A deleted record is a tombstone on the device as on the server.
            try db.execute(sql: "ALTER TABLE records RENAME COLUMN deleted TO tombstone")
        }
        migrator.registerMigration("v12-files") { db in
            // Files records carry (`FileReference`): one row a file, by digest, however many records name it; its
            // bytes sealed in chunks, each in a row of its own (a rowid table: large rows do not belong in a
            // b-tree keyed by them); and which record fields name which file, so that the bytes waiting to
            // upload are counted without opening a payload.
            try db.execute(
                sql: """
                    CREATE TABLE files (
                      sha256 TEXT PRIMARY KEY,
                      size INTEGER NOT NULL,
                      type TEXT NOT NULL,
                      stored INTEGER NOT NULL,
                      upload_state TEXT NOT NULL,
                      uploaded INTEGER NOT NULL DEFAULT 0,
                      upload_error TEXT,
                      created_at INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE TABLE file_chunks (
                      sha256 TEXT NOT NULL,
                      start INTEGER NOT NULL,
                      data BLOB NOT NULL,
                      PRIMARY KEY (sha256, start)
                    );
                    CREATE TABLE file_uses (
                      collection TEXT NOT NULL,
                      scope TEXT NOT NULL,
                      record_id TEXT NOT NULL,
                      field TEXT NOT NULL,
                      sha256 TEXT NOT NULL,
                      PRIMARY KEY (collection, scope, record_id, field)
                    ) WITHOUT ROWID;
                    CREATE INDEX file_uses_by_file ON file_uses (sha256);
                    """)
        }
        migrator.registerMigration("v13-file-use-times") { db in
            // When each file was last attached or opened: the bytes of files the server holds are given back least
            // recently used first (`LocalStore.releaseFileBytes`).
            try db.execute(
                sql: """
                    ALTER TABLE files ADD COLUMN used_at INTEGER NOT NULL DEFAULT 0;
                    UPDATE files SET used_at = created_at;
                    """)
        }
        return migrator
    }
}
