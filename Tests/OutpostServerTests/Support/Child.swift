import Foundation
import NIOConcurrencyHelpers
import Subprocess
import SystemPackage

#if canImport(Glibc)
    import Glibc
#endif

/// The tests' child processes, launched by swift-subprocess (`posix_spawn` with the parent's other descriptors
/// closed), never by Foundation's `Process`, whose `run()` on Linux can crash the whole test process while it
/// reads `/proc/self/fd` (swiftlang/swift-corelibs-foundation#5472).
enum Child {
    /// How a child ended, and what it printed.
    struct Output: Sendable {
        /// The exit code; 128 + the signal's number when a signal ended it, as a shell reports it.
        var status: Int32
        var stdout: String
        var stderr: String
        /// Both streams, standard output first.
        var output: String { stdout + stderr }
    }

    /// More than any child of a test prints; beyond it the run fails rather than holding the output in memory.
    static let outputLimit = 64 << 20

    /// Runs `program` to completion. `environment` replaces this process's environment when given.
    ///
    /// Throws ``LaunchError`` when `program` cannot be found or started; a child that starts and fails is an
    /// ``Output`` with its status.
    static func run(
        _ program: String, _ arguments: [String], environment: [String: String]? = nil, input: Data? = nil,
        in directory: URL? = nil
    ) async throws -> Output {
        _ = ignoreBrokenPipes
        let configuration = try configuration(program, arguments, environment: environment, in: directory)
        let bytes = Array(input ?? Data())
        // The input goes through a writer that `run` always finishes: swift-subprocess 1.0.2 traps, ending the whole
        // test process, when a child ends before reading all of an `.array` input (swiftlang/swift-subprocess#367).
        let result = try await Subprocess.run(
            configuration, input: .inputWriter, output: .bytes(limit: outputLimit), error: .bytes(limit: outputLimit)
        ) { execution in
            // A child may end without reading its input (`env` exits 127 at once for a missing tool): the write then
            // fails, which is no failure of the run; the child's status and output tell what happened.
            if !bytes.isEmpty { _ = try? await execution.standardInputWriter.write(bytes) }
            try await execution.standardInputWriter.finish()
        }
        return Output(
            status: status(result.terminationStatus),
            stdout: String(decoding: result.standardOutput, as: UTF8.self),
            stderr: String(decoding: result.standardError, as: UTF8.self))
    }

    /// Why a child could not be started.
    struct LaunchError: Error, CustomStringConvertible {
        var description: String
    }

    /// `ownGroup` starts the child as the leader of a new process group, which a signal to the group ends
    /// with everything it started.
    static func configuration(
        _ program: String, _ arguments: [String], environment: [String: String]?, in directory: URL?, ownGroup: Bool = false
    ) throws -> Configuration {
        guard let executable = path(of: program) else {
            throw LaunchError(description: "cannot start \(program): no such executable on PATH")
        }
        var options = PlatformOptions()
        if ownGroup { options.processGroupID = 0 }
        return Configuration(
            executable: .path(FilePath(executable)), arguments: Arguments(arguments),
            environment: environment.map { .custom(Dictionary(uniqueKeysWithValues: $0.map { (Environment.Key(stringLiteral: $0.key), $0.value) })) }
                ?? .inherit,
            workingDirectory: directory.map { FilePath($0.path) }, platformOptions: options)
    }

    static func status(_ termination: TerminationStatus) -> Int32 {
        switch termination {
        case .exited(let code): code
        case .signaled(let signal): 128 + signal
        }
    }

    /// The full path of the executable `program`, found on `PATH` as a shell would; nil when there is none.
    static func path(of program: String) -> String? {
        if program.contains("/") { return FileManager.default.isExecutableFile(atPath: program) ? program : nil }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(directory)/\(program)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// A child that exits before reading all its input must fail the write, not end the test process.
    static let ignoreBrokenPipes: Void = { _ = signal(SIGPIPE, SIG_IGN) }()
}

/// A long-running child whose output is collected as it arrives, and which a test signals and waits for.
///
/// It leads a process group of its own: what it leaves running there is killed when it ends, and
/// ``OrphanReaper/shared`` kills the whole group if the test process ends, however it ends, while the child runs.
final class RunningChild: Sendable {
    let processIdentifier: pid_t
    private let state: NIOLockedValueBox<State>
    private let lines: AsyncStream<String>.Continuation
    private let ended: Task<Int32, Never>

