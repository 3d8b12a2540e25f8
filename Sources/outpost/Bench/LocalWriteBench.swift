import Foundation
import OutpostClient
import OutpostProtocol

/// A durable local write (record + outbox entry, sealed, in one WAL commit with `synchronous=FULL`) against
/// a bare `fsync` of the same disk, measured in the same run, interleaved so that noise hits both alike.
struct LocalWriteBench {
    var directory: URL
    var records: Int
    var samples: Int
    var progress: (String) -> Void

    func run() async throws -> [BenchResult] {
        let url = directory.appendingPathComponent("device.sqlite")
        let keys = LocalStore.defaultKeys(for: url)
        progress("local-write: filling the store with \(records) records…")
        do {
            // The fill needs no durability of its own; what is measured afterwards does.
            let fill = try LocalStore(url: url, keys: keys, durableCommits: false)
            try await fill.fill(records: records, deviceId: "bench")
        }
        let store = try LocalStore(url: url, keys: keys)
        let probe = try FsyncProbe(url: directory.appendingPathComponent("fsync.probe"))
        defer { probe.close() }

        var writes = Samples()
        var fsyncs = Samples()
        let clock = ContinuousClock()
        let fields: [String: JSONValue] = [
            "name": "Guest Name", "email": "guest@example.org", "status": "checked_in", "gate": 3,
        ]
        // Warm-up, unmeasured.
        for i in 0..<min(50, samples) {
            try await store.write(.init(collection: "checkins", recordId: "warm-\(i)", fields: fields), deviceId: "bench", at: Date(), offline: true)
            try probe.sync()
        }
        for i in 0..<samples {
            fsyncs.add(try clock.measure { try probe.sync() })
            let start = clock.now
            try await store.write(.init(collection: "checkins", recordId: "w-\(i)", fields: fields), deviceId: "bench", at: Date(), offline: true)
            writes.add(clock.now - start)
        }
        let p50 = writes.percentile(50) / fsyncs.percentile(50)
        let p99 = writes.percentile(99) / fsyncs.percentile(99)
        progress(String(
            format: "local-write: write p50 %.3f ms p99 %.3f ms; bare fsync p50 %.3f ms p99 %.3f ms (%d samples, %d records)",
            writes.percentile(50), writes.percentile(99), fsyncs.percentile(50), fsyncs.percentile(99), samples, records))
        return [
            BenchResult(name: "local-write p50 / bare fsync p50", figure: p50, unit: "×", target: "≤ 1.5×", met: p50 <= 1.5),
            BenchResult(name: "local-write p99 / bare fsync p99", figure: p99, unit: "×", target: "≤ 2×", met: p99 <= 2),
            BenchResult(name: "local-write p50", figure: writes.percentile(50), unit: "ms", target: "< 200 ms", met: writes.percentile(50) < 200),
        ]
    }
}

/// Rewrites one 4 KiB page of a preallocated file and flushes it: the physical floor of a durable commit.
struct FsyncProbe {
    let descriptor: Int32
    private var page = [UInt8](repeating: 0xA5, count: 4096)

    init(url: URL) throws {
        descriptor = open(url.path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { throw CLIError("cannot create \(url.path)") }
        let zeros = [UInt8](repeating: 0, count: 4096 * 16)
        guard zeros.withUnsafeBytes({ pwrite(descriptor, $0.baseAddress, $0.count, 0) }) == zeros.count,
            fsync(descriptor) == 0
        else { throw CLIError("cannot write \(url.path)") }
    }

    func sync() throws {
        let offset = off_t(Int.random(in: 0..<16) * 4096)
        guard page.withUnsafeBytes({ pwrite(descriptor, $0.baseAddress, $0.count, offset) }) == page.count,
            fsync(descriptor) == 0
        else { throw CLIError("fsync failed") }
    }

    func close() { _ = Foundation.close(descriptor) }
}
