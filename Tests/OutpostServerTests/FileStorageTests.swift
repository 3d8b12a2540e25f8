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
        _ storage: any SyncStorage, _ range: Range<Int>, size: Int64 = 20_000, type: String = "image/jpeg", tenant: String = "acme"
    ) async throws -> RangeAppend {
        try await storage.appendRange(
            tenant: tenant, sha256: sha, size: size, type: type, offset: Int64(range.lowerBound),
            bytes: ByteBuffer(bytes: file.range(range)), at: 1)
    }

    static func state(received: Int64, complete: Bool = false) -> FileUpload {
        FileUpload(sha256: sha, size: 20_000, type: "image/jpeg", received: received, complete: complete)
    }

    @Test(
        "a range is stored only at the bytes received, of an upload declared alike, and never once it is complete",
        arguments: StorageKind.allCases)
    func appendsInOrder(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            var outcome: RangeAppend
            // With no upload, only a first range makes one.
            outcome = try await Self.append(storage, 5_000..<6_000)
            #expect(outcome == .refused(Self.state(received: 0)))
            #expect(try await storage.upload(tenant: "acme", sha256: Self.sha) == nil)
            outcome = try await Self.append(storage, 0..<7_000)
            #expect(outcome == .appended(Self.state(received: 7_000)))
            // A range sent again, one ahead, or one of the same digest declared otherwise changes nothing.
            outcome = try await Self.append(storage, 0..<7_000)
            #expect(outcome == .refused(Self.state(received: 7_000)))
            outcome = try await Self.append(storage, 14_000..<20_000)
            #expect(outcome == .refused(Self.state(received: 7_000)))
            outcome = try await Self.append(storage, 7_000..<14_000, size: 30_000)
            #expect(outcome == .refused(Self.state(received: 7_000)))
            outcome = try await Self.append(storage, 7_000..<14_000, type: "image/png")
            #expect(outcome == .refused(Self.state(received: 7_000)))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, chunks: 1))
            // Not complete before every byte is in,
            #expect(try await !storage.completeUpload(tenant: "acme", sha256: Self.sha))
            outcome = try await Self.append(storage, 7_000..<20_000)
            #expect(outcome == .appended(Self.state(received: 20_000)))
            #expect(try await storage.completeFiles(tenant: "acme", sha256s: [Self.sha]).isEmpty)
            #expect(try await storage.completeUpload(tenant: "acme", sha256: Self.sha))
            // and complete, it takes nothing more and is never discarded.
            outcome = try await Self.append(storage, 0..<7_000)
            #expect(outcome == .refused(Self.state(received: 20_000, complete: true)))
            #expect(try await !storage.discardUpload(tenant: "acme", sha256: Self.sha))
            let complete = try await storage.completeFiles(tenant: "acme", sha256s: [Self.sha, String(repeating: "0", count: 64)])
            #expect(complete == [Self.sha: Self.state(received: 20_000, complete: true)])
            #expect(try await storage.completeFiles(tenant: "globex", sha256s: [Self.sha]).isEmpty)
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, chunks: 2))
        }
    }

    @Test("ranges sent at once at one offset: one is stored, the others are refused", arguments: StorageKind.allCases)
    func concurrentRanges(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            for range in [0..<7_000, 7_000..<14_000] {
                let outcomes = try await withThrowingTaskGroup(of: RangeAppend.self) { group in
                    for _ in 0..<8 { group.addTask { try await Self.append(storage, range) } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                let appended = outcomes.filter { if case .appended = $0 { true } else { false } }
                #expect(appended == [.appended(Self.state(received: Int64(range.upperBound)))], "\(range)")
            }
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, chunks: 2))
        }
    }

    @Test("a discarded upload leaves no row and no byte, and starts again from 0", arguments: StorageKind.allCases)
    func discards(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            _ = try await Self.append(storage, 0..<7_000)
            _ = try await Self.append(storage, 7_000..<14_000)
            _ = try await Self.append(storage, 0..<5_000, tenant: "globex")
            #expect(try await storage.discardUpload(tenant: "acme", sha256: Self.sha))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 0, chunks: 0))
            #expect(try await storage.fileChunk(tenant: "acme", sha256: Self.sha, containing: 0) == nil)
            // Another tenant's upload of the same file is its own.
            #expect(try await storage.storedFileRows(tenant: "globex") == StoredFileRows(files: 1, chunks: 1))
            let outcome = try await Self.append(storage, 0..<7_000)
            #expect(outcome == .appended(Self.state(received: 7_000)))
        }
    }

    @Test("a file reads back from any byte, a stored range at a time", arguments: StorageKind.allCases)
    func readsFromAnyByte(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            for range in [0..<7_000, 7_000..<14_000, 14_000..<20_000] { _ = try await Self.append(storage, range) }
            for (offset, pieces) in [(0, 3), (6_999, 3), (7_000, 2), (13_000, 2), (19_999, 1), (20_000, 0)] {
                var read: [UInt8] = []
                var count = 0
                for try await bytes in storage.fileBytes(tenant: "acme", sha256: Self.sha, from: Int64(offset), size: 20_000) {
                    read += bytes.readableBytesView
                    count += 1
                }
                #expect(read == Array(Self.file.bytes[offset...]), "from \(offset)")
                #expect(count == pieces, "from \(offset)")
            }
            // A file whose bytes are not all there fails to read rather than read short.
            await #expect(throws: StorageError.self) {
                for try await _ in storage.fileBytes(tenant: "acme", sha256: Self.sha, from: 0, size: 30_000) {}
            }
        }
    }
}
