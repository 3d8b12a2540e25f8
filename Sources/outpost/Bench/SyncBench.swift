import AsyncHTTPClient
import Foundation
import NIOCore
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostServer

/// The sync scenarios, end to end against a real `outpost serve` process on loopback: on SQLite, or on
/// PostgreSQL when a database URL is given. Devices are real encrypted stores and engines in this process.
struct SyncBench {
    var directory: URL
    var databaseURL: String?
    var progress: (String) -> Void

    var engine: String { databaseURL == nil ? "SQLite" : "PostgreSQL" }

    /// A server, tokens for a fresh tenant, and an HTTP client, for the length of `body`.
    func withServer<T>(
        arguments: [String] = [], _ body: (URL, (String, Role) async throws -> String, HTTPClient, Int32) async throws -> T
    ) async throws -> T {
        let secret = Array(TokenAuthority.generateSecret().map { String(format: "%02x", $0) }.joined().utf8)
        let server = try BenchServer(
            directory: directory.appendingPathComponent("server-\(UUID().uuidString.prefix(6))"), secret: secret,
            databaseURL: databaseURL, arguments: arguments)
        defer { server.stop() }
        let base = try await server.waitUntilListening()
        let authority = try await TokenAuthority(secret: secret)
        // A tenant of its own per run, so that a shared PostgreSQL database can be reused.
        let tenant = "bench-\(UUID().uuidString.prefix(8).lowercased())"
        let token: (String, Role) async throws -> String = { user, role in
            try await authority.token(
                for: Identity(tenant: tenant, userId: user, role: role, name: user), lifetime: .seconds(3600), now: Date())
        }
        let pid = server.process.processIdentifier
        return try await withDeviceHTTPClient { client in try await body(base, token, client, pid) }
    }

