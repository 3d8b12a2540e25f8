import Crypto
import Foundation
import OutpostProtocol

/// A file to attach to a record as it is saved, such as a build's photo: its bytes, media type and name.
///
/// ```swift
/// let photo = Attachment(contentsOf: pickedURL, type: "image/jpeg")
/// try await engine.save(LocalStore.Write(collection: "builds", recordId: id, fields: ["name": "Shed"]),
///                       attaching: ["photo": photo])
/// ```
///
/// The bytes are read in pieces, never whole: a file of hundreds of megabytes costs the device no more memory
/// than a small one.
public struct Attachment: Sendable {
    /// Where the bytes are.
    public enum Source: Sendable {
        case data(Data)
        /// A file on disk, read when the record is saved; the store keeps its own sealed copy.
        case file(URL)
    }

    public var source: Source
    /// The media type, such as `image/jpeg`.
    public var type: String
    /// The name a person downloading it sees; the file's own name by default.
    public var name: String?

    public init(data: Data, type: String, name: String? = nil) {
        self.source = .data(data)
        self.type = type
        self.name = name
    }

    public init(contentsOf url: URL, type: String, name: String? = nil) {
        self.source = .file(url)
        self.type = type
        self.name = name ?? url.lastPathComponent
    }
}

/// An attachment whose digest and size are known: what a save writes.
package struct StagedFile: Sendable {
    var reference: FileReference
    var source: Attachment.Source

    /// The size of the pieces a file is read, hashed and sealed in.
    static let pieceBytes = LocalStore.fileChunkBytes

    /// Reads `attachment` once, in pieces, for its digest and size, on a thread of its own.
    ///
    /// - Throws: ``ClientError`` `invalidInput` for a media type or name a reference cannot carry, or a file
    ///   that cannot be read.
    static func stage(_ attachment: Attachment) async throws -> StagedFile {
        guard FileReference.isMediaType(attachment.type) else {
            throw ClientError(.invalidInput, "\(attachment.type.prefix(64)) is not a media type such as image/jpeg")
        }
        if let name = attachment.name, name.isEmpty || name.utf8.count > FileReference.maxNameLength {
            throw ClientError(.invalidInput, "a file's name must be 1 to \(FileReference.maxNameLength) bytes")
        }
        let source = attachment.source
        let (digest, size) = try await offCooperativeThreads { () throws -> (String, Int64) in
            var hasher = SHA256()
            var size: Int64 = 0
            try forEachPiece(of: source) { piece in
                hasher.update(data: piece)
                size += Int64(piece.count)
            }
            return (hasher.finalize().hexString, size)
        }
        return StagedFile(
            reference: FileReference(sha256: digest, size: size, type: attachment.type, name: attachment.name),
            source: source)
    }

    /// Calls `body` with the bytes of `source` in order, ``pieceBytes`` at a time (the last piece shorter); the
    /// calling thread blocks while a file is read.
    static func forEachPiece(of source: Attachment.Source, _ body: (Data) throws -> Void) throws {
        switch source {
        case .data(let data):
            var start = data.startIndex
            while start < data.endIndex {
                let end = data.index(start, offsetBy: pieceBytes, limitedBy: data.endIndex) ?? data.endIndex
                try body(data[start..<end])
                start = end
            }
        case .file(let url):
            let handle: FileHandle
            do {
                handle = try FileHandle(forReadingFrom: url)
            } catch {
                throw ClientError(.invalidInput, "cannot read \(url.lastPathComponent)", underlying: error)
            }
            defer { try? handle.close() }
            // Every piece but the last is whole, whatever a read returns: chunks are stored at fixed offsets.
            var piece = Data()
            while true {
                let read: Data
                do {
                    read = try handle.read(upToCount: pieceBytes - piece.count) ?? Data()
                } catch {
                    throw ClientError(.invalidInput, "cannot read \(url.lastPathComponent)", underlying: error)
                }
                piece.append(read)
                if piece.count == pieceBytes || (read.isEmpty && !piece.isEmpty) {
                    try body(piece)
                    piece = Data()
                }
                if read.isEmpty { return }
            }
        }
    }
}

extension SHA256.Digest {
    /// Lower-case hexadecimal, as a ``FileReference`` spells a digest.
    var hexString: String { Array(self).hexString }
}
