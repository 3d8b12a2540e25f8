import Foundation
import OutpostClient
import Testing

/// The built `outpost` executable, run as a real process.
struct OutpostProcess {
    /// `outpost` sits beside the test bundle in the build folder.
    static var executable: URL {
        let runner = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var directory = runner.deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("outpost")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return runner.deletingLastPathComponent().appendingPathComponent("outpost")
    }

    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// A process for `outpost arguments…`, with this process's environment less its `OUTPOST_` variables.
    static func process(_ arguments: [String], environment: [String: String]) -> Process {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("OUTPOST_") }
            .merging(environment) { $1 }
        return process
    }

    /// How long one command may run before it is killed with its children: far beyond any command's own
    /// bounds, so that a command that hangs fails its test with its output instead of holding up the run.
    static let limit = 300

    /// Runs `outpost arguments…` to completion, on a thread of its own: a test waiting for a process never
    /// holds one of the few threads the other tests' tasks need (there are two on a two-core machine).
    ///
    /// - Parameter clock: an offset such as `+48h` or `-3h` for the device's wall clock (see ``FakeTime``).
    static func run(_ arguments: [String], environment: [String: String] = [:], clock offset: String? = nil) async throws -> Output {
        try await Thread.blocking { try runBlocking(arguments, environment: environment, clock: offset) }
    }

    private static func runBlocking(_ arguments: [String], environment: [String: String], clock offset: String?) throws -> Output {
        var command = [executable.path] + arguments
        var environment = environment
        if let offset {
            command = try FakeTime.command(offset) + command
            environment.merge(try FakeTime.environment()) { $1 }
        }
        // coreutils' timeout runs the command in a process group of its own and kills the whole group.
        let process = process([], environment: environment)
        process.executableURL = URL(fileURLWithPath: Shell.resolve("timeout"))
        process.arguments = ["--signal=KILL", String(limit)] + command
        let out = try ChildPipe()
        let err = try ChildPipe()
        process.standardOutput = out.writing
        process.standardError = err.writing
        try process.run()
        out.closeChildEnd()
        err.closeChildEnd()
        let stdout = out.reading.readDataToEndOfFile()
        let stderr = err.reading.readDataToEndOfFile()
        process.waitUntilExit()
        var output = Output(
            status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self),
            stderr: String(decoding: stderr, as: UTF8.self))
        if output.status == 137 { output.stderr += "[test: `outpost \(arguments.joined(separator: " "))` killed after \(limit) s]\n" }
        return output
    }

    /// A long-running `outpost` process whose output is collected as it arrives.
    final class Running: @unchecked Sendable {
        let process: Process
        private let lock = NSLock()
        private var stdoutText = ""
        private var stderrText = ""
        /// Kept while the process runs: their reading ends feed the handlers.
        private var pipes: [ChildPipe] = []

        init(_ arguments: [String], environment: [String: String] = [:]) throws {
            process = OutpostProcess.process(arguments, environment: environment)
            let out = try ChildPipe()
            let err = try ChildPipe()
            process.standardOutput = out.writing
            process.standardError = err.writing
            out.reading.readabilityHandler = { [weak self] handle in
                let data = handle.availableData
                self?.lock.withLock { self?.stdoutText += String(decoding: data, as: UTF8.self) }
            }
            err.reading.readabilityHandler = { [weak self] handle in
                let data = handle.availableData
                self?.lock.withLock { self?.stderrText += String(decoding: data, as: UTF8.self) }
            }
            try process.run()
            out.closeChildEnd()
            err.closeChildEnd()
            pipes = [out, err]
        }

        var stdout: String { lock.withLock { stdoutText } }
        var stderr: String { lock.withLock { stderrText } }

        /// Waits (up to `timeout`) for stdout to hold a match of `pattern`; its first capture group.
        func waitFor(_ pattern: String, timeout: Duration = .seconds(60)) async throws -> String {
            let regex = try NSRegularExpression(pattern: pattern)
            let deadline = ContinuousClock.now.advanced(by: timeout)
            while ContinuousClock.now < deadline {
                let text = stdout
                if let match = regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) {
                    let range = match.numberOfRanges > 1 ? match.range(at: 1) : match.range
                    return String(text[Range(range, in: text)!])
                }
                guard process.isRunning else { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            throw TestSetupError("no '\(pattern)' from outpost; stdout: \(stdout) stderr: \(stderr)")
        }

        /// Sends `signal` and waits, on a thread of its own, for the exit status (-1 if that wait failed).
        func stop(_ signal: Int32 = SIGTERM) async -> Int32 {
            if process.isRunning { kill(process.processIdentifier, signal) }
            return (try? await Thread.blocking { [self] in
                process.waitUntilExit()
                return process.terminationStatus
            }) ?? -1
        }

        deinit {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
    }
}

extension Thread {
    /// Runs blocking `work`, such as a child process and the wait for it, on a new thread and awaits its result.
    /// On the few threads that run every test's tasks (two on a 2-core machine), `initdb` or a `CREATE DATABASE`
    /// under load stalled every other test in the process for seconds, and their PostgreSQL operations ran past
    /// their 20 s bound.
    static func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
        }
    }
}

extension LocalStore {
    /// Queues `count` notes offline in the device store at `path`, ids `r0000`…; their ids in order.
    static func queueOfflineNotes(at path: String, deviceId: String, count: Int) async throws -> [String] {
        let url = URL(fileURLWithPath: path)
        let local = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url))
        var written: [String] = []
        for i in 0..<count {
            let id = String(format: "r%04d", i)
            try await local.write(
                LocalStore.Write(collection: "notes", recordId: id, fields: ["i": .integer(Int64(i))]),
                deviceId: deviceId, at: Date(), offline: true)
            written.append(id)
        }
        return written
    }
}
