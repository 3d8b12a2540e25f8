import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostServer
import OutpostTesting

extension SyncBench {
    /// The collection the attachments scenario attaches to: any type, up to 256 MiB.
    static let attachmentCollections = """
        collections:
          - name: bench_files
            attachments: {maxBytes: 268435456, types: ["*/*"]}
        """

    /// A device uploads a file of `megabytes` through the outbox, beside a plain HTTP upload of the same bytes to a
    /// server that writes them to disk; and an `outpost device sync` process uploads a file a tenth that size and
    /// one of that size, its memory sampled.
    ///
    /// On PostgreSQL it runs twice: the files' bytes in the database, then in a directory (`--file-directory`).
    func attachments(megabytes: Int = 200, runs: Int = 3) async throws -> [BenchResult] {
        var results = try await attachments(megabytes: megabytes, runs: runs, inDirectory: false)
        if databaseURL != nil { results += try await attachments(megabytes: megabytes, runs: runs, inDirectory: true) }
        return results
    }

    private func attachments(megabytes: Int, runs: Int, inDirectory: Bool) async throws -> [BenchResult] {
        let collections = directory.appendingPathComponent("bench-collections-\(UUID().uuidString.prefix(6)).yaml")
        try Self.attachmentCollections.write(to: collections, atomically: true, encoding: .utf8)
        let files = directory.appendingPathComponent("bench-files-\(UUID().uuidString.prefix(6))")
        defer { try? FileManager.default.removeItem(at: files) }
        let engine = inDirectory ? "\(self.engine), files in a directory" : self.engine
        let arguments = ["--collections", collections.path] + (inDirectory ? ["--file-directory", files.path] : [])
        return try await withServer(arguments: arguments) { base, token, client, _ in
            let size = megabytes * 1_000_000
            let plain = try await PlainUploadServer.start(directory: directory)
            defer { plain.stop() }
            let staff = try await token("crew", .staff)
            // Interleaved: a plain upload, then the same bytes through the outbox, `runs` times; medians compared.
            var plainTimes: [Double] = []
            var outpostTimes: [Double] = []
            for run in 0..<runs {
                let file = directory.appendingPathComponent("bench-file-\(run).bin")
                try Self.writeFile(file, bytes: size, seed: UInt64(run + 1))
                defer { try? FileManager.default.removeItem(at: file) }
                progress("attachments (\(engine)): run \(run + 1) of \(runs): a plain upload of \(megabytes) MB…")
                plainTimes.append(try await plain.upload(file, client: client).seconds)
                progress("attachments (\(engine)): run \(run + 1) of \(runs): the same bytes through the outbox…")
                outpostTimes.append(try await uploadThroughOutbox(file, base: base, token: staff, client: client).seconds)
            }
            let plainMedian = plainTimes.sorted()[runs / 2]
            let outpostMedian = outpostTimes.sorted()[runs / 2]
            let ratio = plainMedian / outpostMedian
            progress("attachments (\(engine)): an `outpost device sync` process uploads \(megabytes / 10) MB, then \(megabytes) MB…")
            let small = try await peakWhileUploading(megabytes: megabytes / 10, base: base, token: staff)
            let large = try await peakWhileUploading(megabytes: megabytes, base: base, token: staff)
            // What the larger file's extra bytes added to the peak, as a share of them: all of them, were the file
            // held whole.
            let extraBytes = Double(megabytes - megabytes / 10) * 1_000_000
            let growth = max(0, Double(large - small) * 1024) / extraBytes
            return [
                BenchResult(
                    name:
                        "upload \(megabytes) MB through the outbox (\(engine)): \(String(format: "%.0f", Double(size) / outpostMedian / 1e6)) MB/s against \(String(format: "%.0f", Double(size) / plainMedian / 1e6)) MB/s plain, medians of \(runs)",
                    figure: ratio, unit: "× plain", target: "≥ 0.8×", met: ratio >= 0.8),
                BenchResult(
                    name:
                        "device memory uploading \(megabytes) MB against \(megabytes / 10) MB (\(engine)): peaks \(large / 1024) MB and \(small / 1024) MB",
                    figure: growth, unit: "of the extra bytes", target: "≤ 0.2 (not proportional)", met: growth <= 0.2),
            ]
        }
    }

    /// Writes `bytes` bytes that do not compress, different for each `seed`, a megabyte at a time.
    static func writeFile(_ url: URL, bytes: Int, seed: UInt64) throws {
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else { throw CLIError("cannot write \(url.path)") }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        var state = seed
        var written = 0
        while written < bytes {
            let count = min(1 << 20, bytes - written)
            var block = [UInt8](repeating: 0, count: count)
            block.withUnsafeMutableBytes { raw in
                let words = raw.bindMemory(to: UInt64.self)
                for index in words.indices {
                    state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                    words[index] = state
                }
            }
            try handle.write(contentsOf: block)
            written += count
        }
    }

