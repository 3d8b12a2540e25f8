import Foundation
import Logging

/// Opens the engine that a configuration names: PostgreSQL when a database URL is given, else embedded SQLite.
package enum StorageFactory {
    /// - Throws: ``StorageError`` with code `configuration`, in words fit for one line on a terminal.
    package static func open(databaseURL: String?, dataDirectory: String, logger: Logger) throws -> any SyncStorage {
        if let databaseURL, !databaseURL.isEmpty {
            return PostgresStorage(location: try PostgresLocation(url: databaseURL), logger: logger)
        }
        return try SQLiteStorage(directory: URL(fileURLWithPath: dataDirectory, isDirectory: true))
    }
}
