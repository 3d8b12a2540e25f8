import Crypto
import Foundation
import OutpostClient
import OutpostProtocol

/// Files as the server takes them: in ranges at the offset its bytes end, checked against their digest when the
/// last byte arrives, and given only for a record that names them.
extension InMemoryServer {
    public func upload(of sha256: String) -> FileUpload? {
        files[sha256].map { FileUpload(sha256: sha256, size: $0.size, type: $0.type, received: Int64($0.bytes.count), complete: $0.complete) }
    }

    public func uploadRange(_ bytes: Data, of file: FileReference, at offset: Int64) throws -> FileUpload {
        if let limit = maxFileBytes, file.size > limit {
            throw TransportError(
                kind: .server, status: 413, wire: WireError(code: .fileTooLarge, message: "files are at most \(limit) bytes"),
                message: "files are at most \(limit) bytes")
        }
        var stored = files[file.sha256] ?? StoredFile(size: file.size, type: file.type, bytes: Data(), complete: false)
        if stored.complete { return upload(of: file.sha256)! }
        guard offset == Int64(stored.bytes.count) else {
            let message = "the server holds \(stored.bytes.count) bytes of this file"
            throw TransportError(
                kind: .server, status: 409, wire: WireError(code: .uploadOffsetMismatch, message: message), message: message)
        }
        stored.bytes.append(bytes)
        uploadedRanges.append((file.sha256, offset))
        if Int64(stored.bytes.count) == stored.size {
            guard Array(SHA256.hash(data: stored.bytes)).hexString == file.sha256 else {
                files[file.sha256] = nil
                let message = "the bytes uploaded do not have the digest they were sent under"
                throw TransportError(
                    kind: .server, status: 422, wire: WireError(code: .digestMismatch, message: message), message: message)
            }
            stored.complete = true
        }
        files[file.sha256] = stored
        return upload(of: file.sha256)!
    }

    /// The bytes of `sha256` when the record names it, as the server gives them; else 404.
    public func file(_ sha256: String, collection: String, scope: String, recordId: String) throws -> Data {
        let names = records["\(collection)/\(scope)/\(recordId)"].map {
            !$0.tombstone && FileReference.references(in: $0.fields).values.contains { $0.sha256 == sha256 }
        }
        guard names == true, let stored = files[sha256], stored.complete else {
            throw TransportError(
                kind: .server, status: 404, wire: WireError(code: .notFound, message: "no such file"), message: "no such file")
        }
        return stored.bytes
    }

    public func setMaxFileBytes(_ limit: Int64?) {
        maxFileBytes = limit
    }

    /// How many files the server holds whole.
    public var completeFileCount: Int { files.values.filter(\.complete).count }
}
