import Foundation
import PostgresNIO

/// A PostgreSQL connection read from a `postgres://user:password@host:port/database?sslmode=…&pool_size=…` URL.
package struct PostgresLocation: Sendable, Hashable {
    package var host: String
    package var port: Int
    package var username: String
    package var password: String?
    package var database: String
    package var tlsMode: String
    /// How many connections the server process keeps open (`pool_size`, 32 by default): see ``clientConfiguration``.
    package var poolSize: Int

    /// The most connections `pool_size` may ask for.
    package static let maxPoolSize = 1_000

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
        let poolSize = components.queryItems?.first(where: { $0.name == "pool_size" })?.value
        guard let size = poolSize.map({ Int($0) }) ?? 32, (1...Self.maxPoolSize).contains(size) else {
            throw StorageError(.configuration, "pool_size must be a whole number from 1 to \(Self.maxPoolSize)")
        }
        self.host = host
        self.port = components.port ?? 5432
        self.poolSize = size
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
        // A fixed pool, and no keep-alive pings. PostgresNIO's pool starts a keep-alive timer (30 s) and, for a
        // connection above the minimum, an idle timer (60 s) each time a connection goes back to the pool, and
        // cancels them when it is leased again. On Linux a cancelled sleep keeps its task and timer until the
        // time it was to wake, so at thousands of queries a second these timers held about 33 MB of the
        // server's memory (`bench load` on PostgreSQL: 124 MB peak, 91 MB without them). With the minimum at the
        // maximum no idle timer is started; a connection that broke while idle fails the one query that finds it,
        // which is answered 503 and retried by the device, and the pool opens another.
        configuration.options.maximumConnections = poolSize
        configuration.options.minimumConnections = poolSize
        configuration.options.keepAliveBehavior = nil
        return configuration
    }
}
