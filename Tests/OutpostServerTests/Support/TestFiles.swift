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

/// How many upload rows and stored ranges a tenant has, as the tables hold them.
struct StoredFileRows: Sendable, Equatable {
    var files: Int
    var chunks: Int
}

extension SyncStorage {
    /// The rows of `tenant`'s files, counted in the tables themselves rather than through the storage's own reads.
    func storedFileRows(tenant: String = "acme") async throws -> StoredFileRows {
        if let sqlite = self as? SQLiteStorage {
            return try await sqlite.pool.read { db in
                StoredFileRows(
                    files: try Int.fetchOne(db, sql: "SELECT count(*) FROM files WHERE tenant = ?", arguments: [tenant]) ?? -1,
                    chunks: try Int.fetchOne(db, sql: "SELECT count(*) FROM file_chunks WHERE tenant = ?", arguments: [tenant]) ?? -1)
            }
        }
        let postgres = try #require(self as? PostgresStorage)
        let rows = try await postgres.client.query(
            """
            SELECT (SELECT count(*) FROM files WHERE tenant = \(tenant)), (SELECT count(*) FROM file_chunks WHERE tenant = \(tenant))
            """)
        for try await (files, chunks) in rows.decode((Int64, Int64).self) {
            return StoredFileRows(files: Int(files), chunks: Int(chunks))
        }
        return StoredFileRows(files: -1, chunks: -1)
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
