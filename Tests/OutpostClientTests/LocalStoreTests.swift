import Foundation
import GRDB
import OutpostApps
import OutpostProtocol
import Testing

@testable import OutpostClient

@Suite("Local store")
struct LocalStoreTests {
    @Test("a write stores the record and its outbox entry together, pending")
    func writeAndOutbox() async throws {
        try await withStore { store, _ in
            let record = try await store.write(note("r1", ["title": "hello"]), deviceId: "dev-1", at: Date(), offline: false)
            #expect(record.syncStatus == .pending)
            #expect(record.badge.accessibilityLabel == "Record pending synchronization")
            let chunk = try await store.outbox.nextChunk(limit: 50)
            #expect(chunk.count == 1)
            let mutation = try #require(chunk.first?.mutation)
            #expect(mutation.fields == ["title": "hello"])
            // The device, the time and 16 random hex digits: never the record's id, which may name someone.
            let parts = mutation.idempotencyKey.split(separator: ":", maxSplits: 1)
            #expect(parts.first == "dev-1")
            #expect(parts.last?.hasPrefix("\(mutation.clientTimestamp.iso8601):") == true)
            #expect(parts.last?.count == mutation.clientTimestamp.iso8601.count + 17)
            #expect(!mutation.idempotencyKey.contains("r1"))
            #expect(try await store.counts().pending == 1)
        }
    }

    @Test("timestamps only move forward, so two writes in one millisecond get distinct keys in order")
    func monotonicTimes() async throws {
        try await withStore { store, _ in
            let instant = Date(timeIntervalSince1970: 1_795_251_600)
            for i in 0..<5 {
                try await store.write(note("r1", ["i": .integer(Int64(i))]), deviceId: "d", at: instant, offline: false)
            }
            let chunk = try await store.outbox.nextChunk(limit: 50)
            #expect(Set(chunk.map(\.mutation.idempotencyKey)).count == 5)
            #expect(chunk.map(\.mutation.fields["i"]) == [0, 1, 2, 3, 4])
            #expect(chunk.map(\.mutation.clientTimestamp) == chunk.map(\.mutation.clientTimestamp).sorted())
        }
    }

    @Test("two processes writing one store: each write's time follows every one queued before it, and no key repeats")
    func twoWriters() async throws {
        try await withStore { running, url in
            // `device run` has the store open; `device put` opens it beside it, and its clock reads later.
            let instant = Date(timeIntervalSince1970: 1_795_251_600)
            let put = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            try await running.write(note("r0", ["n": 0]), deviceId: "d", at: instant, offline: false)
            try await put.write(note("r1", ["n": 1]), deviceId: "d", at: instant + 10, offline: false)
            try await put.write(note("r2", ["n": 2]), deviceId: "d", at: instant + 10, offline: false)
            // The running process's clock is behind the other's, or stepped back: its writes still come after.
            try await running.write(note("r2", ["n": 3]), deviceId: "d", at: instant + 5, offline: false)
            try await running.write(note("r3", ["n": 4]), deviceId: "d", at: instant + 5, offline: false)
            try await put.write(note("r3", ["n": 5]), deviceId: "d", at: instant + 10, offline: false)
            let chunk = try await running.outbox.nextChunk(limit: 50)
            #expect(chunk.map(\.mutation.fields["n"]) == [0, 1, 2, 3, 4, 5])
            let times = chunk.map(\.mutation.clientTimestamp)
            #expect(times == times.sorted() && Set(times).count == 6)
            #expect(Set(chunk.map(\.mutation.idempotencyKey)).count == 6)
            #expect(try await running.record(collection: "notes", recordId: "r3")?.fields["n"] == 5)
        }
    }

