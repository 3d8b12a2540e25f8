import Foundation
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import OutpostConcurrency
import OutpostProtocol

extension FileController {
    /// What the server stores of an upload at a time while its body arrives: each piece is counted received on its
    /// own, so a body cut part-way keeps every whole piece and what had arrived of the next.
    static var pieceBytes: Int { 4 * 1024 * 1024 }

    /// How long a piece may take to arrive before it is stored as it stands, a third of the body timeout: an upload
    /// on a slow link is counted, and its upload touched, that often, and so never taken for a quiet one
    /// (``quietUploadGivesWay``).
    var pieceWait: Duration { configuration.bodyTimeout / 3 }

    /// One upload's body on its way into storage.
    struct Receipt {
        let tenant: String
        let sha256: String
        let size: Int64
        let type: String
        /// Where the next piece starts.
        var next: Int64
        /// The upload as the last piece stored left it.
        var upload: FileUpload
    }

    /// Reads the body of an upload at `offset` and stores it as it arrives, a piece at a time: each piece is hashed
    /// while it is stored, and the next one arrives meanwhile. The request gives its place at the gate back while
    /// the body arrives, as ``AdmissionMiddleware`` has a body wait, and takes one again for the answer.
    ///
    /// - Throws: 408 when the body falls silent for the body timeout, 400 when it runs past the file's size, 409
    ///   when another upload of the file got a piece in first. What was stored before stays counted.
    func receive(_ request: Request, into receipt: Receipt) async throws -> FileUpload {
        if let body = RequestDecoding.arrivedBody {
            return try await store(body, of: receipt).upload
        }
        guard let arriving = RequestDecoding.arrivingBody else { return try await stream(request, into: receipt) }
        return try await RequestDecoding.$arrivingBody.withValue(nil) {
            try await arriving.collect { try await stream(request, into: receipt) }
        }
    }

    private func stream(_ request: Request, into start: Receipt) async throws -> FileUpload {
        let silence = configuration.bodyTimeout
        let length = request.headers[.contentLength].flatMap(Int64.init)
        let watch = DeadlineWatch.shared
        let fellSilent = NIOLockedValueBox(false)
        let reader = NIOLockedValueBox<Task<Receipt, any Error>?>(nil)
        // The body may not fall silent for longer than the body timeout: each piece of it that arrives postpones it.
        let deadline = watch.schedule(after: silence) {
            fellSilent.withLockedValue { $0 = true }
            reader.withLockedValue { $0?.cancel() }
        }
        defer { watch.cancel(deadline) }
        let reading = Task { [self] () throws -> Receipt in
            var receipt = start
            // Room for a whole piece and the fragment that ends it, so that a piece is not copied as it grows.
            let room = Int(min(Int64(Self.pieceBytes + 256 * 1024), start.size - start.next))
            var piece = ByteBufferAllocator().buffer(capacity: room)
            // At most one piece is stored while the next arrives.
            var storing: Task<Receipt, any Error>?
            defer { storing?.cancel() }
            // Waiting on storage is not the body's silence: the deadline waits meanwhile.
            func stored(_ task: Task<Receipt, any Error>) async throws -> Receipt {
                watch.hold(deadline)
                defer { watch.postpone(deadline, by: silence) }
                return try await task.value
            }
            func hand(_ bytes: ByteBuffer) async throws {
                if let storing { receipt = try await stored(storing) }
                // A file another upload completed meanwhile takes nothing more.
                guard !receipt.upload.complete else { return }
                let from = receipt
                storing = Task { try await store(bytes, of: from) }
                receipt.next += Int64(bytes.readableBytes)
            }
            func settle() async throws {
                if let storing { receipt = try await stored(storing) }
                storing = nil
            }
            var body = request.body.makeAsyncIterator()
            var begun = watch.timePassed()
            do {
                while let fragment = try await body.next() {
                    watch.postpone(deadline, by: silence)
                    let arrived = receipt.next + Int64(piece.readableBytes + fragment.readableBytes)
                    guard arrived <= receipt.size else {
                        throw Self.pastSize(offset: start.next, length: arrived - start.next, size: receipt.size)
                    }
                    piece.writeImmutableBuffer(fragment)
                    if piece.readableBytes >= Self.pieceBytes || watch.timePassed() - begun >= pieceWait {
                        try await hand(piece)
                        begun = watch.timePassed()
                        piece = ByteBufferAllocator().buffer(capacity: Int(min(Int64(room), receipt.size - receipt.next)))
                        if receipt.upload.complete { break }
                    }
                }
                if piece.readableBytes > 0 || receipt.next == start.next { try await hand(piece) }
                try await settle()
            } catch {
                // What arrived before the cut stays: the pieces on their way, then what came of the next one, when
                // every piece before it is stored. Stored apart from this read, which the silence deadline cancels.
                if (try? await settle()) != nil, piece.readableBytes > 0, !receipt.upload.complete,
                    receipt.next == receipt.upload.received, receipt.next + Int64(piece.readableBytes) <= receipt.size
                {
                    let (rest, at) = (piece, receipt)
                    if let stored = try? await Task(operation: { try await store(rest, of: at) }).value { receipt = stored }
                }
                throw error
            }
            return receipt
        }
        reader.withLockedValue { $0 = reading }
        if fellSilent.withLockedValue({ $0 }) { reading.cancel() }
        let result = await withTaskCancellationHandler {
            await reading.result
        } onCancel: {
            reading.cancel()
        }
        // A read cut short by the deadline may end as if the body were complete: it is cut when it stored less than
        // its length (or has none).
        let cut = (try? result.get()).map { $0.next < (start.next + (length ?? .max)) } ?? true
        if fellSilent.withLockedValue({ $0 }), cut {
            throw OutpostHTTPError(
                .requestTimeout, .requestTimeout,
                "the upload fell silent for \(silence.components.seconds) s; the bytes that arrived are kept: go on from them",
                headers: [.connection: "close"])
        }
        let receipt = try result.get()
        guard receipt.upload.complete || receipt.upload.received == receipt.next else {
            throw Self.offsetMismatch(received: receipt.upload.received)
        }
        return receipt.upload
    }

    /// Stores `bytes` at `receipt.next`, hashed while it is stored: the receipt moved past it.
    ///
    /// - Throws: 409 when the upload no longer stands at that offset (another upload of the file got in first).
    private func store(_ bytes: ByteBuffer, of receipt: Receipt) async throws -> Receipt {
        async let advance = digests.advance(bytes, at: receipt.next, tenant: receipt.tenant, sha256: receipt.sha256)
        let outcome = try await storage.appendRange(
            tenant: receipt.tenant, sha256: receipt.sha256, size: receipt.size, type: receipt.type, offset: receipt.next,
            bytes: bytes, at: Int64(now().timeIntervalSince1970 * 1000))
        switch outcome {
        case .refused(let stored):
            _ = await advance
            // A complete file takes nothing more: the answer says so.
            if try !Self.takesRange(stored, size: receipt.size, type: receipt.type, offset: receipt.next) {
                return Receipt(
                    tenant: receipt.tenant, sha256: receipt.sha256, size: receipt.size, type: receipt.type,
                    next: stored.received, upload: stored)
            }
            throw Self.offsetMismatch(received: stored.received)
        case .appended(let upload, let began):
            metrics.uploadBytes.increment(by: Int64(bytes.readableBytes))
            digests.keep(await advance, began: began)
            var receipt = receipt
            receipt.next = upload.received
            receipt.upload = upload
            return receipt
        }
    }
}
