import Foundation
import Logging

/// Opens the engine that a configuration names: PostgreSQL when a database URL is given, else embedded SQLite.
package enum StorageFactory {
    /// - Parameter fileDirectory: where the bytes of uploaded files are kept: by default, on SQLite the folder
    ///   `files` in the data folder, on PostgreSQL the database.
    /// - Throws: ``StorageError`` with code `configuration`, in words fit for one line on a terminal.
    package static func open(
        databaseURL: String?, dataDirectory: String, fileDirectory: String? = nil, logger: Logger
    ) throws -> any SyncStorage {
        let files = fileDirectory.map { URL(fileURLWithPath: $0, isDirectory: true) }
        if let databaseURL, !databaseURL.isEmpty {
            let directory = files.map(FileDirectory.init(root:))
            try directory?.prepare()
            return PostgresStorage(location: try PostgresLocation(url: databaseURL), logger: logger, files: directory)
        }
        return try SQLiteStorage(directory: URL(fileURLWithPath: dataDirectory, isDirectory: true), fileDirectory: files)
    }
}
