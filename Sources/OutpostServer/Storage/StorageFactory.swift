import Foundation
import Logging

/// Opens the engine that a configuration names: PostgreSQL when a database URL is given, else embedded SQLite.
package enum StorageFactory {
    /// - Throws: ``StorageError`` with code `configuration`, in words fit for one line on a terminal.
    /// - Parameter poolSize: at most this many PostgreSQL connections, for a command that runs one operation and
    ///   ends; nil: the URL's `pool_size`.
    package static func open(databaseURL: String?, dataDirectory: String, logger: Logger, poolSize: Int? = nil) throws
        -> any SyncStorage
    {
        if let databaseURL, !databaseURL.isEmpty {
            var location = try PostgresLocation(url: databaseURL)
            if let poolSize { location.poolSize = max(1, min(poolSize, location.poolSize)) }
            return PostgresStorage(location: location, logger: logger)
        }
        return try SQLiteStorage(directory: URL(fileURLWithPath: dataDirectory, isDirectory: true))
    }
}
