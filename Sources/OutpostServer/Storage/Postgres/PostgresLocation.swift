import Foundation
import PostgresNIO

/// A PostgreSQL connection read from a
/// `postgres://user:password@host:port/database?sslmode=…&pool_size=…&operation_timeout=…` URL.
package struct PostgresLocation: Sendable, Hashable {
    package var host: String
    package var port: Int
    package var username: String
    package var password: String?
    package var database: String
    package var tlsMode: String
    /// The most connections the server process opens (`pool_size`, 32 by default): see ``clientConfiguration``.
    package var poolSize: Int
    /// How long one operation may wait for the database, a connection from the pool included, before it fails as
    /// unavailable (`operation_timeout`, in seconds, 20 by default).
    package var operationTimeout: Duration

    /// How long a connection may stay unused before the pool closes it.
    package static let idleTimeout = Duration.seconds(10)

    /// The most connections `pool_size` may ask for.
    package static let maxPoolSize = 1_000

    /// The longest `operation_timeout`, in seconds: a request must not wait for ever on a database that is gone.
    package static let maxOperationTimeout = 600

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
        let timeout = components.queryItems?.first(where: { $0.name == "operation_timeout" })?.value
        guard let seconds = timeout.map({ Int($0) }) ?? 20, (1...Self.maxOperationTimeout).contains(seconds) else {
            throw StorageError(
                .configuration, "operation_timeout must be a whole number of seconds from 1 to \(Self.maxOperationTimeout)")
        }
        self.operationTimeout = .seconds(seconds)
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
        // Up to `pool_size` connections, each closed after 10 s unused, and no keep-alive pings. PostgresNIO's pool
        // starts a keep-alive timer (30 s by default) and an idle timer (60 s by default) each time a connection
        // goes back to it, and cancels them when the connection is leased again. On Linux a cancelled sleep keeps
        // its task and timer until the time it was to wake, so at thousands of queries a second those timers hold
        // much of the server's memory. Without keep-alive and with a 10 s idle timer, only the idle timers
        // remain, each alive a sixth as long. A connection is never unused long enough for a firewall to drop it
        // silently, which keep-alive pings guard against. (A fixed pool, minimum equal to maximum, would start
        // neither timer, but PostgresNIO 1.33 traps when a restart under load leaves it below its minimum with
        // requests waiting.)
        configuration.options.maximumConnections = poolSize
        configuration.options.minimumConnections = 0
        configuration.options.connectionIdleTimeout = Self.idleTimeout
        configuration.options.keepAliveBehavior = nil
        return configuration
    }
}
