import Foundation
import Hummingbird
import Logging
import OutpostProtocol

extension FileController {
    /// The characters RFC 8187 lets stand unencoded in `filename*` (`attr-char`): ASCII letters, digits and
    /// ``!#$&+-.^_`|~``; every other byte of the name's UTF-8 is percent-encoded.
    static var attributeCharacters: CharacterSet {
        CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$&+-.^_`|~")
    }

    /// The answer that carries `file`'s bytes, streamed a stored range at a time; a `Range` header answers 206 with
    /// the bytes it names (``byteRange(_:size:)``). The first range is read before the answer starts, so that a
    /// failure then is an ordinary error answer; each later one under the admission gate, like a request of its own,
    /// so that a slow download holds no place while it waits on the network.
    ///
    /// - Parameter name: the name the file had on the device, offered to a browser that saves it.
    static func answer(
        _ file: FileUpload, named name: String?, range: String?, tenant: String, storage: Storage, gate: AdmissionGate,
        caller: String, logger: Logger
    ) async throws -> Response {
        let asked = try byteRange(range, size: file.size)
        let from = asked?.lowerBound ?? 0
        let end = asked.map { $0.upperBound + 1 } ?? file.size
        var headers: HTTPFields = [
            .contentType: file.type, .contentLength: String(end - from), .eTag: "\"\(file.sha256)\"",
            .cacheControl: "private, no-store", .acceptRanges: "bytes",
            // Served as data, never as a page of this origin: a file's type is what a device said.
            .xContentTypeOptions: "nosniff", .contentSecurityPolicy: "default-src 'none'; sandbox",
        ]
        if let name, let encoded = name.addingPercentEncoding(withAllowedCharacters: Self.attributeCharacters) {
            headers[.contentDisposition] = "inline; filename*=UTF-8''\(encoded)"
        }
        if asked != nil { headers[.contentRange] = "bytes \(from)-\(end - 1)/\(file.size)" }
        var ranges = storage.fileBytes(tenant: tenant, sha256: file.sha256, from: from, size: end).makeAsyncIterator()
        let first = try await ranges.next()
        let sent = from + Int64(first?.readableBytes ?? 0)
        return Response(
            status: asked == nil ? .ok : .partialContent, headers: headers,
            body: ResponseBody(contentLength: Int(end - from)) { writer in
                do {
                    if let first { try await writer.write(first) }
                    var rest = storage.fileBytes(tenant: tenant, sha256: file.sha256, from: sent, size: end).makeAsyncIterator()
                    while let bytes = try await gate.withAdmission(caller: caller, { try await rest.next() }) {
                        try await writer.write(bytes)
                    }
                    try await writer.finish(nil)
                } catch {
                    logger.notice("a file download ended unfinished", metadata: ["reason": "\(ExportError.reason(error))"])
                    throw error
                }
            })
    }
}
