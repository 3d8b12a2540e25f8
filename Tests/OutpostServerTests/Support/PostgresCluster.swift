import Foundation
import NIOConcurrencyHelpers

/// A PostgreSQL cluster of one test's own, which the test may stop and start under load. As root (in CI),
/// `initdb` and `postgres` refuse to run, so they run as the `postgres` user in a folder it owns.
final class PostgresCluster: Sendable {
    let root: URL
    let data: String
    let port: Int
    let binDirectory: String

    private init(root: URL, data: String, port: Int, binDirectory: String) {
        self.root = root
        self.data = data
        self.port = port
        self.binDirectory = binDirectory
    }

    /// A new, stopped cluster in a temporary folder, durable (fsync on) as in production.
    static func create() async throws -> PostgresCluster {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-pgc-\(UUID().uuidString.prefix(8))")
        let (binDirectory, data) = try await initialize(root: root)
        return PostgresCluster(root: root, data: data, port: try TestPostgres.freePort(), binDirectory: binDirectory)
    }

    /// Makes `root` and runs `initdb` in `root/data`; the binaries' folder and the data folder.
    static func initialize(root: URL) async throws -> (binDirectory: String, data: String) {
        let binDirectory = try await Child.run("pg_config", ["--bindir"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        guard FileManager.default.fileExists(atPath: binDirectory + "/initdb") else {
            throw TestSetupError(
                "PostgreSQL server binaries are not installed (no initdb in \(binDirectory)); install the postgresql package or set OUTPOST_TEST_DATABASE_URL"
            )
        }
        let data = root.appendingPathComponent("data").path
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        if getuid() == 0 {
            _ = try await Child.run("chown", ["-R", "postgres:postgres", root.path])
            _ = try await Child.run("chmod", ["755", root.path])
        }
        let (initdb, arguments) = command(
            binDirectory, "initdb", ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        let result = try await Child.run(initdb, arguments)
        guard result.status == 0 else { throw TestSetupError("initdb failed: \(result.output)") }
        return (binDirectory, data)
    }

    /// A PostgreSQL tool and its arguments, run as `postgres` when this process is root.
    static func command(_ binDirectory: String, _ tool: String, _ arguments: [String]) -> (String, [String]) {
        getuid() == 0
            ? ("runuser", ["-u", "postgres", "--", binDirectory + "/" + tool] + arguments)
            : (binDirectory + "/" + tool, arguments)
    }

    private let postmaster = NIOLockedValueBox<RunningChild?>(nil)

    /// Starts the server and waits until it accepts connections.
    func start() async throws {
        let (program, arguments) = Self.command(
            binDirectory, "postgres",
            ["-D", data, "-p", String(port), "-k", data, "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"])
        let process = try await RunningChild(program, arguments)
        postmaster.withLockedValue { $0 = process }
        for _ in 0..<600 {
            let ready = try await Child.run(binDirectory + "/pg_isready", ["-h", "127.0.0.1", "-p", String(port), "-q"])
            if ready.status == 0 { return }
            guard process.isRunning else { throw TestSetupError("postgres exited at start: \(process.stderr)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestSetupError("postgres did not start within 30 s")
    }

    /// Stops the server: `immediate` is a crash (SIGQUIT: no checkpoint; recovery replays the log on start),
    /// else a fast shutdown (SIGINT).
    func stop(immediate: Bool = false) {
        // The launched process may be runuser, which passes no signal on: signal the postmaster itself.
        if let text = try? String(contentsOfFile: data + "/postmaster.pid", encoding: .utf8),
            let line = text.split(separator: "\n").first, let pid = pid_t(line)
        {
            kill(pid, immediate ? SIGQUIT : SIGINT)
            // Wait for the postmaster itself (runuser may outlive it), then for the file it leaves behind.
            for _ in 0..<600 where kill(pid, 0) == 0 { usleep(50_000) }
        }
        postmaster.withLockedValue { process in
            process?.signal(SIGKILL)
            process = nil
        }
    }

    /// Creates a database; its URL.
    func createDatabase(_ name: String) async throws -> String {
        let server = TestPostgres.Server(
            host: "127.0.0.1", port: port, user: "postgres", password: nil, adminDatabase: "postgres", external: false)
        try await server.execute("CREATE DATABASE \(name)")
        return "postgres://postgres@127.0.0.1:\(port)/\(name)?sslmode=disable"
    }

    /// The rows `sql` reads from `database`, one line each, columns separated by `|` (psql's unaligned output);
    /// for a failing test's diagnosis.
    func rows(_ sql: String, database: String) async throws -> String {
        let (program, arguments) = Self.command(
            binDirectory, "psql", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "-d", database, "-At", "-c", sql])
        // In the root folder: psql run as `postgres` may not enter the test's own.
        return try await Child.run(program, arguments, in: URL(fileURLWithPath: "/")).output
    }

    /// Stops the server if it runs and deletes the cluster.
    func remove() {
        stop(immediate: true)
        try? FileManager.default.removeItem(at: root)
    }
}
