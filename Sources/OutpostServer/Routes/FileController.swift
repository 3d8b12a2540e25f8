import Crypto
import Foundation
import Hummingbird
import Logging
import OutpostProtocol

/// `GET` and `PUT /v1/uploads/{sha256}`, `GET /v1/files/{sha256}`: the files records carry (``FileReference``).
///
/// A device uploads a file's bytes by digest, from the offset the server says it holds, before it pushes the
/// mutation that names the file; the server stores them as they arrive and checks the digest once the last byte is
/// in. An upload is
/// refused by what its query says (collection, role, type, size, offset) before any byte of its body is read, so
/// these routes read their bodies themselves (``AdmissionMiddleware`` with `defersBody`). A file is downloaded by
/// whoever may read a record that names it, and by no one else.
struct FileController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration
    /// Admits each range of a download after its first, as it admits requests.
    let gate: AdmissionGate
    let metrics: ServerMetrics
    let now: @Sendable () -> Date
    /// The running digests of the uploads this process takes.
    var digests = UploadDigests()

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.get("uploads/:sha256", use: upload)
        group.put("uploads/:sha256", use: putRange)
        group.get("files/:sha256", use: download)
    }

    /// `GET /v1/uploads/{sha256}?collection=C` (anyone who may write C): how far the upload has come, or 404.
    @Sendable func upload(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        try refuseAtRelay()
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        if let refusal = policy.writerRefusal(for: identity.role) { throw OutpostHTTPError.forbidden(refusal) }
        let sha256 = try Self.digest(in: context)
        guard let upload = try await storage.upload(tenant: identity.tenant, sha256: sha256) else {
            throw OutpostHTTPError(.notFound, .notFound, "the server has no upload of this file")
        }
        return try .json(upload)
    }

    /// `PUT /v1/uploads/{sha256}?collection=C&size=N&type=T&offset=O`: the file's bytes from the offset the server
    /// holds, as many as the device sends (up to the file's end), stored as they arrive (``receive(_:into:)``).
    /// Answers the upload as it then stands; once the last byte is in, the file is complete, or discarded whole
    /// when its bytes do not have the digest (422).
    @Sendable func putRange(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        try refuseAtRelay()
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        if let refusal = policy.writerRefusal(for: identity.role) { throw OutpostHTTPError.forbidden(refusal) }
        let sha256 = try Self.digest(in: context)
        let size = try Self.byteCount("size", in: request)
        let type = try RequestDecoding.required("type", in: request)
        guard FileReference.isMediaType(type) else {
            throw OutpostHTTPError.badRequest("type must be a lower-case media type such as image/jpeg")
        }
        let offset = try Self.byteCount("offset", in: request)
        if let refusal = policy.fileRefusal(type: type, size: size) {
            throw OutpostHTTPError(refusal.code == .fileTooLarge ? .contentTooLarge : .unsupportedMediaType, refusal.code, refusal.message)
        }
        guard offset <= size else {
            throw OutpostHTTPError.badRequest("offset \(offset) is past the file's size, \(size) bytes")
        }
        if let length = request.headers[.contentLength].flatMap(Int64.init) {
            guard offset + length <= size else { throw Self.pastSize(offset: offset, length: length, size: size) }
        }
        var stored = try await storage.upload(tenant: identity.tenant, sha256: sha256)
        // An unfinished upload declared otherwise may give way to this one: only when this one fits the bound.
        let replaceable = stored.map { !$0.complete && ($0.size != size || $0.type != type) } ?? false
        if stored == nil || replaceable, let quota = configuration.tenantFileBytes,
            try await storage.tenantFileBytes(tenant: identity.tenant) - (replaceable ? stored?.size ?? 0 : 0) + size > quota
        {
            throw OutpostHTTPError(
                HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage"), .fileQuotaExceeded,
                TenantFileQuota.message(field: nil, quota: quota))
        }
        if replaceable,
            try await storage.discardUpload(
                tenant: identity.tenant, sha256: sha256, declaredOtherThan: size, type: type,
                idleSince: Int64(now().timeIntervalSince1970 * 1000) - quietUploadGivesWay.milliseconds)
        {
            stored = nil
        }
        if let stored, try !Self.takesRange(stored, size: size, type: type, offset: offset) { return try .json(stored) }
        if stored == nil, offset != 0 { throw Self.offsetMismatch(received: 0) }

        let upload = try await receive(
            request,
            into: Receipt(
                tenant: identity.tenant, sha256: sha256, size: size, type: type, next: offset,
                upload: stored ?? FileUpload(sha256: sha256, size: size, type: type, received: 0, complete: false)))
        guard !upload.complete, upload.received == upload.size else { return try .json(upload) }
        return try .json(try await verify(upload, tenant: identity.tenant))
    }

    /// A venue relay takes no files: it forwards writes, and the collections that carry files have no events. A
    /// device uploads them to the server.
    private func refuseAtRelay() throws {
        guard configuration.relay != nil else { return }
        throw OutpostHTTPError(
            .forbidden, .notCarriedByRelay, "a venue relay carries no files: they are uploaded to the server")
    }

    /// Completes an upload whose every byte has arrived when its bytes have its digest; else discards it whole.
    ///
    /// - Throws: 422 `digest_mismatch` when they do not.
    private func verify(_ upload: FileUpload, tenant: String) async throws -> FileUpload {
        var digest = digests.finish(tenant: tenant, sha256: upload.sha256, size: upload.size)
        if digest == nil {
            var hasher = SHA256()
            do {
                for try await bytes in storage.fileBytes(tenant: tenant, sha256: upload.sha256, from: 0, size: upload.size) {
                    bytes.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                }
                digest = hasher.finalize().hexString
            } catch let error as StorageError where error.code == .corrupt {
                // Bytes counted but missing from the disk (a crash before they were flushed) have no digest at all.
                digest = ""
            }
        }
        guard digest == upload.sha256 else {
            if try await storage.discardUpload(tenant: tenant, sha256: upload.sha256) {
                metrics.uploads[digest == "" ? .bytesMissing : .digestMismatch]?.increment()
            }
            throw OutpostHTTPError(
                .unprocessableContent, .digestMismatch,
                "the bytes received do not have the digest they were sent under; none of them is kept: upload the file again")
        }
        guard try await storage.completeUpload(tenant: tenant, sha256: upload.sha256) else {
            return try await storage.upload(tenant: tenant, sha256: upload.sha256) ?? upload
        }
        metrics.uploads[.complete]?.increment()
        var complete = upload
        complete.complete = true
        return complete
    }

    /// How long an unfinished upload must have taken no byte before one of the same file declared with another size
    /// or type replaces it (``FileStorage/discardUpload(tenant:sha256:declaredOtherThan:type:idleSince:)``): two
    /// minutes, and at least twice the body timeout. An upload on its way stores what arrived at least every
    /// ``pieceWait``, and its request ends once it falls silent for the body timeout, so it is never replaced.
    var quietUploadGivesWay: Duration { max(.seconds(120), configuration.bodyTimeout * 2) }

    /// Whether a range at `offset` of the file as declared goes on `stored`: false for a complete file, which
    /// takes nothing more.
    ///
    /// - Throws: 409 when the server holds the file as another size or type (complete, or unfinished and taking
    ///   bytes), or another count of its bytes.
    static func takesRange(_ stored: FileUpload, size: Int64, type: String, offset: Int64) throws -> Bool {
        guard stored.size == size, stored.type == type else {
            throw OutpostHTTPError(
                .conflict, .invalidRequest,
                "the server holds this file as \(stored.type) of \(stored.size) bytes; upload it as that")
        }
        if stored.complete { return false }
        guard stored.received == offset else { throw offsetMismatch(received: stored.received) }
        return true
    }

    static func offsetMismatch(received: Int64) -> OutpostHTTPError {
        OutpostHTTPError(
            .conflict, .uploadOffsetMismatch,
            "the server holds \(received) bytes of this file; send the range at offset \(received)")
    }

    static func pastSize(offset: Int64, length: Int64, size: Int64) -> OutpostHTTPError {
        OutpostHTTPError.badRequest("a range of \(length) bytes at offset \(offset) runs past the file's size, \(size) bytes")
    }

    /// `GET /v1/files/{sha256}?collection=C&recordId=R[&scope=S]`: the file's bytes, streamed a stored range at a time; a
    /// `Range` header answers 206 with the bytes it names (``byteRange(_:size:)``). Only to a caller who may read record R
    /// as a pull would let them, while R is live and one of its fields names the file, and the file is complete: otherwise
    /// 404, the same whichever it is, so that the answer tells nothing of records the caller may not read.
    @Sendable func download(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        let scope = try RequestDecoding.scope(in: request)
        let identity = try context.requireReader(of: policy, scope: scope)
        if let refusal = policy.readRefusal(for: identity, scope: scope) { throw OutpostHTTPError.forbidden(refusal) }
        let sha256 = try Self.digest(in: context)
        let recordId = try RequestDecoding.required("recordId", in: request)
        guard Identifier.isValid(recordId) else {
            throw OutpostHTTPError.badRequest("recordId must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        let notFound = OutpostHTTPError(.notFound, .notFound, "no such file for this record")
        // A record of a collection with a scope is keyed by it: named without one, it is no record.
        guard
            let record = try await storage.record(
                tenant: identity.tenant, collection: policy.name, recordId: recordId, scope: scope ?? ""),
            !record.tombstone, policy.readOwner(for: identity).map({ $0 == record.owner }) ?? true,
            let named = FileReference.references(in: record.fields).values.first(where: { $0.sha256 == sha256 }),
            let file = try await storage.completeFiles(tenant: identity.tenant, sha256s: [sha256])[sha256]
        else { throw notFound }
        return try await Self.answer(
            file, named: named.name, range: request.headers[.range], tenant: identity.tenant, storage: storage, gate: gate,
            caller: identity.admissionKey, logger: context.logger)
    }

    /// The bytes a `Range` header asks for (RFC 9110, section 14.1.2): `bytes=N-` from byte N to the end, `bytes=N-M`
    /// from N to M (or to the end, when M is past it), `bytes=-K` the last K. Nil without a header, and for any other
    /// form (several ranges, M before N, not a byte range), and for an empty file, which is answered whole.
    ///
    /// - Throws: 416 when the range starts at or past the file's end, or asks for the last 0 bytes.
    static func byteRange(_ header: String?, size: Int64) throws -> ClosedRange<Int64>? {
        guard let header, header.hasPrefix("bytes="), size > 0 else { return nil }
        let bounds = header.dropFirst("bytes=".count).split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2 else { return nil }
        func number(_ digits: Substring) -> Int64? {
            guard (1...18).contains(digits.utf8.count), digits.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
            return Int64(digits)
        }
        let unsatisfiable = OutpostHTTPError(
            .rangeNotSatisfiable, .invalidRequest, "the file has \(size) bytes; a range starts before its end",
            headers: [.contentRange: "bytes */\(size)"])
        if bounds[0].isEmpty {
            guard let last = number(bounds[1]) else { return nil }
            guard last > 0 else { throw unsatisfiable }
            return max(0, size - last)...(size - 1)
        }
        guard let first = number(bounds[0]) else { return nil }
        let end: Int64?
        if bounds[1].isEmpty {
            end = nil
        } else {
            guard let given = number(bounds[1]), given >= first else { return nil }
            end = given
        }
        guard first < size else { throw unsatisfiable }
        return first...min(end ?? (size - 1), size - 1)
    }

    /// The file's digest in the path.
    static func digest(in context: OutpostRequestContext) throws -> String {
        guard let digest = context.parameters.get("sha256"), FileReference.isDigest(digest) else {
            throw OutpostHTTPError.badRequest("a file is named by its SHA-256 digest: 64 lower-case hexadecimal digits")
        }
        return digest
    }

    /// A required count of bytes in the query: a whole number from 0, in decimal digits.
    static func byteCount(_ name: String, in request: Request) throws -> Int64 {
        let text = try RequestDecoding.required(name, in: request)
        guard text.utf8.count <= 18, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let value = Int64(text) else {
            throw OutpostHTTPError.badRequest("\(name) must be a whole number of bytes")
        }
        return value
    }
}

/// The bound on the bytes one organization's files take (``ServerConfiguration/tenantFileBytes``).
enum TenantFileQuota {
    /// Why a file, or the file in `field` of a record, is refused for the bound: what the person can do about it.
    static func message(field: String?, quota: Int64) -> String {
        "\(field.map { "the file in \($0)" } ?? "this file") would take the organization's files past the \(quota) bytes "
            + "the server keeps for them: it can be sent once the operator raises the bound, or unfinished uploads expire; "
            + "retry the record then"
    }
}
