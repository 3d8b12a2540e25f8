import ExtrasBase64

/// Base64url without padding (RFC 4648 §5), as JWTs, pull cursors, continuations and the monitor's secrets
/// carry it.
package enum Base64URL {
    package static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64.encodeToString(bytes: bytes, options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }

    /// The bytes `text` spells; nil for anything but unpadded base64url.
    package static func decode(_ text: some StringProtocol) -> [UInt8]? {
        try? Base64.decode(bytes: Array(text.utf8), options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }
}
