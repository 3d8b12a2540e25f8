import Foundation
import Logging
import NIOConcurrencyHelpers
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

    /// A fresh, empty database; its URL.
    func makeDatabase() async throws -> String {
        let server = try await start()
        counter += 1
        let name = "outpost_test_\(ProcessInfo.processInfo.processIdentifier)_\(counter)"
        try await runPSQL(server, "CREATE DATABASE \(name)")
        let credentials = server.password.map { "\(server.user):\($0)" } ?? server.user
        return "postgres://\(credentials)@\(server.host):\(server.port)/\(name)?sslmode=disable"
    }

    /// Drops a database made by ``makeDatabase()``; the private cluster is removed whole at exit anyway.
    func dropDatabase(url: String) async {
        guard let server = try? await start(), server.external,
            let name = URLComponents(string: url)?.path.dropFirst()
        else { return }
        try? await runPSQL(server, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
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

    private func runPSQL(_ server: Server, _ sql: String) async throws {
        var environment = ProcessInfo.processInfo.environment
        if let password = server.password { environment["PGPASSWORD"] = password }
        let arguments = [
            "-h", server.host, "-p", String(server.port), "-U", server.user, "-d", server.adminDatabase,
            "-v", "ON_ERROR_STOP=1", "-q", "-c", sql,
        ]
        let result = try await Thread.blocking { [environment] in try Shell.run("psql", arguments, environment: environment) }
        guard result.status == 0 else {
            throw TestSetupError("psql failed: \(result.output)")
        }
    }

    // MARK: Private cluster

    private static func startPrivateCluster() async throws -> Server {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-pg-\(UUID().uuidString.prefix(8))")
        let (binDirectory, data) = try await Thread.blocking { try PostgresCluster.initialize(root: root) }
        func command(_ tool: String, _ arguments: [String]) -> (String, [String]) {
            PostgresCluster.command(binDirectory, tool, arguments)
        }

        let port = try freePort()
        let (postgres, arguments) = command(
            "postgres",
            ["-D", data, "-p", String(port), "-k", data, "-c", "listen_addresses=127.0.0.1",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=300", "-c", "shared_buffers=64MB"])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Shell.resolve(postgres))
        process.arguments = arguments
        let log = FileHandle(forWritingAtPath: "/dev/null")
        process.standardOutput = log
        process.standardError = log
        try process.run()
        TestPostgresCleanup.register(pid: process.processIdentifier, directory: root.path)

        // Wait until it accepts connections.
        for _ in 0..<300 {
            let ready = try await Thread.blocking {
                try Shell.run(binDirectory + "/pg_isready", ["-h", "127.0.0.1", "-p", String(port), "-q"])
            }
            if ready.status == 0 {
                return Server(
                    host: "127.0.0.1", port: port, user: "postgres", password: nil, adminDatabase: "postgres",
                    external: false)
            }
            guard process.isRunning else { throw TestSetupError("postgres exited at start") }
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

/// Stops the private cluster when the test process exits.
enum TestPostgresCleanup {
    nonisolated(unsafe) private static var pid: pid_t = 0
    nonisolated(unsafe) private static var directory: String = ""

    static func register(pid: pid_t, directory: String) {
        Self.pid = pid
        Self.directory = directory
        atexit {
            guard TestPostgresCleanup.pid > 0 else { return }
            // The launched process may be runuser, which does not pass signals on: signal the postmaster itself.
            let pidFile = TestPostgresCleanup.directory + "/data/postmaster.pid"
            if let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
                let line = text.split(separator: "\n").first, let postmaster = pid_t(line)
            {
                kill(postmaster, SIGQUIT)
            }
            kill(TestPostgresCleanup.pid, SIGTERM)
            var status: Int32 = 0
            waitpid(TestPostgresCleanup.pid, &status, 0)
            try? FileManager.default.removeItem(atPath: TestPostgresCleanup.directory)
        }
    }
}

struct TestSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Runs a program to completion and captures what it printed.
enum Shell {
    struct Result {
        var status: Int32
        var output: String
    }

    static func resolve(_ program: String) -> String {
        if program.hasPrefix("/") { return program }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(directory)/\(program)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return "/usr/bin/\(program)"
    }

    static func run(_ program: String, _ arguments: [String], environment: [String: String]? = nil) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: resolve(program))
        process.arguments = arguments
        if let environment { process.environment = environment }
        let pipe = try ChildPipe()
        process.standardOutput = pipe.writing
        process.standardError = pipe.writing
        try process.run()
        pipe.closeChildEnd()
        let data = pipe.reading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }
}
