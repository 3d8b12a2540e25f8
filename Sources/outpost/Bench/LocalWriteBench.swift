import Foundation
import GRDBSQLite
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
            let fill = try LocalStore(url: url, keys: keys, schema: .fieldApps, durableCommits: false)
            // Records like those a door holds after a day's work.
            try await fill.fill(count: records, collection: "checkins") { position in
                (
                    "seed-\(position)",
                    ["name": .string("Guest \(position)"), "email": .string("guest\(position)@example.org"), "n": .integer(Int64(position))]
                )
            }
        }
        // The floor a store on SQLite can reach: the same two rows in a copy of the filled store, through
        // SQLite's C API, with no sealing, encoding or checks.
        let floorURL = directory.appendingPathComponent("floor.sqlite")
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: url.path + suffix) {
            try FileManager.default.copyItem(atPath: url.path + suffix, toPath: floorURL.path + suffix)
        }
        let floor = try SQLiteFloorProbe(url: floorURL)
        defer { floor.close() }
        let store = try LocalStore(url: url, keys: keys, schema: .fieldApps)
        let probe = try FsyncProbe(url: directory.appendingPathComponent("fsync.probe"))
        defer { probe.close() }

        var writes = Samples()
        var fsyncs = Samples()
        var floors = Samples()
        let clock = ContinuousClock()
        let fields: [String: JSONValue] = [
            "name": "Guest Name", "email": "guest@example.org", "status": "checked_in", "gate": 3,
        ]
        // Warm-up, unmeasured.
        for i in 0..<min(50, samples) {
            try await store.write(.init(collection: "checkins", recordId: "warm-\(i)", fields: fields), deviceId: "bench", at: Date(), offline: true)
            try floor.write(recordId: "warm-\(i)")
            try probe.sync()
        }
        for i in 0..<samples {
            fsyncs.add(try clock.measure { try probe.sync() })
            // Each goes first in every other sample, so that neither always runs with the other's caches.
            if i.isMultiple(of: 2) { floors.add(try clock.measure { try floor.write(recordId: "w-\(i)") }) }
            let start = clock.now
            try await store.write(.init(collection: "checkins", recordId: "w-\(i)", fields: fields), deviceId: "bench", at: Date(), offline: true)
            writes.add(clock.now - start)
            if !i.isMultiple(of: 2) { floors.add(try clock.measure { try floor.write(recordId: "w-\(i)") }) }
        }
        let p50 = writes.percentile(50) / fsyncs.percentile(50)
        let p99 = writes.percentile(99) / fsyncs.percentile(99)
        let floorP50 = floors.percentile(50) / fsyncs.percentile(50)
        progress(
            String(
                format:
                    "local-write: write p50 %.3f ms p99 %.3f ms; bare fsync p50 %.3f ms p99 %.3f ms; bare SQLite commit p50 %.3f ms p99 %.3f ms (%d samples, %d records)",
                writes.percentile(50), writes.percentile(99), fsyncs.percentile(50), fsyncs.percentile(99),
                floors.percentile(50), floors.percentile(99), samples, records))
        return [
            BenchResult(name: "local-write p50 / bare fsync p50", figure: p50, unit: "×", target: "≤ 1.5×", met: p50 <= 1.5),
            BenchResult(name: "local-write p99 / bare fsync p99", figure: p99, unit: "×", target: "≤ 2×", met: p99 <= 2),
            BenchResult(name: "local-write p50", figure: writes.percentile(50), unit: "ms", target: "< 200 ms", met: writes.percentile(50) < 200),
            BenchResult(
                name: "bare SQLite commit of the same two rows p50 / bare fsync p50", figure: floorP50, unit: "×", target: "reported", met: true),
        ]
    }
}

/// Two plain rows, a record and its outbox entry, committed in one transaction with `synchronous=FULL` through
/// SQLite's C API: what a durable write costs SQLite itself, without the store's sealing, encoding and checks.
final class SQLiteFloorProbe {
    private var connection: OpaquePointer?
    private var statements: [OpaquePointer] = []
    private let payload = [UInt8](repeating: 0x5A, count: 140)
    private var sequence: Int64 = 0

    init(url: URL) throws {
        // A handle comes back even when opening fails: it is closed on every way out of here.
        var opened = false
        defer { if !opened { close() } }
        guard sqlite3_open_v2(url.path, &connection, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK else {
            throw CLIError("cannot open \(url.path)")
        }
        var persist: Int32 = 1
        guard sqlite3_file_control(connection, "main", SQLITE_FCNTL_PERSIST_WAL, &persist) == SQLITE_OK else {
            throw CLIError("SQLite floor: cannot keep the write-ahead log")
        }
        try execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 4000")
        for sql in [
            "BEGIN IMMEDIATE",
            """
            INSERT OR REPLACE INTO records (collection, record_id, payload, tombstone, sync_status, last_sync_attempt,
                                            is_offline_entry, created_at, updated_at, version)
            VALUES ('checkins', ?1, ?2, 0, 'pending', NULL, 1, ?3, ?3, NULL)
            """,
            """
            INSERT INTO outbox (idempotency_key, collection, record_id, op, client_ts, base_version, payload)
            VALUES ('floor:' || ?1, 'checkins', ?1, 'upsert', ?3, NULL, ?2)
            """,
            "COMMIT",
        ] {
            var statement: OpaquePointer?
            guard sqlite3_prepare_v2(connection, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
                throw CLIError("cannot prepare the SQLite floor's statements")
            }
            statements.append(statement)
        }
        opened = true
    }

    private func execute(_ sql: String) throws {
        guard sqlite3_exec(connection, sql, nil, nil, nil) == SQLITE_OK else { throw CLIError("SQLite floor: \(sql) failed") }
    }

    func write(recordId: String) throws {
        sequence += 1
        for (index, statement) in statements.enumerated() {
            sqlite3_reset(statement)
            if index == 1 || index == 2 {
                let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
                let bound = [
                    sqlite3_bind_text(statement, 1, recordId, -1, transient),
                    payload.withUnsafeBytes { sqlite3_bind_blob(statement, 2, $0.baseAddress, Int32($0.count), transient) },
                    sqlite3_bind_int64(statement, 3, sequence),
                ]
                guard bound.allSatisfy({ $0 == SQLITE_OK }) else { throw CLIError("SQLite floor: a value did not bind") }
            }
            guard sqlite3_step(statement) == SQLITE_DONE else { throw CLIError("SQLite floor: a write failed") }
        }
    }

    func close() {
        for statement in statements { sqlite3_finalize(statement) }
        statements = []
        sqlite3_close(connection)
        connection = nil
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
