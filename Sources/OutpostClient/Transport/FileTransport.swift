import Foundation
import OutpostProtocol

/// A transport that carries the files records name (``FileReference``): uploads by digest, in ranges that resume
/// where the server's bytes end, and downloads of a record's file.
///
/// The engine uploads a record's files before the mutation that names them; a transport without this protocol
/// carries no files, and such a mutation waits, failed with the reason, until one that does.
public protocol FileTransport: SyncTransport {
    /// How far the server has the upload of `sha256`, for a record of `collection`; nil when it has none of it.
    func upload(of sha256: String, collection: String) async throws -> FileUpload?

    /// Sends `bytes` of `file` at `offset`, which must be the bytes the server holds; the server's state after it.
    func uploadRange(_ bytes: Data, of file: FileReference, collection: String, at offset: Int64) async throws -> FileUpload

    /// The file `sha256` that record `recordId` names, from byte `offset`: `receive` is given its bytes in order as
    /// they come, and may throw to stop.
    func download(
        _ sha256: String, collection: String, scope: String?, recordId: String, from offset: Int64,
        receive: @escaping @Sendable (Data) async throws -> Void
    ) async throws
}
