import Foundation
import OutpostServer
import OutpostTesting

/// How long a save command takes, from its start, to say the record is durable when the server takes connections
/// and never answers (a captive portal, one bar in a basement): `outpost device put` run as a person runs it, each
/// run a new process, timed to its first line, which it prints once the record is committed.
struct SilentSaveBench {
    var directory: URL
    var runs: Int
    var progress: (String) -> Void

    func run() async throws -> [BenchResult] {
        let silent = try SilentPort()
        let store = directory.appendingPathComponent("silent-device.sqlite").path
        let authority = try await TokenAuthority(secret: Array("silent-save-bench-secret-of-32-bytes!".utf8))
        let token = try await authority.token(
            for: Identity(tenant: "bench", userId: "ana", role: .staff, name: "ana"), lifetime: .seconds(3600), now: Date())
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        _ = try Self.time(
            executable,
            ["device", "init", "--server", "http://127.0.0.1:\(silent.port)", "--token", token, "--device-id", "bench", "--store", store])
        progress("silent-save: \(runs) saves, each a new `outpost device put`, against a server that never answers…")
        var firstLines = Samples()
        var whole = Samples()
        for run in 0..<runs {
            let timing = try Self.time(executable, ["device", "put", "notes", "n\(run)", "v=\(run)", "--store", store])
            firstLines.add(timing.firstLine)
            whole.add(timing.exit)
        }
        // The port stays silent, not closed, until every run has ended.
        withExtendedLifetime(silent) {}
        progress(
            String(
                format: "silent-save: command start to durable write p50 %.1f ms p99 %.1f ms; whole command p50 %.0f ms (%d runs)",
                firstLines.percentile(50), firstLines.percentile(99), whole.percentile(50), runs))
        return [
            BenchResult(
                name: "silent-save: command start to durable write p50", figure: firstLines.percentile(50), unit: "ms", target: "< 200 ms",
                met: firstLines.percentile(50) < 200),
            BenchResult(
                name: "silent-save: command start to durable write p99", figure: firstLines.percentile(99), unit: "ms", target: "< 400 ms",
                met: firstLines.percentile(99) < 400),
        ]
    }

    struct Timing {
        var firstLine: Duration
        var exit: Duration
    }

    /// Runs `executable arguments…` to its end: how long until its first line, and until it exited.
    static func time(_ executable: URL, _ arguments: [String]) throws -> Timing {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        let clock = ContinuousClock()
        let start = clock.now
        try process.run()
        var firstLine: Duration?
        var seen = Data()
        while firstLine == nil {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            seen.append(chunk)
            if seen.contains(UInt8(ascii: "\n")) { firstLine = clock.now - start }
        }
        _ = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let exit = clock.now - start
        guard process.terminationStatus == 0, let firstLine else {
            throw CLIError("`outpost \(arguments.prefix(2).joined(separator: " "))` failed in the silent-save bench")
        }
        return Timing(firstLine: firstLine, exit: exit)
    }
}
