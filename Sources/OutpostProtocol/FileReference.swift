/// A file a record carries, such as a build's photo: the value of one of the record's fields,
///
/// ```json
/// "photo": {"$file": {"sha256": "9f86d0…", "size": 5242880, "type": "image/jpeg", "name": "shed.jpg"}}
/// ```
///
/// The file's bytes travel apart from the record, uploaded by digest (`PUT /v1/uploads/{sha256}`) before the
/// mutation that names them: the server takes such a mutation only when it holds the whole file, so a record the
/// server has always has its files there too. One file named by two records, or uploaded twice, is stored once.
public struct FileReference: Sendable, Hashable, Codable {
    /// The member of a field's object that marks it as a file.
    public static let member = "$file"

    /// The SHA-256 digest of the file's bytes, in lower-case hexadecimal: the file's identity.
    public var sha256: String
    /// The file's size in bytes.
    public var size: Int64
    /// Its media type, such as `image/jpeg`.
    public var type: String
    /// The name it had on the device, for a person who downloads it; never used to find it.
    public var name: String?

    public init(sha256: String, size: Int64, type: String, name: String? = nil) {
        self.sha256 = sha256
        self.size = size
        self.type = type
        self.name = name
    }

    /// The longest media type and file name a reference may carry.
    public static let maxTypeLength = 127
    public static let maxNameLength = 255

    /// Whether `text` is a SHA-256 digest as a reference spells it: 64 lower-case hexadecimal digits.
    public static func isDigest(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// Whether `text` is a media type a reference may carry: `type/subtype`, lower-case letters, digits and
    /// `+ - . _`, as an upload names it too.
    public static func isMediaType(_ text: some StringProtocol) -> Bool {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard text.utf8.count <= maxTypeLength, parts.count == 2 else { return false }
        return parts.allSatisfy { part in
            !part.isEmpty
                && part.utf8.allSatisfy {
                    (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || [0x2B, 0x2D, 0x2E, 0x5F].contains($0)
                }
        }
    }

    /// The field value that holds this reference.
    public var json: JSONValue {
        var file: [String: JSONValue] = [
            "sha256": .string(sha256), "size": .integer(size), "type": .string(type),
        ]
        if let name { file["name"] = .string(name) }
        return .object([Self.member: .object(file)])
    }

    /// What a field value says of a file: nil when it is no file reference (no `$file` member), else the
    /// reference, or why it is not a valid one.
    public static func parse(_ value: JSONValue) -> Result<FileReference, FileReferenceProblem>? {
        guard case .object(let members) = value, let file = members[member] else { return nil }
        guard members.count == 1, case .object(let parts) = file else {
            return .failure(FileReferenceProblem("a file field holds one member, $file, an object"))
        }
        guard Set(parts.keys).isSubset(of: ["sha256", "size", "type", "name"]) else {
            return .failure(FileReferenceProblem("a file has sha256, size, type and name only"))
        }
        guard case .string(let sha256) = parts["sha256"], isDigest(sha256) else {
            return .failure(FileReferenceProblem("a file's sha256 must be 64 lower-case hexadecimal digits"))
        }
        guard case .integer(let size) = parts["size"], size >= 0 else {
            return .failure(FileReferenceProblem("a file's size must be a whole number of bytes"))
        }
        guard case .string(let type) = parts["type"], isMediaType(type) else {
            return .failure(FileReferenceProblem("a file's type must be a media type such as image/jpeg"))
        }
        var name: String?
        if let value = parts["name"] {
            guard case .string(let text) = value, !text.isEmpty, text.utf8.count <= maxNameLength else {
                return .failure(FileReferenceProblem("a file's name must be 1 to \(maxNameLength) bytes of text"))
            }
            name = text
        }
        return .success(FileReference(sha256: sha256, size: size, type: type, name: name))
    }

    /// The valid file references among `fields`, by field name.
    public static func references(in fields: [String: JSONValue]) -> [String: FileReference] {
        var found: [String: FileReference] = [:]
        for (name, value) in fields {
            if case .success(let reference) = parse(value) { found[name] = reference }
        }
        return found
    }
}

/// Why a field value that names a file is not a valid ``FileReference``.
public struct FileReferenceProblem: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// How far a file's upload has come: the answer to `GET /v1/uploads/{sha256}` and to each `PUT` of a range.
///
/// An upload sends the file's bytes from the offset the server says it has received, as many as the device sends
/// in one request; the server stores them as they arrive, so one cut part-way is resumed from the last it stored.
/// When the last byte arrives the server checks the digest and the file is `complete`.
public struct FileUpload: Sendable, Hashable, Codable {
    public var sha256: String
    public var size: Int64
    public var type: String
    /// The bytes the server holds, from the start of the file.
    public var received: Int64
    /// Whether the server holds the whole file and has checked its digest.
    public var complete: Bool

    public init(sha256: String, size: Int64, type: String, received: Int64, complete: Bool) {
        self.sha256 = sha256
        self.size = size
        self.type = type
        self.received = received
        self.complete = complete
    }
}
