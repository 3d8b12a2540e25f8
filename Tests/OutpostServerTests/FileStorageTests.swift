import Foundation
import NIOCore
import OutpostProtocol
import Testing

@testable import OutpostServer

/// What every engine must do with the files records carry, on SQLite and on a real PostgreSQL: the storage beneath
/// the routes of ``FileTests``, met directly, where the routes' own checks cannot stand in for it.
@Suite("File storage")
struct FileStorageTests {
    static let file = TestFile(count: 20_000, seed: 11)
    static var sha: String { file.reference.sha256 }

    static func append(
        _ storage: any SyncStorage, _ range: Range<Int>, size: Int64 = 20_000, type: String = "image/jpeg", tenant: String = "acme",
        at time: Int64 = 1
    ) async throws -> RangeAppend {
        try await storage.appendRange(
            tenant: tenant, sha256: sha, size: size, type: type, offset: Int64(range.lowerBound),
            bytes: ByteBuffer(bytes: file.range(range)), at: time)
    }

    static func state(received: Int64, complete: Bool = false) -> FileUpload {
        FileUpload(sha256: sha, size: 20_000, type: "image/jpeg", received: received, complete: complete)
    }

    @Test(
        "a range is stored only at the bytes received, of an upload declared alike, and never once it is complete",
        arguments: StorageKind.fileStores)
    func appendsInOrder(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            var outcome: RangeAppend
            // With no upload, only a first range makes one.
            outcome = try await Self.append(storage, 5_000..<6_000)
            #expect(outcome == .refused(Self.state(received: 0)))
            #expect(try await storage.upload(tenant: "acme", sha256: Self.sha) == nil)
            outcome = try await Self.append(storage, 0..<7_000)
            #expect(outcome == .appended(Self.state(received: 7_000), began: 1))
            // A range sent again, one ahead, or one of the same digest declared otherwise changes nothing.
            outcome = try await Self.append(storage, 0..<7_000)
            #expect(outcome == .refused(Self.state(received: 7_000)))
            outcome = try await Self.append(storage, 14_000..<20_000)
            #expect(outcome == .refused(Self.state(received: 7_000)))
            outcome = try await Self.append(storage, 7_000..<14_000, size: 30_000)
            #expect(outcome == .refused(Self.state(received: 7_000)))
            outcome = try await Self.append(storage, 7_000..<14_000, type: "image/png")
            #expect(outcome == .refused(Self.state(received: 7_000)))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 7_000))
            // Not complete before every byte is in,
            #expect(try await !storage.completeUpload(tenant: "acme", sha256: Self.sha))
            outcome = try await Self.append(storage, 7_000..<20_000)
            #expect(outcome == .appended(Self.state(received: 20_000), began: 1))
            #expect(try await storage.completeFiles(tenant: "acme", sha256s: [Self.sha]).isEmpty)
            #expect(try await storage.completeUpload(tenant: "acme", sha256: Self.sha))
            // and complete, it takes nothing more and is never discarded.
            outcome = try await Self.append(storage, 0..<7_000)
            #expect(outcome == .refused(Self.state(received: 20_000, complete: true)))
            #expect(try await !storage.discardUpload(tenant: "acme", sha256: Self.sha))
            let complete = try await storage.completeFiles(tenant: "acme", sha256s: [Self.sha, String(repeating: "0", count: 64)])
            #expect(complete == [Self.sha: Self.state(received: 20_000, complete: true)])
            #expect(try await storage.completeFiles(tenant: "globex", sha256s: [Self.sha]).isEmpty)
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 20_000))
        }
    }

    @Test("ranges sent at once at one offset: one is stored, the others are refused", arguments: StorageKind.fileStores)
    func concurrentRanges(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            for range in [0..<7_000, 7_000..<14_000] {
                let outcomes = try await withThrowingTaskGroup(of: RangeAppend.self) { group in
                    for _ in 0..<8 { group.addTask { try await Self.append(storage, range) } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                let appended = outcomes.filter { if case .appended = $0 { true } else { false } }
                #expect(appended == [.appended(Self.state(received: Int64(range.upperBound)), began: 1)], "\(range)")
            }
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 14_000))
        }
    }

    @Test("a discarded upload leaves no row and no byte, and starts again from 0", arguments: StorageKind.fileStores)
    func discards(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            _ = try await Self.append(storage, 0..<7_000)
            _ = try await Self.append(storage, 7_000..<14_000)
            _ = try await Self.append(storage, 0..<5_000, tenant: "globex")
            #expect(try await storage.discardUpload(tenant: "acme", sha256: Self.sha))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 0, bytes: 0))
            #expect(try await storage.fileChunk(tenant: "acme", sha256: Self.sha, containing: 0) == nil)
            // Another tenant's upload of the same file is its own.
            #expect(try await storage.storedFileRows(tenant: "globex") == StoredFileRows(files: 1, bytes: 5_000))
            let outcome = try await Self.append(storage, 0..<7_000)
            #expect(outcome == .appended(Self.state(received: 7_000), began: 1))
        }
    }

    @Test(
        "an unfinished upload declared otherwise is forgotten once quiet since the time given, never while it takes bytes, and never once complete",
        arguments: StorageKind.fileStores)
    func quietUploadDeclaredOtherwise(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            func discard(
                size: Int64 = 20_000, type: String = "image/jpeg", tenant: String = "acme", idleSince time: Int64
            )
                async throws -> Bool
            {
                try await storage.discardUpload(tenant: tenant, sha256: Self.sha, declaredOtherThan: size, type: type, idleSince: time)
            }
            // Given 7,000 bytes of the file declared 30,000 bytes long, the last taken at 1,000, and another tenant's
            // declared as a PNG,
            _ = try await Self.append(storage, 0..<5_000, size: 30_000, at: 500)
            _ = try await Self.append(storage, 5_000..<7_000, size: 30_000, at: 1_000)
            _ = try await Self.append(storage, 0..<3_000, type: "image/png", tenant: "globex", at: 1_000)
            // an upload declared alike never gives way to it, nor one that took a byte since the time given;
            #expect(try await !discard(size: 30_000, idleSince: 5_000))
            #expect(try await !discard(idleSince: 1_000))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 7_000))
            // quiet since, it is forgotten with its bytes, for another size as for another type,
            #expect(try await discard(idleSince: 1_001))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 0, bytes: 0))
            #expect(try await storage.upload(tenant: "acme", sha256: Self.sha) == nil)
            #expect(try await discard(tenant: "globex", idleSince: 1_001))
            #expect(try await storage.storedFileRows(tenant: "globex") == StoredFileRows(files: 0, bytes: 0))
            // and the file declared rightly goes up from 0. Complete, it never gives way.
            #expect(try await Self.append(storage, 0..<20_000, at: 2_000) == .appended(Self.state(received: 20_000), began: 2_000))
            #expect(try await storage.completeUpload(tenant: "acme", sha256: Self.sha))
            #expect(try await !discard(size: 30_000, type: "image/png", idleSince: .max))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 20_000))
        }
    }

    @Test("a file reads back from any byte, a stored range or a megabyte at a time", arguments: StorageKind.fileStores)
    func readsFromAnyByte(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            for range in [0..<7_000, 7_000..<14_000, 14_000..<20_000] { _ = try await Self.append(storage, range) }
            // A range as it was stored from the database, a read of at most a megabyte from a directory.
            let inDirectory = storage.fileDirectory != nil
            for (offset, pieces) in [(0, 3), (6_999, 3), (7_000, 2), (13_000, 2), (19_999, 1), (20_000, 0)] {
                var read: [UInt8] = []
                var count = 0
                for try await bytes in storage.fileBytes(tenant: "acme", sha256: Self.sha, from: Int64(offset), size: 20_000) {
                    read += bytes.readableBytesView
                    count += 1
                }
                #expect(read == Array(Self.file.bytes[offset...]), "from \(offset)")
                #expect(count == (inDirectory ? min(pieces, 1) : pieces), "from \(offset)")
            }
            // A file whose bytes are not all there fails to read rather than read short.
            await #expect(throws: StorageError.self) {
                for try await _ in storage.fileBytes(tenant: "acme", sha256: Self.sha, from: 0, size: 30_000) {}
            }
        }
    }

    @Test(
        "uploads left unfinished past their lifetime are forgotten with their bytes; finished files and newer uploads stay",
        arguments: StorageKind.fileStores)
    func staleUploadsExpire(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            let day: Int64 = 24 * 3600 * 1000
            let (old, fresh, done) = (TestFile(count: 9_000, seed: 31), TestFile(count: 8_000, seed: 32), TestFile(count: 7_000, seed: 33))
            // Given an upload begun eight days ago and cut, one begun an hour ago, and a file finished eight days ago,
            for (file, begun, count) in [(old, 1 * day, 4_000), (fresh, 8 * day - 3_600_000, 3_000), (done, 1 * day, 7_000)] {
                _ = try await storage.appendRange(
                    tenant: "acme", sha256: file.reference.sha256, size: file.reference.size, type: "image/jpeg", offset: 0,
                    bytes: ByteBuffer(bytes: file.range(0..<count)), at: begun)
            }
            #expect(try await storage.completeUpload(tenant: "acme", sha256: done.reference.sha256))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 3, bytes: 14_000))
            // when the expiry looks on day nine with a lifetime of seven days,
            func look<S: SyncStorage>(_ storage: S) async -> Int {
                await UploadExpiry(
                    storage: storage, lifetime: .seconds(7 * 24 * 3600), clock: ContinuousClock(),
                    now: { Date(timeIntervalSince1970: TimeInterval(9 * day) / 1000) }, logger: Fixtures.quietLogger,
                    metrics: ServerMetrics()
                ).look()
            }
            #expect(await look(storage) == 1)
            // the old upload is gone, row and bytes, and starts again from 0; the rest stand.
            #expect(try await storage.upload(tenant: "acme", sha256: old.reference.sha256) == nil)
            #expect(try await storage.upload(tenant: "acme", sha256: fresh.reference.sha256)?.received == 3_000)
            #expect(try await storage.completeFiles(tenant: "acme", sha256s: [done.reference.sha256]).count == 1)
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 2, bytes: 10_000))
            #expect(await look(storage) == 0)
        }
    }

    @Test("PostgreSQL given a file directory reads the files it kept in its database, and restarts their unfinished uploads")
    func postgresNamesADirectory() async throws {
        try await withPostgresDatabase { url in
            let partial = TestFile(count: 5_000, seed: 13)
            // Given a file and an unfinished upload kept in the database,
            let before = PostgresStorage(
                location: try PostgresLocation(url: url), logger: Fixtures.quietLogger, startupTimeout: Fixtures.postgresStartup)
            try await before.withRunning { storage in
                try await storage.migrate()
                for range in [0..<7_000, 7_000..<20_000] { _ = try await Self.append(storage, range) }
                #expect(try await storage.completeUpload(tenant: "acme", sha256: Self.sha))
                _ = try await storage.appendRange(
                    tenant: "acme", sha256: partial.reference.sha256, size: 5_000, type: "image/jpeg", offset: 0,
                    bytes: ByteBuffer(bytes: partial.range(0..<3_000)), at: 1)
            }
            // a server of the same database that names a directory
            let (after, files) = try StorageKind.postgresFileDirectory.postgres(url: url)
            defer { if let files { try? FileManager.default.removeItem(at: files) } }
            try await after.withRunning { storage in
                try await storage.migrate()
                // reads the file from the database,
                var read: [UInt8] = []
                for try await bytes in storage.fileBytes(tenant: "acme", sha256: Self.sha, from: 0, size: 20_000) {
                    read += bytes.readableBytesView
                }
                #expect(read == Self.file.bytes)
                // and makes the unfinished upload start again from 0, its bytes not being in the directory.
                let rest = try await storage.appendRange(
                    tenant: "acme", sha256: partial.reference.sha256, size: 5_000, type: "image/jpeg", offset: 3_000,
                    bytes: ByteBuffer(bytes: partial.range(3_000..<5_000)), at: 2)
                #expect(rest == .refused(FileUpload(sha256: partial.reference.sha256, size: 5_000, type: "image/jpeg", received: 0, complete: false)))
                #expect(try await storage.upload(tenant: "acme", sha256: partial.reference.sha256) == nil)
            }
        }
    }

    @Test("a SQLite store that kept files in its database moves their bytes to its file directory as it opens")
    func movesChunksToDirectory() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-test-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        // Given a store migrated as far as the migration that made `file_chunks`, with a file kept there in two
        // ranges and an upload cut after one,
        let storage = try SQLiteStorage(directory: directory)
        try SQLiteStorage.migrator.migrate(storage.pool, upTo: "v12-device-pending-upload-bytes")
        let partial = TestFile(count: 5_000, seed: 12)
        try await storage.pool.write { db in
            for (sha, size, received) in [(Self.sha, 20_000, 20_000), (partial.reference.sha256, 5_000, 3_000)] {
                try db.execute(
                    sql: "INSERT INTO files VALUES ('acme', ?, ?, 'image/jpeg', ?, ?, 1)",
                    arguments: [sha, size, received, received == size])
            }
            for (sha, start, bytes) in [
                (Self.sha, 0, Self.file.range(0..<7_000)), (Self.sha, 7_000, Self.file.range(7_000..<20_000)),
                (partial.reference.sha256, 0, partial.range(0..<3_000)),
            ] {
                try db.execute(sql: "INSERT INTO file_chunks VALUES ('acme', ?, ?, ?)", arguments: [sha, start, Data(bytes)])
            }
        }
        // when it opens as a server opens it,
        try await storage.migrate()
        // each file reads back whole from the directory, the table is gone, and the cut upload goes on.
        var read: [UInt8] = []
        for try await bytes in storage.fileBytes(tenant: "acme", sha256: Self.sha, from: 0, size: 20_000) {
            read += bytes.readableBytesView
        }
        #expect(read == Self.file.bytes)
        #expect(try await storage.pool.read { db in try db.tableExists("file_chunks") } == false)
        #expect(try await storage.storedFileRows() == StoredFileRows(files: 2, bytes: 23_000))
        let rest = try await storage.appendRange(
            tenant: "acme", sha256: partial.reference.sha256, size: 5_000, type: "image/jpeg", offset: 3_000,
            bytes: ByteBuffer(bytes: partial.range(3_000..<5_000)), at: 2)
        #expect(
            rest
                == .appended(
                    FileUpload(sha256: partial.reference.sha256, size: 5_000, type: "image/jpeg", received: 5_000, complete: false), began: 1))
        // Opened again, there is nothing more to move.
        try await storage.migrate()
        #expect(try await storage.storedFileRows() == StoredFileRows(files: 2, bytes: 25_000))
    }
}
