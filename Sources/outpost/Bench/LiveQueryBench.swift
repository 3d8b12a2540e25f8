import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol

/// A list of 2,000 check-ins on screen (a live query of the store) while the device works: the process's CPU
/// time per commit that the list costs, for a scan (a commit in the list's collection) and for a commit
/// elsewhere, with the list kept by ``LocalStore/observeRecords(_:collection:scope:checkingOtherProcessesEvery:clock:)``
/// beside the same list re-read whole on every commit, in one run.
///
/// Each commit is followed by a pause in which the list catches up; the CPU of the commit and its pause with no
/// list open is taken away, so that what remains is the list's.
struct LiveQueryBench {
    var directory: URL
    var listed = 2000
    var commits = 40
    var progress: (String) -> Void

    /// How long the list is given to catch up after each commit, on the real clock.
    static let pause = Duration.milliseconds(40)

    enum Kind: String, CaseIterable {
        case none = "no list"
        case incremental = "observeRecords"
        case whole = "whole re-read"
    }

    func run() async throws -> [BenchResult] {
        let url = directory.appendingPathComponent("live.sqlite")
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        try await store.fill(count: listed, collection: "checkins") { position in
            (
                String(format: "g%06d", position),
                [
                    "guest_id": .string(String(format: "g%06d", position)), "scanned_by": "door-1",
                    "scanned_at": .string(Timestamp(Date()).iso8601), "name": .string("Guest \(position)"),
                ]
            )
        }
        progress("live-query: \(listed) check-ins listed, \(commits) commits of each kind per list")
        var cpu: [String: Samples] = [:]
        var latency: [Kind: Samples] = [:]
        var written = 0
        // The kinds in turn, several rounds, so that drift in the machine hits each alike.
        for _ in 0..<3 {
            for kind in Kind.allCases {
                let (values, valueArrived) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .unbounded)
                let list: Task<Void, Never>? =
                    kind == .none
                    ? nil
                    : Task {
                        let stream =
                            kind == .incremental
                            ? store.observeRecords(collection: "checkins", checkingOtherProcessesEvery: .seconds(3600))
                            : store.observe(checkingOtherProcessesEvery: .seconds(3600)) { store in
                                try await store.records(collection: "checkins")
                            }
                        do {
                            for try await _ in stream { valueArrived.yield() }
                        } catch {}
                    }
                var arrivals = values.makeAsyncIterator()
                if list != nil { _ = await arrivals.next() }
                for round in 0..<commits {
                    let scan = round.isMultiple(of: 2)
                    written += 1
                    let write =
                        scan
                        ? LocalStore.Write(
                            collection: "checkins", recordId: "scan-\(written)",
                            fields: ["guest_id": .string("scan-\(written)"), "scanned_by": "door-1"])
                        : LocalStore.Write(collection: "notes", recordId: "note-\(written)", fields: ["text": "elsewhere"])
                    let before = RosterBench.processCPUMilliseconds()
                    let started = ContinuousClock.now
                    _ = try await store.write(write, deviceId: "bench", at: Date(), offline: true)
                    if scan, list != nil {
                        _ = await arrivals.next()
                        latency[kind, default: Samples()].add(ContinuousClock.now - started)
                    }
                    try await Task.sleep(for: Self.pause)
                    cpu["\(kind.rawValue) \(scan ? "scan" : "elsewhere")", default: Samples()].add(
                        milliseconds: RosterBench.processCPUMilliseconds() - before)
                }
                list?.cancel()
                await list?.value
            }
        }
        func listCost(_ kind: Kind, _ commit: String) -> Double {
            max(0, (cpu["\(kind.rawValue) \(commit)"]?.percentile(50) ?? 0) - (cpu["\(Kind.none.rawValue) \(commit)"]?.percentile(50) ?? 0))
        }
        let scanIncremental = listCost(.incremental, "scan")
        let scanWhole = listCost(.whole, "scan")
        let elsewhereIncremental = listCost(.incremental, "elsewhere")
        let elsewhereWhole = listCost(.whole, "elsewhere")
        progress(
            String(
                format:
                    "live-query: list CPU per scan %.3f ms (whole re-read %.3f ms); per commit elsewhere %.3f ms (%.3f ms); new value p50 %.3f ms (%.3f ms)",
                scanIncremental, scanWhole, elsewhereIncremental, elsewhereWhole, latency[.incremental]?.percentile(50) ?? 0,
                latency[.whole]?.percentile(50) ?? 0))
        return [
            BenchResult(
                name: "live list of \(listed): CPU per scan / whole re-read", figure: scanWhole > 0 ? scanIncremental / scanWhole : 0,
                unit: "×", target: "≤ 0.25×", met: scanIncremental <= 0.25 * scanWhole),
            BenchResult(name: "live list: CPU per scan", figure: scanIncremental, unit: "ms", target: "reported", met: true),
            BenchResult(name: "live list: CPU per commit elsewhere", figure: elsewhereIncremental, unit: "ms", target: "reported", met: true),
            BenchResult(
                name: "live list: new value after a scan, p50", figure: latency[.incremental]?.percentile(50) ?? 0, unit: "ms",
                target: "reported", met: true),
        ]
    }
}
