import Benchmark
import Crypto
import Foundation
import OutpostClient
import OutpostProtocol

/// The local store's parts, one at a time: a durable write, the outbox scan that feeds a sync, and the
/// encoding and sealing every payload goes through. The end-to-end figures and their targets are
/// `outpost bench`'s (BENCHMARKS.md); these say where a write's time goes.
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        // CPU time is left out: on Linux it is counted in 10 ms ticks, coarser than any of these.
        metrics: [.wallClock, .mallocCountTotal], warmupIterations: 10, maxDuration: .seconds(5),
        maxIterations: 5_000)

    Benchmark(
        "durable local write (record + outbox entry, one fsync'd commit, 10,000 records in the store)",
        configuration: .init(metrics: [.wallClock, .syscalls], maxIterations: 2_000)
    ) { benchmark in
        let store = try Fixture.shared.store()
        for _ in benchmark.scaledIterations {
            blackHole(try await store.write(Fixture.nextWrite(), deviceId: "bench-device", at: Fixture.nextTime(), offline: true))
        }
    } setup: {
        try await Fixture.shared.open(records: 10_000)
    } teardown: {
        Fixture.shared.close()
    }

    Benchmark("outbox scan: the next chunk of 50 of 10,000 queued entries, opened") { benchmark in
        let store = try Fixture.shared.store()
        for _ in benchmark.scaledIterations {
            blackHole(try await store.nextChunk(limit: 50))
        }
    } setup: {
        try await Fixture.shared.open(records: 10_000)
    } teardown: {
        Fixture.shared.close()
    }

    let fields = Fixture.guestFields
    let key = SymmetricKey(size: .bits256)
    let context = Data("record:guests/g000017".utf8)

    Benchmark("encode a record's fields (JSONValue writer)") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try fields.jsonBytes()) }
    }

    Benchmark("encode a record's fields (Foundation JSONEncoder, for comparison)") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try JSONEncoder().encode(fields)) }
    }

    let encoded = try! fields.jsonBytes()
    Benchmark("decode a record's fields (JSONValue reader)") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try [String: JSONValue](parsingObject: encoded)) }
    }

    Benchmark("decode a record's fields (Foundation JSONDecoder, for comparison)") { benchmark in
        let data = Data(encoded)
        for _ in benchmark.scaledIterations { blackHole(try JSONDecoder().decode([String: JSONValue].self, from: data)) }
    }

    Benchmark("seal a record's fields (AES-256-GCM, authenticated context)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try AES.GCM.seal(encoded, using: key, authenticating: context).combined)
        }
    }

    let sealed = try! AES.GCM.seal(encoded, using: key, authenticating: context).combined!
    Benchmark("open a sealed record (AES-256-GCM)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try AES.GCM.open(AES.GCM.SealedBox(combined: sealed), using: key, authenticating: context))
        }
    }
}

/// One store per benchmark, in a temporary folder, filled before measuring.
final class Fixture: @unchecked Sendable {
    static let shared = Fixture()
    private let lock = NSLock()
    private var current: (store: LocalStore, directory: URL)?
    nonisolated(unsafe) private static var sequence = 0

    static let guestFields: [String: JSONValue] = [
        "guest_id": "g000017", "name": "Ana Silva 17", "email": "ana.17@example.org", "access_type_id": "general",
        "status": "registered", "check_in_note": "Prefers, if possible, the \"side\" entrance", "event_id": "gala",
    ]

    static func nextWrite() -> LocalStore.Write {
        sequence += 1
        return LocalStore.Write(collection: "notes", recordId: "bench-\(sequence)", fields: ["text": .string("note \(sequence)"), "n": .integer(Int64(sequence))])
    }

    static func nextTime() -> Date { Date(timeIntervalSince1970: 1_795_000_000 + Double(sequence) / 1000) }

    func open(records: Int) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-bench-\(UUID())")
        let url = directory.appendingPathComponent("device.sqlite")
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url))
        for _ in 0..<records {
            _ = try await store.write(Self.nextWrite(), deviceId: "bench-device", at: Self.nextTime(), offline: true)
        }
        lock.withLock { current = (store, directory) }
    }

    func store() throws -> LocalStore {
        guard let store = lock.withLock({ current?.store }) else { throw CocoaError(.featureUnsupported) }
        return store
    }

    func close() {
        let directory = lock.withLock { () -> URL? in
            defer { current = nil }
            return current?.directory
        }
        if let directory { try? FileManager.default.removeItem(at: directory) }
    }
}
