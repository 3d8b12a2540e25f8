import OutpostProtocol

/// The files a collection's records may carry (``FileReference``): how large, and of which media types.
///
/// A collection without one takes no files. The same rule refuses an upload before any byte of it is stored and a
/// mutation that names a file, so a record never names a file its collection would not have taken.
public struct AttachmentPolicy: Sendable, Hashable, Codable {
    /// The largest file the collection takes, in bytes.
    public var maxBytes: Int64
    /// The media types it takes: exact types (`application/pdf`), a type's every subtype (`image/*`), or any
    /// type (`*/*`).
    public var types: [String]

    public init(maxBytes: Int64, types: [String]) {
        self.maxBytes = maxBytes
        self.types = types
    }

    /// The most ``maxBytes`` may be: 2 GiB.
    public static let largestMaxBytes: Int64 = 2 * 1024 * 1024 * 1024

    /// Whether a file of media type `type` (as ``FileReference/isMediaType(_:)`` takes it) is one of ``types``.
    public func takes(type: String) -> Bool {
        types.contains { pattern in
            if pattern == "*/*" { return true }
            if pattern.hasSuffix("/*") { return type.hasPrefix(pattern.dropLast()) }
            return pattern == type
        }
    }

    /// Whether `pattern` may be one of ``types``: a media type, a type and `/*`, or `*/*`.
    public static func isTypePattern(_ pattern: String) -> Bool {
        if pattern == "*/*" { return true }
        if pattern.hasSuffix("/*") { return FileReference.isMediaType(pattern.dropLast() + "x") }
        return FileReference.isMediaType(pattern)
    }
}

/// Why a collection does not take a file: its wire code and a message that names the collection and its limit.
struct FileRefusal: Sendable, Hashable {
    var code: WireError.Code
    var message: String
}

extension CollectionPolicy {
    /// Why this collection does not take a file of media type `type` and `size` bytes, or nil when it does.
    func fileRefusal(type: String, size: Int64) -> FileRefusal? {
        guard let attachments else {
            return FileRefusal(code: .fileTypeRefused, message: "\(name) takes no files")
        }
        guard attachments.takes(type: type) else {
            let types = attachments.types.joined(separator: ", ")
            return FileRefusal(code: .fileTypeRefused, message: "\(name) takes files of type \(types), not \(type)")
        }
        guard size <= attachments.maxBytes else {
            return FileRefusal(
                code: .fileTooLarge,
                message: "the file is \(size) bytes; \(name) takes files of at most \(attachments.maxBytes) bytes")
        }
        return nil
    }
}
