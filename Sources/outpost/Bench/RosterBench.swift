import AsyncHTTPClient
import Foundation
import NIOCore
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostRecords
import OutpostServer

/// The reference-data scenarios, end to end against a real `outpost serve` process on loopback (SQLite):
/// a 100,000-guest roster download into the encrypted device store (and the ratio to a plain HTTP fetch of
/// the same pages), offline search, and delta refreshes of 1,000 changes and 100 tombstones each.
struct RosterBench {
    var directory: URL
    var guests: Int
    var progress: (String) -> Void

    func run() async throws -> [BenchResult] {
        // The server reads $OUTPOST_JWT_SECRET as text: sign with the same text.
        let secret = Array(TokenAuthority.generateSecret().map { String(format: "%02x", $0) }.joined().utf8)
        let server = try BenchServer(directory: directory.appendingPathComponent("server"), secret: secret)
        defer { server.stop() }
        let base = try await server.waitUntilListening()
        let authority = try await TokenAuthority(secret: secret)
        let organizer = try await authority.token(
            for: Identity(tenant: "bench", userId: "organizer", role: .organizer, name: "Organizer"), lifetime: .seconds(3600), now: Date())
        let staff = try await authority.token(
            for: Identity(tenant: "bench", userId: "staff", role: .staff, name: "Staff"), lifetime: .seconds(3600), now: Date())
        return try await withDeviceHTTPClient { client in
            try await measure(base: base, organizer: organizer, staff: staff, client: client)
        }
    }

