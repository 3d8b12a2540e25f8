import ArgumentParser
import Foundation

/// `outpost bench …`: measures Outpost's performance targets. Run it in release:
/// `swift run -c release outpost bench`.
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure performance targets (build with -c release for real figures).",
        discussion: "Scenarios: \(BenchScenario.allCases.map(\.rawValue).joined(separator: ", ")). With none, all run.")

    @Argument(help: "Scenarios to run.")
    var scenarios: [BenchScenario] = []

    @Option(help: "Records already in the store before measuring local writes.")
    var records: Int = 100_000

    @Option(help: "Guests in the roster scenarios.")
    var guests: Int = 100_000

    @Option(help: "Measured samples per figure.")
    var samples: Int = 2000

    @Option(help: "Folder to measure in (the disk under test); default: a temporary folder.")
    var dir: String?

    @Flag(help: "Print one JSON document instead of lines.")
    var json = false

    @Option(name: .customLong("database-url"), help: "Also run the server scenarios on this PostgreSQL database.")
    var databaseURL: String?

    @Option(help: "Simulated devices in the load scenario.")
    var devices: Int = 1000

    @Option(help: "Seconds the load scenario runs.")
    var seconds: Int = 60

    @Option(help: "Megabytes of records the export scenario stores and exports.")
    var megabytes: Int = 100

    @Option(help: "Seconds between one device's rounds (a push and a pull) in the load scenario.")
    var interval: Double = 1

    @Option(help: "Megabytes of the large file the attachments scenario uploads (its small one is a tenth).")
    var fileMegabytes: Int = 200

    func validate() throws {
        guard records >= 0 else { throw ValidationError("--records must not be negative") }
        guard samples >= 10 else { throw ValidationError("--samples must be at least 10") }
        // The roster scenario's refreshes each change and cancel guests of their own.
        if scenarios.isEmpty || scenarios.contains(.roster), guests < RosterBench.minimumGuests {
            throw ValidationError("--guests must be at least \(RosterBench.minimumGuests)")
        }
        guard (1...10_000).contains(megabytes) else { throw ValidationError("--megabytes must be from 1 to 10000") }
        guard (10...250).contains(fileMegabytes) else { throw ValidationError("--file-megabytes must be from 10 to 250") }
        guard devices >= 1, seconds >= 1, interval > 0, interval <= 3600 else {
            throw ValidationError("--devices and --seconds must be at least 1, and --interval from 0 to 3600 seconds")
        }
    }

    func run() async throws {
        #if DEBUG
            if !json { say("note: this is a debug build; figures are only meaningful with -c release") }
        #endif
        let base = URL(fileURLWithPath: dir ?? FileManager.default.temporaryDirectory.path)
            .appendingPathComponent("outpost-bench-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: base) }
        var results: [BenchResult] = []
        for scenario in scenarios.isEmpty ? BenchScenario.allCases : scenarios {
            switch scenario {
            case .roster:
                results += try await RosterBench(directory: base, guests: guests) { line in
                    if !json { say(line) }
                }.run()
            case .localWrite:
                results += try await LocalWriteBench(directory: base, records: records, samples: samples) { line in
                    if !json { say(line) }
                }.run()
            case .liveQuery:
                results += try await LiveQueryBench(directory: base, commits: min(samples, 40)) { line in
                    if !json { say(line) }
                }.run()
            case .silentSave:
                results += try await SilentSaveBench(directory: base, runs: min(samples, 50)) { line in
                    if !json { say(line) }
                }.run()
            case .drain, .devices, .monitor, .failures, .memory, .load, .connector, .export, .relay, .attachments:
                for database in [nil] + (databaseURL.map { [$0] } ?? []) {
                    let bench = SyncBench(directory: base, databaseURL: database) { line in if !json { say(line) } }
                    do {
                        switch scenario {
                        case .drain: results += try await bench.drain()
                        case .devices: results += try await bench.devices()
                        case .monitor: results += try await bench.monitor()
                        case .failures: results += try await bench.failures()
                        case .connector: results += try await bench.connector()
                        case .export: results += try await bench.export(megabytes: megabytes)
                        case .relay: results += try await bench.relay()
                        case .attachments: results += try await bench.attachments(megabytes: fileMegabytes)
                        case .load:
                            results += try await bench.load(
                                devices: devices, duration: .seconds(seconds), interval: .milliseconds(Int64(interval * 1000)))
                        default: results += try await bench.memory()
                        }
                    } catch {
                        // One scenario's failure is reported as a missed target; the others still run.
                        results.append(
                            BenchResult(
                                name: "\(scenario.rawValue) (\(bench.engine)) did not complete: \(error)", figure: 0, unit: "",
                                target: "completes", met: false))
                    }
                }
            }
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            say(String(decoding: try encoder.encode(results), as: UTF8.self))
        } else {
            for result in results { say(result.line) }
        }
        if results.contains(where: { !$0.met }) { throw ExitCode(1) }
    }
}

enum BenchScenario: String, CaseIterable, ExpressibleByArgument {
    case localWrite = "local-write"
    case silentSave = "silent-save"
    case liveQuery = "live-query"
    case drain
    case devices
    case roster
    case monitor
    case failures
    case memory
    case load
    case connector
    case export
    case relay
    case attachments
}

/// One figure beside its target.
struct BenchResult: Codable, Sendable {
    var name: String
    var figure: Double
    var unit: String
    var target: String
    var met: Bool

    var line: String {
        "\(met ? "✓" : "✗") \(name): \(String(format: "%.3f", figure)) \(unit) (target \(target))"
    }
}

/// Latency samples, in milliseconds.
struct Samples {
    private(set) var values: [Double] = []

    mutating func add(_ duration: Duration) {
        values.append(duration.inMilliseconds)
    }

    mutating func add(milliseconds: Double) {
        values.append(milliseconds)
    }

    func percentile(_ p: Double) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        let index = min(sorted.count - 1, max(0, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))
        return sorted[index]
    }
}

extension Duration {
    var inMilliseconds: Double {
        Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15
    }
}
