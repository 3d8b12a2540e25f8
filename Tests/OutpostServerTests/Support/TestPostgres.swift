import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import Testing

@testable import OutpostServer

/// A real PostgreSQL for the tests: `$OUTPOST_TEST_DATABASE_URL` when set, else a private cluster started
/// once per test process in a temporary folder on a free port, and stopped when the process exits.
///
/// Each test gets a database of its own, so tests never see each other's rows.
actor TestPostgres {
    static let shared = TestPostgres()

    private var server: Task<Server, any Error>?
    private var counter = 0

    struct Server {
        var host: String
        var port: Int
        var user: String
        var password: String?
        var adminDatabase: String
        var external: Bool
    }

    /// The pool each test's server opens. Tests run side by side on one cluster, each with a server or two: at the
    /// default pool of 32 a loaded machine's slow queries open enough connections to fill `max_connections`, and
    /// then an unrelated test's query waits out its time limit for a connection.
    static let poolSize = 8

    /// How long each test's server lets one operation wait for the database. The tests run side by side on a
    /// loaded machine, where a query that waits behind a hundred others is slow, not lost; the bound is for a
    /// database that is gone, which no test here stops.
    static let operationTimeout = 60

    /// A fresh, empty database; its URL.
    func makeDatabase() async throws -> String {
        let server = try await start()
        counter += 1
        let name = "outpost_test_\(ProcessInfo.processInfo.processIdentifier)_\(counter)"
        try await server.execute("CREATE DATABASE \(name)")
        let credentials = server.password.map { "\(server.user):\($0)" } ?? server.user
        return
            "postgres://\(credentials)@\(server.host):\(server.port)/\(name)?sslmode=disable&pool_size=\(Self.poolSize)&operation_timeout=\(Self.operationTimeout)"
    }

    /// Drops a database made by ``makeDatabase()``; the private cluster is removed whole at exit anyway.
    func dropDatabase(url: String) async {
        guard let server = try? await start(), server.external,
            let name = URLComponents(string: url)?.path.dropFirst()
        else { return }
        try? await server.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
    }

    /// Starts the server once, however many tests ask at the same time.
    private func start() async throws -> Server {
        if let server { return try await server.value }
        let task = Task<Server, any Error> {
            if let url = ProcessInfo.processInfo.environment["OUTPOST_TEST_DATABASE_URL"], !url.isEmpty {
                let location = try PostgresLocation(url: url)
                return Server(
                    host: location.host, port: location.port, user: location.username, password: location.password,
                    adminDatabase: location.database, external: true)
            }
            return try await Self.startPrivateCluster()
        }
        server = task
        return try await task.value
    }

    // MARK: Private cluster

    private static func startPrivateCluster() async throws -> Server {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-pg-\(UUID().uuidString.prefix(8))")
        let (binDirectory, data) = try await PostgresCluster.initialize(root: root)
        func command(_ tool: String, _ arguments: [String]) -> (String, [String]) {
            PostgresCluster.command(binDirectory, tool, arguments)
        }

        let port = try freePort()
        let (postgres, arguments) = command(
            "postgres",
            [
                "-D", data, "-p", String(port), "-k", data, "-c", "listen_addresses=127.0.0.1",
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=600", "-c", "shared_buffers=64MB",
            ])
        let postmaster = try await RunningChild(postgres, arguments)
        TestPostgresCleanup.register(postmaster, directory: root.path)

        // Wait until it accepts connections.
        for _ in 0..<300 {
            let ready = try await Child.run(binDirectory + "/pg_isready", ["-h", "127.0.0.1", "-p", String(port), "-q"])
            if ready.status == 0 {
                return Server(
                    host: "127.0.0.1", port: port, user: "postgres", password: nil, adminDatabase: "postgres",
                    external: false)
            }
            guard postmaster.isRunning else { throw TestSetupError("postgres exited at start: \(postmaster.stderr)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestSetupError("postgres did not start within 15 s")
    }

    /// A port free now, for a server that must keep its port across restarts.
    ///
    /// Chosen below Linux's ephemeral range (32768–60999), so that the many servers tests start on port 0
    /// can never be handed it between this check and the bind; and never handed out twice in one test
    /// process, where tests that restart servers on their ports run side by side.
    static func freePort() throws -> Int {
        for _ in 0..<200 {
            let port = UInt16.random(in: 20000..<32000)
            guard handedOut.withLockedValue({ $0.insert(port).inserted }) else { continue }
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            if bound { return Int(port) }
        }
        throw TestSetupError("cannot find a free port")
    }

    private static let handedOut = NIOLockedValueBox<Set<UInt16>>([])
}

extension TestPostgres.Server {
    /// Runs one statement, such as `CREATE DATABASE`, in the server's admin database.
    func execute(_ sql: String) async throws {
        let logger = Logger(label: "outpost.tests.postgres")
        let configuration = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password, database: adminDatabase, tls: .disable)
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
        do {
            try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
        } catch {
            try? await connection.close()
            throw TestSetupError("\(sql): \(String(reflecting: error))")
        }
        try await connection.close()
    }
}

/// Stops the private cluster when the test process exits.
enum TestPostgresCleanup {
    nonisolated(unsafe) private static var postmaster: RunningChild?
    nonisolated(unsafe) private static var directory: String = ""

    static func register(_ postmaster: RunningChild, directory: String) {
        Self.postmaster = postmaster
        Self.directory = directory
        atexit {
            guard let launched = TestPostgresCleanup.postmaster else { return }
            // The launched process may be runuser, which does not pass signals on: signal the postmaster itself.
            let pidFile = TestPostgresCleanup.directory + "/data/postmaster.pid"
            if let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
                let line = text.split(separator: "\n").first, let pid = pid_t(line)
            {
                kill(pid, SIGQUIT)
                for _ in 0..<100 where kill(pid, 0) == 0 { usleep(50_000) }
            }
            kill(launched.processIdentifier, SIGKILL)
            try? FileManager.default.removeItem(atPath: TestPostgresCleanup.directory)
        }
    }
}

struct TestSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
