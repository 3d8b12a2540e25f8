import AsyncHTTPClient
import Foundation
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostServer

/// `outpost bench load`: many simulated devices push and pull against a real server for a while. Every
/// request must succeed, and every applied write must be on the server exactly once at the end.
extension SyncBench {
    /// What one simulated device did.
    private struct DeviceLoad: Sendable {
        var latencies: [Double] = []
        var requests = 0
        var failed = 0
        var applied = 0
        var firstError: String?
    }

    func load(devices: Int, duration: Duration, interval: Duration) async throws -> [BenchResult] {
        try await withServer { base, token, _, pid in
            let client = Self.clientWithConnections(devices)
            defer { _ = client.shutdown() }
            let tokens = try await (0..<20).asyncMap { try await token("staff\($0)", .staff) }
            progress("load (\(engine)): \(devices) devices pushing and pulling for \(duration), one round per \(interval) each…")
            let sampler = Self.peakMemory(of: pid)
            let clock = ContinuousClock()
            let started = clock.now
            let deadline = started.advanced(by: duration)
            let loads = try await withThrowingTaskGroup(of: DeviceLoad.self) { group in
                for index in 0..<devices {
                    let transport = HTTPSyncTransport(
                        baseURL: base, token: tokens[index % tokens.count], client: client, timeout: .seconds(120))
                    group.addTask {
                        try await Self.simulate(
                            device: index, transport: transport, clock: clock, deadline: deadline, interval: interval,
                            offset: interval * (Double(index) / Double(devices)))
                    }
                }
                return try await group.reduce(into: [DeviceLoad]()) { $0.append($1) }
            }
            let elapsed = clock.now - started
            sampler.cancel()
            let peak = Double(await sampler.value) / 1024

            // Every applied write is on the server, once.
            let reader = HTTPSyncTransport(baseURL: base, token: tokens[0], client: client, timeout: .seconds(120))
            var present = Set<String>()
            var rows = 0
            var cursor: String?
            repeat {
                let page = try await reader.pull(collection: "notes", scope: nil, cursor: cursor, limit: 5000)
                rows += page.changes.count
                present.formUnion(page.changes.map(\.recordId))
                cursor = page.cursor
                if !page.hasMore { break }
            } while true

            var latencies = Samples()
            for load in loads { for value in load.latencies { latencies.add(milliseconds: value) } }
            let requests = loads.reduce(0) { $0 + $1.requests }
            let failed = loads.reduce(0) { $0 + $1.failed }
            let applied = loads.reduce(0) { $0 + $1.applied }
            if let error = loads.lazy.compactMap(\.firstError).first { progress("load (\(engine)): first failure: \(error)") }
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let label = "\(devices) devices, \(Int(seconds)) s (\(engine))"
            return [
                BenchResult(
                    name: "load, \(label): failed requests of \(requests)", figure: Double(failed), unit: "failed",
                    target: "0", met: failed == 0),
                BenchResult(
                    name: "load, \(label): writes on the server once, of \(applied) applied", figure: Double(present.count),
                    unit: "records", target: "= \(applied), no duplicates", met: present.count == applied && rows == applied),
                BenchResult(
                    name: "load, \(label): request latency p50", figure: latencies.percentile(50), unit: "ms",
                    target: "reported", met: true),
                BenchResult(
                    name: "load, \(label): request latency p99", figure: latencies.percentile(99), unit: "ms",
                    target: "reported", met: true),
                BenchResult(
                    name: "load, \(label): throughput", figure: Double(requests) / seconds, unit: "requests/s",
                    target: "reported", met: true),
                BenchResult(
                    name: "load, \(label): server memory (peak)", figure: peak, unit: "MB RSS", target: "≤ 100 MB",
                    met: peak <= 100),
            ]
        }
    }

    /// One device: a push of 10 new notes and a pull from its cursor, every `interval`, until `deadline`.
    private static func simulate(
        device index: Int, transport: HTTPSyncTransport, clock: ContinuousClock, deadline: ContinuousClock.Instant,
        interval: Duration, offset: Duration
    ) async throws -> DeviceLoad {
        var load = DeviceLoad()
        var cursor: String?
        var round = 0
        var next = clock.now.advanced(by: offset)
        func record(_ error: any Error) {
            load.failed += 1
            if load.firstError == nil { load.firstError = "\(error)" }
        }
        while true {
            try await clock.sleep(until: next)
            guard clock.now < deadline else { break }
            next = next.advanced(by: interval)
            let time = Timestamp(Date())
            let mutations = (0..<10).map { n in
                Mutation(
                    idempotencyKey: "load-\(index)-\(round)-\(n)", collection: "notes", recordId: "d\(index)-r\(round)-\(n)",
                    op: .upsert, fields: ["text": .string("round \(round)"), "n": .integer(Int64(n))], clientTimestamp: time)
            }
            var started = clock.now
            do {
                let response = try await transport.push(PushRequest(deviceId: "load-\(index)", mutations: mutations))
                load.latencies.append((clock.now - started).inMilliseconds)
                load.applied += response.results.filter { $0.status == .applied }.count
                if response.results.contains(where: { $0.status != .applied }) {
                    record(CLIError("a push was not applied whole"))
                }
            } catch {
                record(error)
            }
            started = clock.now
            do {
                let page = try await transport.pull(collection: "notes", scope: nil, cursor: cursor, limit: 100)
                load.latencies.append((clock.now - started).inMilliseconds)
                cursor = page.cursor
            } catch {
                record(error)
            }
            load.requests += 2
            round += 1
        }
        return load
    }
}