    private func measure(base: URL, organizer: String, staff: String, client: HTTPClient) async throws -> [BenchResult] {
        let organizerTransport = HTTPSyncTransport(baseURL: base, token: organizer, client: client)
        let staffTransport = HTTPSyncTransport(baseURL: base, token: staff, client: client)

        progress("roster: loading \(guests) guests into the server…")
        let rows = try RosterCSV.parse(RosterCSV.generate(guests: guests), event: "bench-event").get()
        let time = Timestamp(Date())
        for start in stride(from: 0, to: rows.count, by: 500) {
            let batch = rows[start..<min(start + 500, rows.count)].map {
                Mutation(
                    idempotencyKey: "load:\($0.guestId)", collection: Guest.collection, recordId: $0.guestId, scope: "bench-event",
                    op: .upsert, fields: $0.fields, clientTimestamp: time)
            }
            _ = try await organizerTransport.push(PushRequest(deviceId: "bench-loader", mutations: batch))
        }

        // A plain fetch of the same pages: the floor for the download.
        let clock = ContinuousClock()
        let plain = try await clock.measure { try await plainFetch(base: base, token: staff, client: client) }

        let url = directory.appendingPathComponent("device/device.sqlite")
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        let data = ReferenceData(store: store, transport: staffTransport)
        progress("roster: downloading into the encrypted device store…")
        let download = try await clock.measure {
            _ = try await data.download(collection: Guest.collection, scope: "bench-event")
        }
        guard try await data.state(collection: Guest.collection, scope: "bench-event").isReady else {
            throw CLIError("the roster download did not complete")
        }

        // Search: name prefixes of two to six letters, and whole e-mails.
        var searches = Samples()
        var random = SystemRandomNumberGenerator()
        for _ in 0..<1000 {
            let row = rows[Int.random(in: 0..<rows.count, using: &random)]
            let name = row.fields["name"]?.stringValue ?? "Ana"
            let query =
                Bool.random(using: &random)
                ? String(name.prefix(Int.random(in: 2...6, using: &random)))
                : (row.fields["email"]?.stringValue ?? "")
            searches.add(try await clock.measure { _ = try await data.search(collection: Guest.collection, scope: "bench-event", query: query) })
        }

        // Delta refresh: 1,000 changed guests and 100 cancelled ones, in several rounds of different guests.
        var refreshes = Samples()
        // The device's CPU time per refresh (this process's; the server is another): steadier than the wall time
        // on a shared machine, and what the wall time is made of on two cores.
        var refreshCPU = Samples()
        for round in 0..<Self.refreshRounds {
            let changed = rows[(round * Self.changedPerRound)..<((round + 1) * Self.changedPerRound)].map {
                Mutation(
                    idempotencyKey: "change:\($0.guestId)", collection: Guest.collection, recordId: $0.guestId, scope: "bench-event",
                    op: .upsert, fields: ["check_in_note": "moved to table \(round + 4)", "event_id": "bench-event"],
                    clientTimestamp: Timestamp(Date()))
            }
            let cancelled = rows.dropLast(round * Self.cancelledPerRound).suffix(Self.cancelledPerRound).map {
                Mutation(
                    idempotencyKey: "cancel:\($0.guestId)", collection: Guest.collection, recordId: $0.guestId, scope: "bench-event",
                    op: .delete, clientTimestamp: Timestamp(Date()))
            }
            for start in stride(from: 0, to: changed.count, by: 500) {
                _ = try await organizerTransport.push(
                    PushRequest(deviceId: "bench-loader", mutations: Array(changed[start..<min(start + 500, changed.count)])))
            }
            _ = try await organizerTransport.push(PushRequest(deviceId: "bench-loader", mutations: cancelled))
            var summary = RefreshSummary(updated: 0, removed: 0)
            let cpuBefore = Self.processCPUMilliseconds()
            refreshes.add(
                try await clock.measure {
                    summary = try await data.refresh(collection: Guest.collection, scope: "bench-event")
                })
            refreshCPU.add(milliseconds: Self.processCPUMilliseconds() - cpuBefore)
            guard summary == RefreshSummary(updated: Self.changedPerRound, removed: Self.cancelledPerRound) else {
                throw CLIError(
                    "the refresh saw \(summary.updated) updates and \(summary.removed) removals, not \(Self.changedPerRound) and \(Self.cancelledPerRound)"
                )
            }
        }
        let refresh = refreshes.percentile(50)

        let downloadSeconds = download.seconds
        progress(
            String(
                format: "roster: download %.2f s, plain fetch %.2f s; search p50 %.3f ms p99 %.3f ms; refresh median %.1f ms of %@; device CPU %@ ms",
                downloadSeconds, plain.seconds, searches.percentile(50), searches.percentile(99), refresh,
                refreshes.values.map { String(format: "%.1f", $0) }.joined(separator: ", "),
                refreshCPU.values.map { String(format: "%.1f", $0) }.joined(separator: ", ")))
        return [
            BenchResult(name: "roster download, \(guests) guests", figure: downloadSeconds, unit: "s", target: "≤ 2 s", met: downloadSeconds <= 2),
            BenchResult(
                name: "roster download / plain HTTP fetch", figure: downloadSeconds / plain.seconds, unit: "×", target: "reported", met: true),
            BenchResult(name: "search p50", figure: searches.percentile(50), unit: "ms", target: "≤ 10 ms", met: searches.percentile(50) <= 10),
            BenchResult(name: "search p99", figure: searches.percentile(99), unit: "ms", target: "≤ 10 ms", met: searches.percentile(99) <= 10),
            BenchResult(
                name: "delta refresh, 1,000 changes + 100 tombstones (median of \(Self.refreshRounds))", figure: refresh, unit: "ms",
                target: "≤ 15 ms", met: refresh <= 15),
            BenchResult(
                name: "delta refresh: the device's CPU time (median)", figure: refreshCPU.percentile(50), unit: "ms", target: "reported", met: true),
        ]
    }

    /// This process's CPU time so far, user and system.
    static func processCPUMilliseconds() -> Double {
        var usage = rusage()
        #if os(Linux)
            getrusage(Int32(RUSAGE_SELF.rawValue), &usage)
        #else
            getrusage(RUSAGE_SELF, &usage)
        #endif
        func milliseconds(_ time: timeval) -> Double { Double(time.tv_sec) * 1000 + Double(time.tv_usec) / 1000 }
        return milliseconds(usage.ru_utime) + milliseconds(usage.ru_stime)
    }

