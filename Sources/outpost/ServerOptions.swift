import ArgumentParser
import Foundation
import Logging
import OutpostServer

/// Where the server's data lives: shared by `serve` and `token`.
struct StorageOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "Folder of the embedded SQLite store.")
    var dataDirectory: String = "./outpost-data"

    @Option(
        name: .customLong("database-url"),
        help:
            "PostgreSQL URL (postgres://user:password@host:5432/db, optionally ?sslmode=disable|prefer|require&pool_size=32&operation_timeout=20); default $OUTPOST_DATABASE_URL, else SQLite."
    )
    var databaseURL: String?

    @Option(
        name: .customLong("file-directory"),
        help:
            "Folder of the bytes of uploaded files; default: the folder files in --data-dir on SQLite, the database on PostgreSQL (where every server must name the same folder)."
    )
    var fileDirectory: String?

    var resolvedDatabaseURL: String? {
        databaseURL ?? ProcessInfo.processInfo.environment["OUTPOST_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
    }

    func openStorage(logger: Logger) throws -> any SyncStorage {
        do {
            return try StorageFactory.open(
                databaseURL: resolvedDatabaseURL, dataDirectory: dataDirectory, fileDirectory: fileDirectory, logger: logger)
        } catch let error as StorageError {
            throw CLIError(error.message)
        }
    }

    /// `$OUTPOST_JWT_SECRET`, when set; refused when shorter than the minimum.
    static func environmentSecret() throws -> [UInt8]? {
        guard let text = ProcessInfo.processInfo.environment["OUTPOST_JWT_SECRET"], !text.isEmpty else { return nil }
        guard text.utf8.count >= TokenAuthority.minimumSecretLength else {
            throw CLIError("OUTPOST_JWT_SECRET must be at least \(TokenAuthority.minimumSecretLength) bytes long")
        }
        return Array(text.utf8)
    }
}

extension Logger {
    /// The CLI's logger, to stderr, at `$LOG_LEVEL` (default `level`).
    static func cli(_ label: String, level: Logger.Level = .info) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = configuredLevel(default: level)
        return logger
    }

    /// `$LOG_LEVEL`, or `level`.
    static func configuredLevel(default level: Logger.Level = .info) -> Logger.Level {
        ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0) } ?? level
    }
}

/// Parses spans such as `90s`, `30m`, `12h` or `7d`.
struct DurationArgument: ExpressibleByArgument, CustomStringConvertible {
    var duration: Duration
    /// As written, such as `24h`.
    var description: String
    var defaultValueDescription: String { description }

    init?(argument: String) {
        description = argument
        if argument.hasSuffix("ms") {
            guard let value = Int64(argument.dropLast(2)), value > 0, value <= 3_600_000 else { return nil }
            self.duration = .milliseconds(value)
            return
        }
        guard let unit = argument.last, let value = Int64(argument.dropLast()), value > 0 else { return nil }
        let seconds: Int64
        switch unit {
        case "s": seconds = value
        case "m": seconds = value * 60
        case "h": seconds = value * 3600
        case "d": seconds = value * 86400
        default: return nil
        }
        guard seconds <= 366 * 86400 else { return nil }
        self.duration = .seconds(seconds)
    }
}