    @Test("a record created offline is flagged, and the flag travels as a field")
    func offlineEntry() async throws {
        try await withStore { store, _ in
            let record = try await store.write(note("r1"), deviceId: "d", at: Date(), offline: true)
            #expect(record.isOfflineEntry)
            #expect(try await store.outbox.nextChunk(limit: 1).first?.mutation.fields["isOfflineEntry"] == true)
            let online = try await store.write(note("r2"), deviceId: "d", at: Date(), offline: false)
            #expect(!online.isOfflineEntry)
        }
    }

    @Test("the store survives a restart with everything pending")
    func survivesRestart() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-device-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        do {
            let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            for i in 0..<3 { try await store.write(note("r\(i)"), deviceId: "d", at: Date(), offline: true) }
        }
        let reopened = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        #expect(try await reopened.outbox.nextChunk(limit: 50).count == 3)
        #expect(try await reopened.records(.pending).count == 3)
    }

    @Test("the write-ahead log outlives the store's close, and after each checkpoint commits overwrite it in place")
    func logKeptAndReused() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-device-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        let size: Int
        do {
            let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            for i in 0..<40 { try await store.write(note("r\(i)"), deviceId: "d", at: Date(), offline: true) }
            try await store.checkpoint()
            size = try logSize(url)
            #expect(size > 0)
            // Checkpointed, the next commit starts the log again from its beginning: the file does not grow.
            try await store.write(note("after-checkpoint"), deviceId: "d", at: Date(), offline: true)
            #expect(try logSize(url) == size)
        }
        // Closed: SQLite would delete the log; the store keeps it, at its size.
        #expect(try logSize(url) == size)
        let reopened = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        // The next session's commits follow the last session's frames until its first checkpoint (the engine
        // checkpoints after every sync); after it, they overwrite the kept file from its start.
        try await reopened.checkpoint()
        for i in 0..<5 { try await reopened.write(note("next-session-\(i)"), deviceId: "d", at: Date(), offline: true) }
        #expect(try logSize(url) == size)
        #expect(try await reopened.records(.pending).count == 46)
    }

    @Test("a checkpoint truncates a write-ahead log past the size limit, and keeps one below it")
    func largeLogTruncated() async throws {
        try await withStore { store, url in
            for i in 0..<20 { try await store.write(note("r\(i)"), deviceId: "d", at: Date(), offline: true) }
            try await store.checkpoint()
            let size = try logSize(url)
            #expect(size > 0 && size < LocalStore.walSizeLimit)
            try await store.write(note("more"), deviceId: "d", at: Date(), offline: true)
            try await store.checkpoint(truncatingLogPast: size - 1)
            #expect(try logSize(url) == 0)
            try await store.write(note("after"), deviceId: "d", at: Date(), offline: true)
            #expect(try await store.records(.pending).count == 22)
        }
    }

    @Test("payloads are encrypted at rest: no name or e-mail in any file of the store")
    func encryptedAtRest() async throws {
        try await withStore { store, url in
            let name = "Zanzibar Quetzalcoatl"
            let email = "zanzibar.q@example.org"
            try await store.write(
                LocalStore.Write(collection: "guests", recordId: "g1", fields: ["name": .string(name), "email": .string(email)]),
                deviceId: "d", at: Date(), offline: true)
            try await store.setSetting("token", "secret-token-value")
            // The record reads back in the clear through the API.
            #expect(try await store.record(collection: "guests", recordId: "g1")?.fields["email"] == .string(email))
            let files = ["", "-wal", "-shm"].map { URL(fileURLWithPath: url.path + $0) }
            var checked = 0
            for file in files where FileManager.default.fileExists(atPath: file.path) {
                let bytes = try Data(contentsOf: file)
                for secret in [name, email, "Zanzibar", "example.org", "secret-token-value"] {
                    #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(secret) found in \(file.lastPathComponent)")
                }
                checked += 1
            }
            #expect(checked >= 2)
        }
    }

    @Test("the key file is created with mode 0600, and a store does not open with another key")
    func keyFile() async throws {
        try await withStore { store, url in
            let keyPath = url.deletingPathExtension().appendingPathExtension("key").path
            let attributes = try FileManager.default.attributesOfItem(atPath: keyPath)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
            try await store.write(note("r1"), deviceId: "d", at: Date(), offline: false)
            let otherKey = try StaticKeyProvider(.init(size: .bits256)).key()
            let wrong = try LocalStore(url: url, keys: StaticKeyProvider(otherKey), schema: .fieldApps)
            await #expect(throws: ClientError.self) { _ = try await wrong.records() }
        }
    }

    @Test("rows left by an older version, with no status, read as synced")
    func legacyRows() async throws {
        try await withStore { store, url in
            try await store.write(note("legacy"), deviceId: "d", at: Date(), offline: false)
            let queue = try DatabaseQueue(path: url.path)
            try await queue.write { db in
                try db.execute(sql: "UPDATE records SET sync_status = NULL")
            }
            let record = try await store.record(collection: "notes", recordId: "legacy")
            #expect(record?.syncStatus == .synced)
            #expect(try await store.counts().pending == 0)
        }
    }

    @Test("a full disk is its own error, and what was saved before it stays")
    func diskFull() async throws {
        try await withStore { store, _ in
            // Given a store that may not grow past its current size, as on a full disk.
            try await store.write(note("r1"), deviceId: "d", at: Date(), offline: true)
            try await store.pool.writeWithoutTransaction { db in
                let pages = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 1
                try db.execute(sql: "PRAGMA max_page_count = \(pages)")
            }
            // When writes need more room.
            let large: JSONValue = .string(String(repeating: "x", count: 200_000))
            let error = await #expect(throws: ClientError.self) {
                for i in 0..<20 {
                    try await store.write(
                        LocalStore.Write(collection: "notes", recordId: "big\(i)", fields: ["text": large]), deviceId: "d",
                        at: Date(), offline: true)
                }
            }
            // Then the error says so, and the earlier record is still there.
            #expect(error?.code == .diskFull)
            #expect(error?.message.contains("full") == true)
            #expect(try await store.record(collection: "notes", recordId: "r1") != nil)
        }
    }

    @Test("a stored value this version does not know is a corrupt store, never read as another")
    func unknownStoredValues() async throws {
        try await withStore { store, url in
            try await store.write(note("r1"), deviceId: "d", at: Date(), offline: true)
            let queue = try DatabaseQueue(path: url.path)
            try await queue.write { db in try db.execute(sql: "UPDATE outbox SET op = 'merge'") }
            do {
                _ = try await store.outbox.nextChunk(limit: 10)
                Issue.record("an unknown operation was read as another")
            } catch let error as ClientError {
                #expect(error.code == .storeCorrupt)
            }
            try await queue.write { db in try db.execute(sql: "UPDATE records SET sync_status = 'teleported'") }
            await #expect(throws: ClientError.self) { _ = try await store.records() }
        }
    }

    @Test(
        "bad input is refused and nothing is written",
        arguments: [
            LocalStore.Write(collection: "notes", recordId: "../etc/passwd", fields: ["a": 1]),
            LocalStore.Write(collection: "notes", recordId: "ok", fields: ["bad name": 1]),
            LocalStore.Write(collection: "no/such", recordId: "ok", fields: ["a": 1]),
            LocalStore.Write(collection: "notes", recordId: "ok", fields: ["a": "nul\u{0}"]),
            LocalStore.Write(collection: "notes", recordId: "ok", fields: ["a": .string(String(repeating: "x", count: 256 * 1024))]),
            LocalStore.Write(
                collection: "notes", recordId: "ok",
                fields: Dictionary(uniqueKeysWithValues: (0..<257).map { ("f\($0)", JSONValue.integer(1)) })),
            LocalStore.Write(collection: "notes", recordId: "ok", fields: ["a": LocalStoreTests.nested(17)]),
        ])
    func badInput(write: LocalStore.Write) async throws {
        try await withStore { (store: LocalStore, _: URL) async throws -> Void in
            await #expect(throws: ClientError.self) {
                try await store.write(write, deviceId: "d", at: Date(), offline: false)
            }
            #expect(try await store.records().isEmpty)
            #expect(try await store.outbox.nextChunk(limit: 10).isEmpty)
        }
    }
}

