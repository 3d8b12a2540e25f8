import NIOCore
import OutpostProtocol

/// What appending a range to an upload did.
package enum RangeAppend: Sendable, Hashable {
    /// The range is stored; the upload as it now stands, and when it began (milliseconds since 1970): an upload
    /// forgotten and begun again is another one, whatever its digest.
    case appended(FileUpload, began: Int64)
    /// Nothing was stored: the server's upload of the digest stands at another offset, is complete, or was
    /// declared with another size or type. Its state as stored; with no upload yet (or one whose bytes were
    /// missing from the file directory, which is then forgotten), the one declared, at 0 bytes.
    case refused(FileUpload)
}

/// One stored range of a file: its bytes, which start at byte `start` of the file.
package struct FileChunk: Sendable, Hashable {
    package var start: Int64
    package var bytes: ByteBuffer

    package init(start: Int64, bytes: ByteBuffer) {
        self.start = start
        self.bytes = bytes
    }
}

/// Files that records carry, by tenant and SHA-256 digest: each upload's state in the database, and its bytes in
/// a ``FileDirectory`` or, on PostgreSQL without one, as the ranges that were sent, one row per range.
///
/// A file is stored once per tenant however many records name it. A complete file never changes and is never
/// discarded, so that its bytes may be read a range at a time, each read on its own, and a mutation the server
/// took with a file always finds it.
package protocol FileStorage: Sendable {
    /// The upload of `sha256`, complete or not, or nil when the tenant has none.
    func upload(tenant: String, sha256: String) async throws -> FileUpload?

    /// Stores `bytes` as the range of the file that starts at `offset`, in one transaction: when the upload
    /// holds exactly `offset` bytes, is not complete and was declared with this `size` and `type`. The first
    /// range, at offset 0, makes the upload, received `at` (milliseconds since 1970). An empty range stores no
    /// row and writes no byte. The caller keeps `offset + bytes` within `size`.
    func appendRange(
        tenant: String, sha256: String, size: Int64, type: String, offset: Int64, bytes: ByteBuffer, at time: Int64
    ) async throws -> RangeAppend

    /// The stored range that holds byte `offset` of the file (from a directory, up to ``FileDirectory/readBytes``
    /// from the offset), or nil when there is none.
    func fileChunk(tenant: String, sha256: String, containing offset: Int64) async throws -> FileChunk?

    /// Marks the upload complete once it holds all its bytes; false when it does not, is complete already, or there
    /// is none.
    func completeUpload(tenant: String, sha256: String) async throws -> Bool

    /// Forgets an upload that is not complete, its row and every range; false when there was none to forget.
    func discardUpload(tenant: String, sha256: String) async throws -> Bool

    /// Forgets the upload of `sha256` when it is not complete, was declared with another size or type than `size`
    /// and `type`, and took no byte since `time` (milliseconds since 1970), its row and its bytes; false when there
    /// is none such. The digest fixes the bytes, so two declarations of one file cannot both be right, and the
    /// server cannot tell which is: the upload that has gone quiet gives way, so that a device that declared a file
    /// wrongly and went away keeps the others out for minutes, not for the upload's whole lifetime.
    func discardUpload(
        tenant: String, sha256: String, declaredOtherThan size: Int64, type: String, idleSince time: Int64
    )
        async throws -> Bool

    /// Forgets every upload, of any tenant, that is not complete and took no byte since `time` (milliseconds since
    /// 1970), its row and its bytes: a device that comes back for it starts again from 0. How many were forgotten.
    func discardStaleUploads(before time: Int64) async throws -> Int

    /// The bytes every tenant's files hold: of complete files, and received by uploads not finished.
    func storedFileBytes() async throws -> (complete: Int64, unfinished: Int64)

    /// The bytes `tenant`'s files take: complete ones, and unfinished uploads at their whole declared size.
    func tenantFileBytes(tenant: String) async throws -> Int64

    /// The complete files among `sha256s`, by digest.
    func completeFiles(tenant: String, sha256s: [String]) async throws -> [String: FileUpload]
}

extension FileStorage {
    /// The file's bytes from `offset` to its end, a stored range at a time: memory holds one range, whatever the
    /// file's size. The ranges are read each on its own, so only a complete file, which never changes, reads whole.
    package func fileBytes(tenant: String, sha256: String, from offset: Int64, size: Int64) -> FileBytes {
        FileBytes(next: offset, size: size) { offset in
            try await fileChunk(tenant: tenant, sha256: sha256, containing: offset)
        }
    }
}

/// A file's bytes in order, from an offset, a stored range at a time (``FileStorage/fileBytes(tenant:sha256:from:size:)``).
package struct FileBytes: AsyncSequence, Sendable {
    package typealias Element = ByteBuffer

    let offset: Int64
    let size: Int64
    let chunk: @Sendable (Int64) async throws -> FileChunk?

    init(next offset: Int64, size: Int64, chunk: @escaping @Sendable (Int64) async throws -> FileChunk?) {
        self.offset = offset
        self.size = size
        self.chunk = chunk
    }

    package struct AsyncIterator: AsyncIteratorProtocol {
        var offset: Int64
        let size: Int64
        let chunk: @Sendable (Int64) async throws -> FileChunk?

        package mutating func next() async throws -> ByteBuffer? {
            guard offset < size else { return nil }
            guard let found = try await chunk(offset), found.start <= offset,
                case let end = Swift.min(size, found.start + Int64(found.bytes.readableBytes)), end > offset,
                let bytes = found.bytes.getSlice(
                    at: found.bytes.readerIndex + Int(offset - found.start), length: Int(end - offset))
            else {
                throw StorageError(.corrupt, "a stored file has no bytes at \(offset)")
            }
            offset = end
            return bytes
        }
    }

    package func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(offset: offset, size: size, chunk: chunk)
    }
}
