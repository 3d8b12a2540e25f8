/// The rules every identifier on the wire must follow: tenant, device, record and user ids.
///
/// 1 to 128 characters from `A-Z a-z 0-9 . _ : @ -`, starting with a letter or digit, and never `..`,
/// so that an id is safe in a path, a log line, a file name and a SQL key alike.
public enum Identifier {
    public static let maxLength = 128

    public static func isValid(_ text: String) -> Bool {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= maxLength, let first = bytes.first, isAlphanumeric(first) else {
            return false
        }
        var previousDot = false
        for byte in bytes {
            let isDot = byte == UInt8(ascii: ".")
            guard
                isAlphanumeric(byte) || isDot || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ":")
                    || byte == UInt8(ascii: "@") || byte == UInt8(ascii: "-")
            else { return false }
            if isDot && previousDot { return false }
            previousDot = isDot
        }
        return true
    }

    /// Field names: 1 to 64 characters, a letter or `_` first, then letters, digits and `_`.
    public static func isValidFieldName(_ text: String) -> Bool {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= 64, let first = bytes.first,
            isLetter(first) || first == UInt8(ascii: "_")
        else { return false }
        return bytes.allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: "_") }
    }

    /// Idempotency keys: 1 to 256 printable ASCII characters, no spaces.
    public static func isValidIdempotencyKey(_ text: String) -> Bool {
        let bytes = text.utf8
        return !bytes.isEmpty && bytes.count <= 256 && bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    private static func isLetter(_ b: UInt8) -> Bool {
        (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z"))
    }

    private static func isAlphanumeric(_ b: UInt8) -> Bool {
        isLetter(b) || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"))
    }
}
