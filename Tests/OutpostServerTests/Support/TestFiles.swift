import Crypto
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import NIOCore
import OutpostProtocol
import PostgresNIO
import Testing

@testable import OutpostServer

/// A file's bytes and the reference a record carries for them.
struct TestFile {
    var bytes: [UInt8]
    var reference: FileReference

    /// `count` bytes that differ with `seed`, of media type `type`: a pseudo-random block of at most 64 KiB, repeated
    /// (a large file costs the test process a copy per block, not a step per byte).
    init(count: Int, seed: UInt8 = 1, type: String = "image/jpeg") {
        var state = UInt32(seed) &* 2_654_435_761 | 1
        let block = (0..<min(count, 65_536)).map { _ in
            state ^= state << 13
            state ^= state >> 17
            state ^= state << 5
            return UInt8(truncatingIfNeeded: state)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        while bytes.count < count { bytes.append(contentsOf: block.prefix(count - bytes.count)) }
        self.bytes = bytes
        reference = FileReference(
            sha256: SHA256.hash(data: bytes).hexString, size: Int64(count), type: type, name: "photo.jpg")
    }

    /// The bytes of `range`, as a range is sent.
    func range(_ range: Range<Int>) -> ArraySlice<UInt8> { bytes[range] }
}

/// How many upload rows a tenant has, and how many bytes of files are stored for it, as the tables and the file
/// directory hold them.
struct StoredFileRows: Sendable, Equatable {
    var files: Int
    var bytes: Int
}

extension SyncStorage {
    /// Where this store keeps the bytes of files, when in a directory.
    var fileDirectory: FileDirectory? {
        (self as? SQLiteStorage)?.files ?? (self as? PostgresStorage)?.files
    }

    /// The rows of `tenant`'s files and their stored bytes, counted in the tables and the directory themselves
    /// rather than through the storage's own reads.
    func storedFileRows(tenant: String = "acme") async throws -> StoredFileRows {
        let files: Int
        var bytes = 0
        if let sqlite = self as? SQLiteStorage {
            files = try await sqlite.pool.read { db in
                try Int.fetchOne(db, sql: "SELECT count(*) FROM files WHERE tenant = ?", arguments: [tenant]) ?? -1
            }
        } else {
            let postgres = try #require(self as? PostgresStorage)
            let rows = try await postgres.client.query(
                """
                SELECT (SELECT count(*) FROM files WHERE tenant = \(tenant)),
                  (SELECT coalesce(sum(length(bytes)), 0) FROM file_chunks WHERE tenant = \(tenant))
                """)
            var counted = (files: -1, bytes: -1)
            for try await (files, bytes) in rows.decode((Int64, Int64).self) { counted = (Int(files), Int(bytes)) }
            (files, bytes) = counted
        }
        if let directory = fileDirectory {
            // The tenant's folder: the one beside a made-up digest's file.
            let folder = URL(fileURLWithPath: directory.path(tenant: tenant, sha256: String(repeating: "0", count: 64)))
                .deletingLastPathComponent().deletingLastPathComponent()
            let found = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.fileSizeKey, .isRegularFileKey])
            while let url = found?.nextObject() as? URL {
                let values = try url.resourceValues(forKeys: [.fileSizeKey, .isRegularFileKey])
                if values.isRegularFile == true { bytes += values.fileSize ?? 0 }
            }
        }
        return StoredFileRows(files: files, bytes: bytes)
    }
}

extension TestClientProtocol {
    /// `PUT /v1/uploads/{sha256}` of one range of `file`, starting at `offset`.
    func putRange(
        _ bytes: some Collection<UInt8>, of file: FileReference, at offset: Int64, collection: String = "builds", token: String
    ) async throws -> TestResponse {
        try await send(
            .put,
            "/v1/uploads/\(file.sha256)?collection=\(collection)&size=\(file.size)&type=\(file.type)&offset=\(offset)",
            token: token, body: ByteBuffer(bytes: bytes), headers: [.contentType: "application/octet-stream"])
    }

    /// `GET /v1/uploads/{sha256}`: the upload's state, or nil on 404.
    func uploadState(_ file: FileReference, collection: String = "builds", token: String) async throws -> FileUpload? {
        let response = try await send(.get, "/v1/uploads/\(file.sha256)?collection=\(collection)", token: token)
        if response.status == .notFound {
            #expect(response.wireError?.code == .notFound)
            return nil
        }
        #expect(response.status == .ok)
        return try JSONDecoder().decode(FileUpload.self, from: response.body)
    }

    /// `GET /v1/files/{sha256}` through record `recordId`.
    func download(
        _ file: FileReference, collection: String = "builds", recordId: String, scope: String? = nil, token: String,
        headers: HTTPFields = [:]
    ) async throws -> TestResponse {
        let scope = scope.map { "&scope=\($0)" } ?? ""
        return try await send(
            .get, "/v1/files/\(file.sha256)?collection=\(collection)&recordId=\(recordId)\(scope)", token: token, headers: headers)
    }
}