    private struct State {
        var stdout: [UInt8] = []
        var stderr: [UInt8] = []
        var status: Int32?
        /// The child's process group, registered with the reaper while the child runs.
        var group: pid_t?
    }

    /// Kills what the child left running in its group once it has ended, and withdraws the group from the reaper.
    private static func endGroup(of state: NIOLockedValueBox<State>) {
        guard let group = state.withLockedValue({ $0.group }) else { return }
        kill(-group, SIGKILL)
        OrphanReaper.shared.forget(group)
    }

    /// Starts `program`; ``send(_:)`` writes to its standard input.
    init(_ program: String, _ arguments: [String], environment: [String: String]? = nil) async throws {
        _ = Child.ignoreBrokenPipes
        let configuration = try Child.configuration(program, arguments, environment: environment, in: nil, ownGroup: true)
        let state = NIOLockedValueBox(State())
        let (lineStream, lines) = AsyncStream<String>.makeStream()
        let started = Started()
        let ended = Task<Int32, Never> {
            do {
                let result = try await Subprocess.run(
                    configuration, input: .inputWriter, output: .sequence, error: .sequence
                ) { execution in
                    let group = execution.processIdentifier.value
                    state.withLockedValue { $0.group = group }
                    OrphanReaper.shared.watch(group)
                    started.resume(.success(execution.processIdentifier.value))
                    try await withThrowingTaskGroup(of: Void.self) { input in
                        input.addTask {
                            for await line in lineStream { _ = try await execution.standardInputWriter.write(line) }
                            try await execution.standardInputWriter.finish()
                        }
                        // The output streams end with the child; then its input is of no use.
                        try await withThrowingTaskGroup(of: Void.self) { outputs in
                            outputs.addTask {
                                for try await chunk in execution.standardOutput {
                                    chunk.withUnsafeBytes { bytes in state.withLockedValue { $0.stdout += bytes } }
                                }
                            }
                            outputs.addTask {
                                for try await chunk in execution.standardError {
                                    chunk.withUnsafeBytes { bytes in state.withLockedValue { $0.stderr += bytes } }
                                }
                            }
                            try await outputs.waitForAll()
                        }
                        lines.finish()
                        // A write to a child that has ended fails; that is no failure of the child's.
                        try? await input.waitForAll()
                    }
                }
                let status = Child.status(result.terminationStatus)
                Self.endGroup(of: state)
                state.withLockedValue { $0.status = status }
                return status
            } catch {
                started.resume(.failure(error))
                Self.endGroup(of: state)
                state.withLockedValue {
                    $0.stderr += Array("[test: \(error)]".utf8); $0.status = -1
                }
                return -1
            }
        }
        self.state = state
        self.lines = lines
        self.ended = ended
        processIdentifier = try await started.value
    }

    var stdout: String { state.withLockedValue { String(decoding: $0.stdout, as: UTF8.self) } }
    var stderr: String { state.withLockedValue { String(decoding: $0.stderr, as: UTF8.self) } }
    var isRunning: Bool { state.withLockedValue { $0.status == nil } }

    /// Writes `text` to the child's standard input; nothing if it has ended.
    func send(_ text: String) { lines.yield(text) }

    /// Sends `signal` if the child still runs; nothing else.
    func signal(_ signal: Int32) {
        if isRunning { kill(processIdentifier, signal) }
    }

    /// Waits for the child to end; its status as ``Child/Output/status`` gives it.
    func wait() async -> Int32 { await ended.value }

    /// Sends `signal` and waits for the exit status.
    func stop(_ signal: Int32 = SIGTERM) async -> Int32 {
        self.signal(signal)
        return await wait()
    }

