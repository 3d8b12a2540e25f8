import Foundation
import GRDB
import OutpostProtocol

extension LocalStore {
    /// The setting that says the records kept from before scopes are in the scopes their fields name.
    static let scopesFilledSetting = "record_scopes_filled"

    /// Whether ``fillScopes(_:sealer:schema:)`` has finished on this store; nothing is unsealed.
    static func scopesFilled(_ db: Database) throws -> Bool {
        try SettingRow.exists(scopesFilledSetting, db)
    }

    /// Moves the records of scoped collections (``StoreSchema/scopeFields``) that migration v9 kept with the
    /// empty scope into the scope their sealed fields name, and their outbox entries with them, so that a
    /// check-in made before the upgrade is the record its event's pulls, scans and answers look for.
    ///
    /// The migration cannot do it: the fields are sealed, and the key comes only with the store's opening.
    /// Runs in one transaction, once: the setting ``scopesFilledSetting`` marks it done. A row that does not
    /// open is left where it is and the setting is not written, so that the next opening tries it again.
    ///
    /// An outbox entry takes the scope its own fields name (a queued scan of one event stays that event's,
    /// whatever the record became after); a delete, or an upsert without the scope field, takes the scope of
    /// the record's entry before it, or else the record's. A record takes the scope its fields name, or else
    /// its last entry's (a deleted record keeps no fields). A record or entry with neither stays unscoped; a
    /// record whose scope already holds a row with its id stays too, rather than replace that row.
    static func fillScopes(_ db: Database, sealer: Sealer, schema: StoreSchema) throws {
        guard try !scopesFilled(db) else { return }
        let collections = Array(schema.scopeFields.keys)
        let inScoped = "collection IN (\(databaseQuestionMarks(count: collections.count)))"
        var complete = true

        var entries: [(seq: Int64, record: RecordKey, scope: String?)] = []
        var lastEntryScope: [RecordKey: String] = [:]
        for row in try Row.fetchAll(
            db,
            sql: "SELECT seq, idempotency_key, collection, record_id, op, payload FROM outbox WHERE scope = '' AND \(inScoped) ORDER BY seq",
            arguments: StatementArguments(collections))
        {
            let collection: String = row["collection"]
            let record = RecordKey(collection, "", row["record_id"])
            var scope: String?
            if row["op"] == MutationOperation.upsert.rawValue {
                let key: String = row["idempotency_key"]
                guard
                    let fields = try? sealer.open(json: [String: JSONValue].self, from: row["payload"], context: "outbox:\(key)")
                else {
                    complete = false
                    continue
                }
                scope = schema.scope(of: fields, in: collection)
            }
            if let scope { lastEntryScope[record] = scope }
            entries.append((row["seq"], record, scope ?? lastEntryScope[record]))
        }

        var recordScope: [RecordKey: String] = [:]
        for row in try Row.fetchAll(
            db, sql: "SELECT * FROM records WHERE scope = '' AND \(inScoped)", arguments: StatementArguments(collections))
        {
            guard var record = try? RecordRow(row: row).open(with: sealer) else {
                complete = false
                continue
            }
            let key = RecordKey(record.collection, "", record.recordId)
            guard let scope = schema.scope(of: record.fields, in: record.collection) ?? lastEntryScope[key], !scope.isEmpty
            else { continue }
            let taken = try Bool.fetchOne(
                db, sql: "SELECT EXISTS (SELECT 1 FROM records WHERE collection = ? AND scope = ? AND record_id = ?)",
                arguments: [record.collection, scope, record.recordId])
            if taken == true { continue }
            try db.execute(
                sql: "DELETE FROM records WHERE collection = ? AND scope = '' AND record_id = ?",
                arguments: [record.collection, record.recordId])
            // Sealed again: a record's payload is bound to its scope.
            record.scope = scope
            try RecordRow(record, sealer: sealer).insert(db)
            recordScope[key] = scope
        }

        for entry in entries {
            guard let scope = entry.scope ?? recordScope[entry.record], !scope.isEmpty else { continue }
            try db.execute(sql: "UPDATE outbox SET scope = ? WHERE seq = ?", arguments: [scope, entry.seq])
        }
        if complete { try SettingRow.save(scopesFilledSetting, "1", sealer: sealer, db) }
    }
}