extension LocalStoreTests {
    /// A value with arrays nested `depth` deep.
    static func nested(_ depth: Int) -> JSONValue {
        (0..<depth).reduce(JSONValue.string("x")) { inner, _ in .array([inner]) }
    }

    @Test("a value nested as deep as the server takes is kept; one level more is refused at saving")
    func nestingDepth() async throws {
        try await withStore { (store: LocalStore, _: URL) async throws -> Void in
            #expect(Self.nested(Mutation.maxValueDepth).depth == 16)
            try await store.write(
                .init(collection: "notes", recordId: "deep", fields: ["a": Self.nested(Mutation.maxValueDepth)]),
                deviceId: "d", at: Date(), offline: false)
            let error = await #expect(throws: ClientError.self) {
                try await store.write(
                    .init(collection: "notes", recordId: "deeper", fields: ["a": Self.nested(Mutation.maxValueDepth + 1)]),
                    deviceId: "d", at: Date(), offline: false)
            }
            #expect(error?.code == .invalidInput && error?.message.contains("16 deep") == true)
            #expect(try await store.outbox.nextChunk(limit: 10).map(\.mutation.recordId) == ["deep"])
        }
    }

    @Test("a write that would take a record past what the server keeps is refused, and the record keeps what it had")
    func recordGrowth() async throws {
        try await withStore { (store: LocalStore, _: URL) async throws -> Void in
            let large = JSONValue.string(String(repeating: "x", count: 200 * 1024))
            try await store.write(.init(collection: "notes", recordId: "r", fields: ["a": large]), deviceId: "d", at: Date(), offline: false)
            let error = await #expect(throws: ClientError.self) {
                try await store.write(
                    .init(collection: "notes", recordId: "r", fields: ["b": large]), deviceId: "d", at: Date(), offline: false)
            }
            #expect(error?.code == .invalidInput && error?.message.contains("256 KiB") == true)
            #expect(try await store.record(collection: "notes", recordId: "r")?.fields.keys.sorted() == ["a"])
            #expect(try await store.outbox.nextChunk(limit: 10).count == 1)
            // Replacing the large value makes room.
            try await store.write(
                .init(collection: "notes", recordId: "r", fields: ["a": "small", "b": large]), deviceId: "d", at: Date(), offline: false)
            #expect(try await store.outbox.nextChunk(limit: 10).count == 2)
        }
    }

    @Test("a chunk ends before the write that would take it past 4 MiB, so a push of large records fits the server")
    func chunkBytes() async throws {
        try await withStore { (store: LocalStore, _: URL) async throws -> Void in
            let large = JSONValue.string(String(repeating: "x", count: 200 * 1024))
            for index in 0..<30 {
                try await store.write(
                    .init(collection: "notes", recordId: "r\(index)", fields: ["a": large]), deviceId: "d", at: Date(),
                    offline: false)
            }
            let first = try await store.outbox.nextChunk(limit: 50)
            #expect(first.count == 20)
            let weight = first.reduce(0) { $0 + JSONValue.object($1.mutation.fields).encodedSizeBound }
            #expect(weight <= Outbox.chunkMaxBytes)
            let rest = try await store.outbox.nextChunk(after: try #require(first.last?.seq), limit: 50)
            #expect(rest.count == 10)
            // One entry larger than the budget still goes, alone.
            #expect(try await store.outbox.nextChunk(limit: 50, maxBytes: 10).count == 1)
        }
    }
}

extension LocalStore.Write: CustomTestStringConvertible {
    public var testDescription: String { "\(collection)/\(recordId) \(fields.keys.sorted())" }
}
