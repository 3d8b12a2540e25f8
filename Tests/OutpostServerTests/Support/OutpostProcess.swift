import Foundation
import OutpostApps
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

    /// This process's environment less its `OUTPOST_` variables, with `environment` over it.
    static func environment(_ environment: [String: String]) -> [String: String] {
        ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("OUTPOST_") }.merging(environment) { $1 }
    }

    /// How long one command may run before it is killed with its children: far beyond any command's own
    /// bounds, so that a command that hangs fails its test with its output instead of holding up the run.
    static let limit = 300

    /// Runs `outpost arguments…` to completion.
    ///
    /// - Parameter clock: an offset such as `+48h` or `-3h` for the device's wall clock (see ``FakeTime``).
    static func run(_ arguments: [String], environment: [String: String] = [:], clock offset: String? = nil) async throws -> Output {
        var command = [executable.path] + arguments
        var environment = environment
        if let offset {
            command = try FakeTime.command(offset) + command
            environment.merge(try await FakeTime.environment()) { $1 }
        }
        // coreutils' timeout runs the command in a process group of its own and kills the whole group.
        let ran = try await Child.run(
            "timeout", ["--signal=KILL", String(limit)] + command, environment: Self.environment(environment))
        var output = Output(status: ran.status, stdout: ran.stdout, stderr: ran.stderr)
        if output.status == 137 { output.stderr += "[test: `outpost \(arguments.joined(separator: " "))` killed after \(limit) s]\n" }
        return output
    }

    /// Starts a long-running `outpost arguments…`, whose output is collected as it arrives.
    static func start(_ arguments: [String], environment: [String: String] = [:]) async throws -> RunningChild {
        try await RunningChild(executable.path, arguments, environment: Self.environment(environment))
    }
}

extension RunningChild {
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
            guard isRunning else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestSetupError("no '\(pattern)' from the child; stdout: \(stdout) stderr: \(stderr)")
    }
}

extension Thread {
    /// Runs blocking `work` on a new thread and awaits its result: a test's blocking call never holds one of
    /// the few threads the other tests' tasks run on (two on a 2-core machine).
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
        let local = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
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
