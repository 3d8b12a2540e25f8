import Foundation
import OutpostProtocol

/// A transport that carries the files records name (``FileReference``): uploads by digest, from where the server's
/// bytes end, and downloads of a record's file.
///
/// The engine uploads a record's files before the mutation that names them; a transport without this protocol
/// carries no files, and such a mutation waits, failed with the reason, until one that does.
public protocol FileTransport: SyncTransport {
    /// How far the server has the upload of `sha256`, for a record of `collection`; nil when it has none of it.
    func upload(of sha256: String, collection: String) async throws -> FileUpload?

    /// Sends the bytes of `file` that `body` reads, from its offset (which must be the bytes the server holds): all
    /// of them in one request, as the server stores them as they arrive, or as many as the transport sends at once.
    /// The server's state after it; a request cut part-way leaves the server holding what it stored, which
    /// ``upload(of:collection:)`` then says.
    func uploadRange(_ body: UploadBody, of file: FileReference, collection: String) async throws -> FileUpload

    /// The file `sha256` that record `recordId` names, from byte `offset`: `receive` is given its bytes in order as
    /// they come, and may throw to stop.
    func download(
        _ sha256: String, collection: String, scope: String?, recordId: String, from offset: Int64,
        receive: @escaping @Sendable (Data) async throws -> Void
    ) async throws
}

/// The bytes of a file from an offset to its end, read from the device's store a piece at a time as a transport
/// sends them. Each ``pieces()`` reads them from the offset again, so that a request sent again (with a renewed
/// token) carries the same bytes.
public struct UploadBody: Sendable {
    /// Where the bytes start in the file.
    public let offset: Int64
    /// How many bytes there are, to the file's end.
    public let count: Int64
    private let read: @Sendable () -> AsyncThrowingStream<Data, any Error>

    /// - Parameter pieces: makes a stream of the bytes in order, `count` of them in all.
    public init(offset: Int64, count: Int64, pieces: @escaping @Sendable () -> AsyncThrowingStream<Data, any Error>) {
        self.offset = offset
        self.count = count
        self.read = pieces
    }

    /// Bytes already in memory.
    public init(_ data: Data, at offset: Int64) {
        self.init(offset: offset, count: Int64(data.count)) {
            AsyncThrowingStream { continuation in
                continuation.yield(data)
                continuation.finish()
            }
        }
    }

    /// The bytes in order, read as they are asked for.
    public func pieces() -> AsyncThrowingStream<Data, any Error> { read() }

    /// The first `limit` bytes, or all when there are fewer: for a transport that sends a bounded range at a time.
    public func prefix(_ limit: Int) async throws -> Data {
        var bytes = Data()
        for try await piece in pieces() {
            bytes.append(piece.prefix(limit - bytes.count))
            if bytes.count >= limit { break }
        }
        return bytes
    }
}