    /// Attaches `file` on a fresh device and times the sync that uploads it and its record.
    private func uploadThroughOutbox(_ file: URL, base: URL, token: String, client: HTTPClient) async throws -> Duration {
        let url = directory.appendingPathComponent("files-\(UUID().uuidString.prefix(6))/device.sqlite")
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        defer { try? store.close() }
        let engine = SyncEngine(
            store: store, transport: HTTPSyncTransport(baseURL: base, token: token, client: client, timeout: .seconds(60)),
            configuration: SyncConfiguration(deviceId: "files-\(UUID().uuidString.prefix(6))", deliversAfterSave: false))
        await engine.setOnline(false)
        try await engine.save(
            LocalStore.Write(collection: "bench_files", recordId: "f-\(UUID().uuidString.prefix(8))", fields: ["n": 1]),
            attaching: ["data": Attachment(contentsOf: file, type: "application/octet-stream")])
        var summary = SyncSummary()
        let elapsed = try await ContinuousClock().measure { summary = try await engine.sync() }
        guard summary.synced == 1 else { throw CLIError("the file's record did not sync: \(summary)") }
        return elapsed
    }

    /// The peak resident memory, in kilobytes, of an `outpost device sync` process uploading a file of `megabytes`
    /// that an `outpost device put` saved while the link was down.
    private func peakWhileUploading(megabytes: Int, base: URL, token: String) async throws -> Int {
        let root = directory.appendingPathComponent("memory-\(UUID().uuidString.prefix(6))")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let file = root.appendingPathComponent("file.bin")
        try Self.writeFile(file, bytes: megabytes * 1_000_000, seed: UInt64(megabytes) << 8)
        let link = try await FaultProxy.start(upstreamPort: base.port ?? 0)
        defer { Task { try? await link.stop() } }
        let store = ["--store", root.appendingPathComponent("device.sqlite").path]
        try await Self.outpost(
            ["device", "init", "--server", "http://127.0.0.1:\(link.port)", "--token", token, "--device-id", "memory"] + store)
        link.inject(.drop)
        try await Self.outpost(["device", "put", "bench_files", "f1", "n=1", "--file", "data=\(file.path)"] + store)
        link.inject(nil)
        let (said, peak) = try await Self.outpost(["device", "sync"] + store, samplingMemory: true)
        guard said.contains("1 synced") else {
            throw CLIError("`outpost device sync` of \(megabytes) MB did not sync its record: \(said.prefix(200))")
        }
        return peak
    }

    /// Runs `outpost` with `arguments` to its end: what it printed, and, when `samplingMemory`, its peak resident
    /// memory in kilobytes (else 0).
    ///
    /// - Throws: when it exits non-zero, with the start of what it said on stderr.
    @discardableResult
    private static func outpost(_ arguments: [String], samplingMemory: Bool = false) async throws -> (String, Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = arguments
        let (output, errors) = (Pipe(), Pipe())
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let peak = samplingMemory ? peakMemory(of: process.processIdentifier) : nil
        // The process says little: its pipes hold what it writes until it ends.
        while process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
        peak?.cancel()
        guard process.terminationStatus == 0 else {
            let said = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            throw CLIError("outpost \(arguments.prefix(2).joined(separator: " ")) failed: \(said.prefix(200))")
        }
        return (String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self), await peak?.value ?? 0)
    }
}

/// A plain HTTP server that writes each `PUT /blob` body to a file and flushes it: the measure an upload through
/// the outbox is compared with.
struct PlainUploadServer {
    let task: Task<Void, any Error>
    let url: String

    static func start(directory: URL) async throws -> PlainUploadServer {
        let router = Router()
        router.put("blob") { request, _ -> Response in
            let path = directory.appendingPathComponent("plain-\(UUID().uuidString.prefix(6)).bin").path
            guard FileManager.default.createFile(atPath: path, contents: nil), let handle = FileHandle(forWritingAtPath: path)
            else { return Response(status: .internalServerError) }
            defer {
                try? handle.close()
                try? FileManager.default.removeItem(atPath: path)
            }
            for try await piece in request.body {
                try handle.write(contentsOf: piece.readableBytesView)
            }
            try handle.synchronize()
            return Response(status: .ok)
        }
        let (task, port) = try await BenchReceiver.serve(router, label: "outpost.bench.plain")
        return PlainUploadServer(task: task, url: "http://127.0.0.1:\(port)/blob")
    }

    /// Uploads `file` in one request, read and sent a megabyte at a time; how long until the server answered.
    func upload(_ file: URL, client: HTTPClient) async throws -> Duration {
        let size = try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int ?? 0
        var request = HTTPClientRequest(url: url)
        request.method = .PUT
        request.headers.add(name: "Content-Type", value: "application/octet-stream")
        let reader = try FileHandle(forReadingFrom: file)
        defer { try? reader.close() }
        // Read as it is sent, a megabyte at a time, as the outbox reads its ranges.
        let pieces = AsyncThrowingStream<ByteBuffer, any Error> { [reader] in
            guard let data = try reader.read(upToCount: 1 << 20), !data.isEmpty else { return nil }
            return ByteBuffer(bytes: data)
        }
        request.body = .stream(pieces, length: .known(Int64(size)))
        return try await ContinuousClock().measure {
            let response = try await client.execute(request, timeout: .seconds(300))
            _ = try await response.body.collect(upTo: 1 << 20)
            guard response.status == .ok else { throw CLIError("the plain upload answered \(response.status.code)") }
        }
    }

    func stop() { task.cancel() }
}