    /// Fetches every snapshot page's bytes without decoding or storing them.
    private func plainFetch(base: URL, token: String, client: HTTPClient) async throws {
        var continuation: String?
        repeat {
            var components = URLComponents(url: base.appendingPathComponent("v1/snapshot"), resolvingAgainstBaseURL: false)!
            components.queryItems =
                [
                    URLQueryItem(name: "collection", value: Guest.collection), URLQueryItem(name: "scope", value: "bench-event"),
                    URLQueryItem(name: "limit", value: "500"),
                ] + (continuation.map { [URLQueryItem(name: "continuation", value: $0)] } ?? [])
            var request = HTTPClientRequest(url: components.url!.absoluteString)
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            let response = try await client.execute(request, timeout: .seconds(30))
            let body = try await response.body.collect(upTo: 64 * 1024 * 1024)
            // Only the continuation is read, to ask for the next page.
            continuation = try JSONDecoder().decode(ContinuationOnly.self, from: Data(buffer: body)).continuation
        } while continuation != nil
    }

    private struct ContinuationOnly: Decodable { var continuation: String? }

    /// Delta refreshes measured, each of different guests: so many changed and so many cancelled.
    static let refreshRounds = 5
    static let changedPerRound = 1000
    static let cancelledPerRound = 100
    /// The smallest roster whose refreshes never touch a guest twice.
    static let minimumGuests = refreshRounds * (changedPerRound + cancelledPerRound)
}

/// An `outpost serve` child process on a free port, for end-to-end benchmarks.
final class BenchServer: @unchecked Sendable {
    let process = Process()
    private let output = Pipe()
    /// Where the server's errors go when no request log is asked for: a file, read only when the server fails
    /// to start, so that a long run never blocks on a pipe nobody drains.
    private let errors: URL

    /// - Parameters:
    ///   - port: 0 for a free one.
    ///   - arguments: more arguments of `outpost serve`, such as a relay's `--upstream`.
    init(directory: URL, secret: [UInt8], databaseURL: String? = nil, port: Int = 0, arguments: [String] = []) throws {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        // The connector scenario's receiver listens on loopback; every simulated device connects from loopback.
        process.arguments =
            [
                "serve", "--port", String(port), "--data-dir", directory.path, "--allow-loopback-receivers",
                "--max-connections-per-address", "0",
            ]
            + (databaseURL.map { ["--database-url", $0] } ?? []) + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["OUTPOST_JWT_SECRET"] = String(decoding: secret, as: UTF8.self)
        // $OUTPOST_BENCH_SERVER_LOG names a file for the server's request log, to see where time goes.
        let logPath = environment["OUTPOST_BENCH_SERVER_LOG"]
        environment["LOG_LEVEL"] = logPath == nil ? "error" : "info"
        process.environment = environment
        process.standardOutput = output
        errors = directory.appendingPathComponent("server-errors.log")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let errorPath = logPath ?? errors.path
        if FileManager.default.createFile(atPath: errorPath, contents: nil), let file = FileHandle(forWritingAtPath: errorPath) {
            process.standardError = file
        } else {
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
    }

    /// The server's base URL, once it prints that it listens.
    func waitUntilListening() async throws -> URL {
        var text = ""
        let handle = output.fileHandleForReading
        while process.isRunning {
            let data = handle.availableData
            if data.isEmpty { break }
            text += String(decoding: data, as: UTF8.self)
            if let range = text.range(of: #"http://127\.0\.0\.1:\d+"#, options: .regularExpression) {
                return URL(string: String(text[range]))!
            }
        }
        stop()
        // The server says why in its last line, such as a database that does not exist.
        let said = (try? String(contentsOf: errors, encoding: .utf8))?.split(separator: "\n").last.map { ": \($0)" } ?? ""
        throw CLIError("the benchmark server did not start\(said)")
    }

    func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
    var fractionalMilliseconds: Double { seconds * 1000 }
}