    /// A device store with `count` notes queued offline; filled without flushing, then reopened durable.
    func queuedDevice(_ name: String, count: Int, base: URL, token: String, client: HTTPClient) async throws -> SyncEngine {
        let url = directory.appendingPathComponent("\(name)-\(UUID().uuidString.prefix(6))/device.sqlite")
        do {
            let fill = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps, durableCommits: false)
            for i in 0..<count {
                try await fill.write(
                    .init(
                        collection: "notes", recordId: "\(name)-\(i)", fields: ["text": .string("note \(i) from \(name)"), "n": .integer(Int64(i))]),
                    deviceId: name, at: Date(), offline: true)
            }
        }
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        let engine = SyncEngine(
            store: store, transport: HTTPSyncTransport(baseURL: base, token: token, client: client, timeout: .seconds(60)),
            configuration: SyncConfiguration(deviceId: name, deliversAfterSave: false))
        await engine.setOnline(false)
        return engine
    }

    /// One device drains 10,000 queued records in chunks of 50; then the same 10,000 are replayed as duplicates.
    func drain(records: Int = 10_000) async throws -> [BenchResult] {
        try await withServer { base, token, client, pid in
            progress("drain (\(engine)): queueing \(records) records offline…")
            let engine = try await queuedDevice("drain", count: records, base: base, token: try await token("staff", .staff), client: client)
            let queued = try await engine.store.outbox.nextChunk(limit: records).map(\.mutation)
            let clock = ContinuousClock()
            progress("drain (\(self.engine)): draining…")
            var summary = SyncSummary()
            let drained = try await clock.measure { summary = try await engine.sync() }
            guard summary.synced == records, summary.failed == 0 else {
                throw CLIError("the drain did not sync everything: \(summary)")
            }
            // Replay every chunk again, as a device that never heard the answers would.
            let transport = HTTPSyncTransport(baseURL: base, token: try await token("staff", .staff), client: client, timeout: .seconds(60))
            var duplicates = 0
            let replay = try await clock.measure {
                for start in stride(from: 0, to: queued.count, by: 50) {
                    let response = try await transport.push(
                        PushRequest(deviceId: "drain", mutations: Array(queued[start..<min(start + 50, queued.count)])))
                    duplicates += response.results.filter { $0.status == .duplicate }.count
                }
            }
            guard duplicates == records else { throw CLIError("the replay answered \(duplicates) duplicates of \(records)") }
            return [
                BenchResult(
                    name: "drain \(records) queued records in chunks of 50 (\(self.engine))", figure: drained.seconds, unit: "s",
                    target: "≤ 2 s", met: drained.seconds <= 2),
                BenchResult(
                    name: "replay \(records) already-applied records (\(self.engine))", figure: replay.seconds, unit: "s",
                    target: "≤ 1 s", met: replay.seconds <= 1),
            ]
        }
    }

    /// 50 devices with 1,000 queued records each reconnect at once; every mutation must land exactly once.
    func devices(count: Int = 50, records: Int = 1000) async throws -> [BenchResult] {
        try await withServer { base, token, _, pid in
            // Each device on a connection of its own, as 50 phones would be; the device client pools 8 a host,
            // which would have let only 8 of the 50 push at a time.
            let client = Self.clientWithConnections(count)
            defer { _ = client.shutdown() }
            progress("devices (\(engine)): queueing \(count) × \(records) records…")
            var engines: [SyncEngine] = []
            for index in 0..<count {
                engines.append(
                    try await queuedDevice("dev\(index)", count: records, base: base, token: try await token("staff\(index)", .staff), client: client)
                )
            }
            progress("devices (\(engine)): \(count) devices reconnect at once…")
            let clock = ContinuousClock()
            var failures = 0
            let elapsed = try await clock.measure {
                failures = try await withThrowingTaskGroup(of: Int.self) { group in
                    for engine in engines {
                        group.addTask { try await engine.sync().failed }
                    }
                    return try await group.reduce(0, +)
                }
            }
            // Exactly once: the server holds every record once, at version 1.
            let reader = HTTPSyncTransport(baseURL: base, token: try await token("auditor", .staff), client: client, timeout: .seconds(60))
            var seen = Set<String>()
            var doubled = 0
            var cursor: String?
            while true {
                let page = try await reader.pull(collection: "notes", scope: nil, cursor: cursor, limit: 5000)
                for change in page.changes {
                    if !seen.insert(change.recordId).inserted || change.version != 1 { doubled += 1 }
                }
                cursor = page.cursor
                if !page.hasMore { break }
            }
            let total = count * records
            let rate = Double(total) / elapsed.seconds
            let exact = failures == 0 && seen.count == total && doubled == 0
            progress("devices (\(engine)): \(seen.count) of \(total) present, \(doubled) doubled, \(failures) failed")
            return [
                BenchResult(
                    name: "\(count) devices × \(records) records reconnecting at once (\(engine))", figure: rate, unit: "mutations/s",
                    target: databaseURL == nil ? "≥ 20,000/s on PostgreSQL (reported here on SQLite)" : "≥ 20,000/s, no error, all present once",
                    met: exact && (databaseURL == nil || rate >= 20_000))
            ]
        }
    }

    /// The sync monitor, JSON and HTML, with 1,000 devices reporting.
    func monitor(devices: Int = 1000, samples: Int = 50) async throws -> [BenchResult] {
        try await withServer { base, token, client, pid in
            progress("monitor (\(engine)): \(devices) devices report…")
            for index in 0..<devices {
                let transport = HTTPSyncTransport(baseURL: base, token: try await token("staff\(index % 50)", .staff), client: client)
                _ = try await transport.heartbeat(
                    Heartbeat(
                        deviceId: "phone-\(index)", event: "gala", pendingCount: index % 7, failedCount: 0,
                        lastRosterFetch: Timestamp(Date()), appVersion: "bench/1"))
            }
            let organizer = try await token("organizer", .organizer)
            var json = Samples()
            var html = Samples()
            let clock = ContinuousClock()
            let session = try await sessionCookie(base: base, token: organizer, client: client)
            for _ in 0..<samples {
                json.add(try await clock.measure { _ = try await get(base, "/v1/monitor?event=gala", bearer: organizer, client: client) })
                html.add(try await clock.measure { _ = try await get(base, "/admin/monitor?event=gala", cookie: session, client: client) })
            }
            return [
                BenchResult(
                    name: "sync monitor JSON, \(devices) devices, p50 (\(engine))", figure: json.percentile(50), unit: "ms",
                    target: "≤ 50 ms", met: json.percentile(50) <= 50),
                BenchResult(
                    name: "sync monitor HTML, \(devices) devices, p50 (\(engine))", figure: html.percentile(50), unit: "ms",
                    target: "≤ 50 ms", met: html.percentile(50) <= 50),
            ]
        }
    }

    /// `POST /v1/sync-failures`: p95 latency of reports, each of 10 records.
    func failures(samples: Int = 200) async throws -> [BenchResult] {
        try await withServer { base, token, client, pid in
            let transport = HTTPSyncTransport(baseURL: base, token: try await token("staff", .staff), client: client)
            var latencies = Samples()
            let clock = ContinuousClock()
            for sample in 0..<samples {
                let report = SyncFailureReport(
                    deviceId: "phone-\(sample % 20)",
                    failures: (0..<10).map {
                        SyncFailure(
                            collection: "notes", recordId: "r-\(sample)-\($0)", firstAttempt: Timestamp(Date().addingTimeInterval(-90_000)),
                            lastError: "The server could not be reached")
                    })
                latencies.add(try await clock.measure { _ = try await transport.reportFailures(report) })
            }
            return [
                BenchResult(
                    name: "persistent-failure report (10 records), p95 (\(engine))", figure: latencies.percentile(95), unit: "ms",
                    target: "≤ 500 ms", met: latencies.percentile(95) <= 500)
            ]
        }
    }

    /// The server's resident memory while 1,000 devices push and pull at once.
    func memory(devices: Int = 1000, rounds: Int = 5) async throws -> [BenchResult] {
        try await withServer { base, token, _, pid in
            let client = Self.clientWithConnections(devices)
            defer { _ = client.shutdown() }
            progress("memory (\(engine)): \(devices) devices syncing at once…")
            let tokens = try await (0..<20).asyncMap { try await token("staff\($0)", .staff) }
            var peak = 0
            let sampler = Self.peakMemory(of: pid)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<devices {
                    let transport = HTTPSyncTransport(baseURL: base, token: tokens[index % tokens.count], client: client, timeout: .seconds(120))
                    group.addTask {
                        for round in 0..<rounds {
                            let now = Timestamp(Date())
                            let mutations = (0..<20).map { n in
                                Mutation(
                                    idempotencyKey: "m\(index):\(round):\(n)", collection: "notes", recordId: "d\(index)-\(n)", op: .upsert,
                                    fields: ["text": .string("round \(round)")], clientTimestamp: now)
                            }
                            _ = try await transport.push(PushRequest(deviceId: "m\(index)", mutations: mutations))
                            _ = try await transport.pull(collection: "notes", scope: nil, cursor: nil, limit: 100)
                        }
                    }
                }
                try await group.waitForAll()
            }
            sampler.cancel()
            peak = await sampler.value
            let megabytes = Double(peak) / 1024
            return [
                BenchResult(
                    name: "server memory, \(devices) devices syncing at once (\(engine))", figure: megabytes, unit: "MB RSS",
                    target: "≤ 100 MB", met: megabytes <= 100)
            ]
        }
    }

    /// An HTTP client with one connection per device, as that many phones would have (the device client
    /// pools 8 per host).
    static func clientWithConnections(_ devices: Int) -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = devices
        configuration.timeout.connect = .seconds(30)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    /// Samples a process's resident memory until cancelled; its peak, in kilobytes.
    static func peakMemory(of pid: Int32) -> Task<Int, Never> {
        Task {
            var high = 0
            while !Task.isCancelled {
                high = max(high, residentKilobytes(pid))
                try? await Task.sleep(for: .milliseconds(50))
            }
            return high
        }
    }

    static func residentKilobytes(_ pid: Int32) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0") ?? 0
    }

    private func get(_ base: URL, _ path: String, bearer: String? = nil, cookie: String? = nil, client: HTTPClient) async throws -> Int {
        var request = HTTPClientRequest(url: base.absoluteString + path)
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        if let cookie { request.headers.add(name: "Cookie", value: cookie) }
        let response = try await client.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 64 * 1024 * 1024)
        guard response.status.code == 200 else { throw CLIError("GET \(path) answered \(response.status.code)") }
        return body.readableBytes
    }

    /// Signs in as the sign-in form does (its Origin, its CSRF token in field and cookie), without following
    /// its redirect, and returns the session cookie.
    private func sessionCookie(base: URL, token: String, client: HTTPClient) async throws -> String {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        let signIn = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        defer { _ = signIn.shutdown() }
        var request = HTTPClientRequest(url: base.absoluteString + "/admin/session")
        request.method = .POST
        request.headers.add(name: "Origin", value: base.absoluteString)
        request.headers.add(name: "Cookie", value: "outpost_csrf=bench")
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(string: "csrf=bench&token=\(token)"))
        let response = try await signIn.execute(request, timeout: .seconds(30))
        guard let header = response.headers["Set-Cookie"].first(where: { $0.hasPrefix("outpost_session=") }),
            let pair = header.split(separator: ";").first
        else {
            throw CLIError("signing in set no session cookie")
        }
        return String(pair)
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
