import AsyncHTTPClient
import Foundation
import NIOCore
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostServer

extension SyncBench {
    /// The server's resident memory while a supervisor exports a collection of `megabytes` MB of fields (records
    /// of 200 KB, staff's own), over what it held before: one export, then two at once.
    func export(megabytes: Int = 100) async throws -> [BenchResult] {
        try await withServer { base, token, client, pid in
            let recordBytes = 200 * 1024
            let records = megabytes * 1024 * 1024 / recordBytes
            progress("export (\(engine)): storing \(records) records of 200 KB…")
            let staff = try await (0..<10).asyncMap { try await token("writer\($0)", .staff) }
            let text = String(repeating: "x", count: recordBytes - 100)
            for start in stride(from: 0, to: records, by: 20) {
                let now = Timestamp(Date())
                let mutations = (start..<min(start + 20, records)).map { index in
                    Mutation(
                        idempotencyKey: "export-\(index)", collection: "notes", recordId: "r\(index)", op: .upsert,
                        fields: ["text": .string(text), "n": .integer(Int64(index))], clientTimestamp: now)
                }
                let transport = HTTPSyncTransport(baseURL: base, token: staff[start / 20 % staff.count], client: client, timeout: .seconds(60))
                let answer = try await transport.push(PushRequest(deviceId: "writer\(start / 20 % staff.count)", mutations: mutations))
                guard answer.results.allSatisfy({ $0.status == .applied }) else { throw CLIError("a push of the export's records was not applied") }
            }
            let supervisor = try await token("sue", .supervisor)
            // Once before measuring, so that what any first request loads (code, caches) is in the baseline.
            _ = try await Self.download(base, supervisor: supervisor, client: client)
            var results: [BenchResult] = []
            for concurrent in [1, 2] {
                progress("export (\(engine)): \(concurrent) export(s) of \(megabytes) MB at once…")
                try await Task.sleep(for: .seconds(1))
                let baseline = Self.residentKilobytes(pid)
                let sampler = Self.peakMemory(of: pid)
                let started = ContinuousClock.now
                let sizes = try await (0..<concurrent).concurrentMap { _ in
                    try await Self.download(base, supervisor: supervisor, client: client)
                }
                let elapsed = ContinuousClock.now - started
                sampler.cancel()
                let rise = Double(max(0, await sampler.value - baseline)) / 1024
                guard sizes.allSatisfy({ $0 > records * text.utf8.count }) else {
                    throw CLIError("an export held \(sizes) bytes, less than the \(records * text.utf8.count) stored")
                }
                results.append(
                    BenchResult(
                        name: "server memory over its baseline, \(concurrent) export(s) of \(megabytes) MB at once (\(engine))",
                        figure: rise, unit: "MB RSS", target: "≤ 30 MB", met: rise <= 30))
                if concurrent == 1 {
                    results.append(
                        BenchResult(
                            name: "export of \(megabytes) MB (\(engine))", figure: elapsed.seconds, unit: "s", target: "reported",
                            met: true))
                }
            }
            return results
        }
    }

    /// A supervisor's `GET /v1/export` of notes, read as it arrives and let go: its size in bytes.
    private static func download(_ base: URL, supervisor: String, client: HTTPClient) async throws -> Int {
        var request = HTTPClientRequest(url: base.absoluteString + "/v1/export?collection=notes")
        request.headers.add(name: "Authorization", value: "Bearer \(supervisor)")
        let response = try await client.execute(request, timeout: .seconds(300))
        guard response.status.code == 200 else { throw CLIError("GET /v1/export answered \(response.status.code)") }
        var size = 0
        for try await chunk in response.body { size += chunk.readableBytes }
        return size
    }
}

extension Sequence where Element: Sendable {
    /// `transform` of every element, all at once; the results in the sequence's order.
    func concurrentMap<T: Sendable>(_ transform: @escaping @Sendable (Element) async throws -> T) async throws -> [T] {
        try await withThrowingTaskGroup(of: (Int, T).self) { group in
            for (index, element) in enumerated() { group.addTask { (index, try await transform(element)) } }
            var results: [(Int, T)] = []
            for try await result in group { results.append(result) }
            return results.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }
}
