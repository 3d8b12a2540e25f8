import Foundation
import PostgresNIO

/// A PostgreSQL connection read from a `postgres://user:password@host:port/database?sslmode=…` URL.
package struct PostgresLocation: Sendable, Hashable {
    package var host: String
    package var port: Int
    package var username: String
    package var password: String?
    package var database: String
    package var tlsMode: String

    /// - Throws: ``StorageError`` with code `configuration`, naming what is wrong but never the password.
    package init(url text: String) throws {
        guard let components = URLComponents(string: text),
            components.scheme == "postgres" || components.scheme == "postgresql"
        else {
            throw StorageError(.configuration, "the database URL must look like postgres://user@host:5432/database")
        }
        guard let host = components.host, !host.isEmpty else {
            throw StorageError(.configuration, "the database URL has no host")
        }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard !database.isEmpty else {
            throw StorageError(.configuration, "the database URL names no database")
        }
        let mode = components.queryItems?.first(where: { $0.name == "sslmode" })?.value ?? "prefer"
        guard ["disable", "prefer", "require"].contains(mode) else {
            throw StorageError(.configuration, "sslmode must be disable, prefer or require")
        }
        self.host = host
        self.port = components.port ?? 5432
        self.username = components.user?.removingPercentEncoding ?? "postgres"
        self.password = components.password?.removingPercentEncoding
        self.database = database
        self.tlsMode = mode
    }

    /// Where it points, for logs: never the password.
    package var summary: String { "PostgreSQL at \(host):\(port)/\(database) as \(username)" }

    var clientConfiguration: PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS =
            switch tlsMode {
            case "disable": .disable
            case "require": .require(.makeClientConfiguration())
            default: .prefer(.makeClientConfiguration())
            }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = 32
        return configuration
    }
}
