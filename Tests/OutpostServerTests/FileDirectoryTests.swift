import Foundation
import NIOCore
import Testing

@testable import OutpostServer

/// The bytes of files in a directory: whole blocks written straight to the disk, the partial ones at either end of
/// a range through the page cache, and every byte read back as written, wherever the ranges fall.
@Suite("File directory")
struct FileDirectoryTests {
    static let bytes: [UInt8] = (0..<(9 * 1024 * 1024 + 777)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }

    /// Ranges that start and end on and off block boundaries, longer and shorter than a block and than the
    /// memory one direct write takes.
    static let cuts = [0, 100, 4096, 4096 * 3 + 17, 4 * 1024 * 1024 + 4096, 4 * 1024 * 1024 + 9000, 9 * 1024 * 1024 + 777]

    /// Every folder a file directory may be in here: the temporary folder (direct writes where its file system
    /// takes them) and, where there is one, a memory file system, which takes none.
    static var roots: [URL] {
        var roots = [FileManager.default.temporaryDirectory]
        if FileManager.default.isWritableFile(atPath: "/dev/shm") { roots.append(URL(fileURLWithPath: "/dev/shm")) }
        return roots
    }

    @Test("ranges on and off block boundaries read back as they were written", arguments: roots)
    func rangesReadBack(root: URL) async throws {
        let folder = root.appendingPathComponent("outpost-test-files-\(UUID())")
        defer { try? FileManager.default.removeItem(at: folder) }
        let directory = FileDirectory(root: folder)
        try directory.prepare()
        for (start, end) in zip(Self.cuts, Self.cuts.dropFirst()) {
            try directory.append(ByteBuffer(bytes: Self.bytes[start..<end]), tenant: "acme", sha256: "f", at: Int64(start))
        }
        try directory.flush(tenant: "acme", sha256: "f")
        var read: [UInt8] = []
        while read.count < Self.bytes.count {
            let chunk = try #require(try await directory.read(tenant: "acme", sha256: "f", at: Int64(read.count)))
            read += chunk.bytes.readableBytesView
        }
        #expect(read == Self.bytes)
        // Written again from 0, the file starts anew.
        try directory.append(ByteBuffer(bytes: Self.bytes[0..<5000]), tenant: "acme", sha256: "f", at: 0)
        let attributes = try FileManager.default.attributesOfItem(atPath: directory.path(tenant: "acme", sha256: "f"))
        #expect(attributes[.size] as? Int == 5000)
    }
}
