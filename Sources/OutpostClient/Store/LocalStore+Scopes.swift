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

        var entries: [(row: OutboxRow, scope: String?)] = []
        var lastEntryScope: [RecordKey: String] = [:]
        for row in try OutboxRow.fetchAll(
            db, sql: "SELECT \(OutboxRow.selection) FROM outbox WHERE scope = '' AND \(inScoped) ORDER BY seq",
            arguments: StatementArguments(collections))
        {
            var scope: String?
            if row.op == .upsert {
                guard let fields = try? row.fields(opening: sealer) else {
                    complete = false
                    continue
                }
                scope = schema.scope(of: fields, in: row.record.collection)
            }
            if let scope { lastEntryScope[row.record] = scope }
            entries.append((row, scope ?? lastEntryScope[row.record]))
        }

        var recordScope: [RecordKey: String] = [:]
        for row in try RecordRow.fetchAll(
            db, sql: "SELECT * FROM records WHERE scope = '' AND \(inScoped)", arguments: StatementArguments(collections))
        {
            guard var record = try? row.open(with: sealer) else {
                complete = false
                continue
            }
            guard let scope = schema.scope(of: record.fields, in: record.collection) ?? lastEntryScope[row.key], !scope.isEmpty
            else { continue }
            if try RecordRow.exists(RecordKey(record.collection, scope, record.recordId), db) { continue }
            try RecordRow.delete(row.key, db)
            // Sealed again: a record's payload is bound to its scope.
            record.scope = scope
            try RecordRow(record, sealer: sealer).insert(db)
            recordScope[row.key] = scope
        }

        for var (row, scope) in entries {
            guard let scope = scope ?? recordScope[row.record], !scope.isEmpty else { continue }
            // The entry's sealed fields are bound to its idempotency key alone: they stay as they are.
            row.record.scope = scope
            try row.update(db, columns: ["scope"])
        }
        if complete { try SettingRow.save(scopesFilledSetting, "1", sealer: sealer, db) }
    }
}
