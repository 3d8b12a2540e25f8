import Foundation
import GRDB

/// A row of the `settings` table: one of the device's named values (its id, the server, the token, pull
/// cursors), sealed under a context naming it, so that a value opens only under its own name.
///
/// The table's statements are this type's: the store's transactions call them.
struct SettingRow: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "settings"
    /// A setting saved again replaces the one of the same name.
    static let persistenceConflictPolicy = PersistenceConflictPolicy(insert: .replace, update: .replace)

    var name: String
    var value: Data

    init(row: Row) throws {
        name = row["name"]
        value = row["value"]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["name"] = name
        container["value"] = value
    }

    private static func context(_ name: String) -> String { "setting:\(name)" }

    /// The value of the setting `name`, opened; nil when it is not set.
    static func value(_ name: String, sealer: Sealer, _ db: Database) throws -> String? {
        guard let row = try fetchOne(db.cachedStatement(sql: "SELECT * FROM settings WHERE name = ?"), arguments: [name])
        else { return nil }
        return String(decoding: try sealer.open(row.value, context: context(name)), as: UTF8.self)
    }

    /// Whether the setting `name` is set; nothing is opened.
    static func exists(_ name: String, _ db: Database) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM settings WHERE name = ?)", arguments: [name]) ?? false
    }

    /// Sets `name` to `value`, sealed, or removes it when `value` is nil.
    static func save(_ name: String, _ value: String?, sealer: Sealer, _ db: Database) throws {
        guard let value else { return try remove([name], db) }
        try SettingRow(name: name, value: try sealer.seal(Data(value.utf8), context: context(name))).insert(db)
    }

    /// Removes the settings `names`.
    static func remove(_ names: [String], _ db: Database) throws {
        _ = try deleteAll(db, keys: names)
    }

    private init(name: String, value: Data) {
        self.name = name
        self.value = value
    }
}