    deinit {
        lines.finish()
        if state.withLockedValue({ $0.status == nil }) { kill(-processIdentifier, SIGKILL) }
    }

    /// The child's pid, or why it could not start; resumed once.
    private final class Started: Sendable {
        private let continuation = NIOLockedValueBox<(CheckedContinuation<pid_t, any Error>?, Result<pid_t, any Error>?)>((nil, nil))

        func resume(_ result: Result<pid_t, any Error>) {
            let waiting: CheckedContinuation<pid_t, any Error>? = continuation.withLockedValue { state in
                guard state.1 == nil else { return nil }
                state.1 = result
                let waiting = state.0
                state.0 = nil
                return waiting
            }
            waiting?.resume(with: result)
        }

        var value: pid_t {
            get async throws {
                try await withCheckedThrowingContinuation { waiting in
                    let result: Result<pid_t, any Error>? = continuation.withLockedValue {
                        if let result = $0.1 { return result }
                        $0.0 = waiting
                        return nil
                    }
                    if let result { waiting.resume(with: result) }
                }
            }
        }
    }
}

/// A shell that outlives the test process to kill the process groups it left running.
///
/// The test process registers each long-running child's group on a pipe whose only writer it holds, and withdraws
/// the group once the child has ended. When the pipe closes, whether the test process exited, crashed or was
/// killed, the shell kills every group still registered: no server, database or browser a test started keeps
/// running without a test to stop it. The shell ignores the signals a terminal sends to the test process's group.
final class OrphanReaper: Sendable {
    /// The reaper of this test process, started on first use.
    static let shared: OrphanReaper = {
        do { return try OrphanReaper() } catch { fatalError("cannot start the orphan reaper: \(error)") }
    }()

    private static let script = """
        trap '' HUP INT TERM
        live=' '
        while IFS= read -r line; do
          case $line in
            +*) live="$live${line#+} " ;;
            -*) kept=' '; gone=''
                for group in $live; do
                  if [ -z "$gone" ] && [ "$group" = "${line#-}" ]; then gone=1; else kept="$kept$group "; fi
                done
                live=$kept ;;
          esac
        done
        for group in $live; do kill -9 "-$group" 2>/dev/null; done
        """

    private let writer: NIOLockedValueBox<Int32?>
    private let ended: Task<Int32, any Error>

    init() throws {
        _ = Child.ignoreBrokenPipes
        let (reader, write) = try FileDescriptor.pipe()
        // Only this process may hold the writing end, or the pipe would outlive it.
        _ = fcntl(write.rawValue, F_SETFD, FD_CLOEXEC)
        writer = NIOLockedValueBox(write.rawValue)
        let configuration = try Child.configuration("/bin/sh", ["-c", Self.script], environment: nil, in: nil, ownGroup: true)
        ended = Task.detached {
            let result = try await Subprocess.run(
                configuration, input: .fileDescriptor(reader, closeAfterSpawningProcess: true), output: .discarded,
                error: .discarded)
            return Child.status(result.terminationStatus)
        }
    }

    /// Registers the process group `group`, to be killed if the pipe closes before ``forget(_:)``.
    func watch(_ group: pid_t) { send("+\(group)\n") }

    /// Withdraws `group`, whose leader has ended.
    func forget(_ group: pid_t) { send("-\(group)\n") }

    /// Closes the pipe, as the test process's end would, and waits for the shell to kill what is registered and
    /// exit; its exit status.
    func close() async throws -> Int32 {
        writer.withLockedValue { writer in
            if let open = writer { Glibc.close(open) }
            writer = nil
        }
        return try await ended.value
    }

    /// One line is shorter than `PIPE_BUF`, so it is written whole or not at all.
    private func send(_ line: String) {
        writer.withLockedValue { writer in
            guard let writer else { return }
            var bytes = Array(line.utf8)
            _ = Glibc.write(writer, &bytes, bytes.count)
        }
    }
}
