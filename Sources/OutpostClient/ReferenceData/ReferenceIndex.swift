import Crypto
import Foundation
import OutpostProtocol

/// A blind search index: terms become truncated HMACs under a key derived from the store's key, so the
/// index answers "who has this name prefix or e-mail" without holding a name or an e-mail in the clear.
///
/// Names are indexed by the 2- and 4-character prefixes of each word; a query picks the longest indexed
/// prefix of its first word, then the candidates are opened and filtered exactly.
struct ReferenceIndex: Sendable {
    let key: SymmetricKey

    init(storeKey: SymmetricKey) {
        self.key = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-reference-search".utf8), using: storeKey))
    }

    private static let posix = Locale(identifier: "en_US_POSIX")

    /// Lower-case, without diacritics, split into words.
    static func words(_ text: String) -> [String] {
        text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: posix)
            .lowercased()
            .split(whereSeparator: { !$0.isLetter && !$0.isNumber })
            .map(String.init)
    }

    func token(_ kind: String, _ term: String) -> Int64 {
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(kind):\(term)".utf8), using: key)
        return mac.withUnsafeBytes { $0.loadUnaligned(as: Int64.self) }
    }

    /// Every token a record is found by.
    func tokens(for fields: [String: JSONValue]) -> Set<Int64> {
        var tokens = Set<Int64>()
        if let name = fields["name"]?.stringValue {
            for word in Self.words(name) {
                for length in [2, 4] where word.count >= length {
                    tokens.insert(token("p\(length)", String(word.prefix(length))))
                }
            }
        }
        if let email = fields["email"]?.stringValue, !email.isEmpty {
            tokens.insert(token("e", email.lowercased().trimmingCharacters(in: .whitespaces)))
        }
        return tokens
    }

    /// The token to look a query up by, or nil when it is too short (one character).
    func token(forQuery query: String) -> Int64? {
        let trimmed = query.trimmingCharacters(in: .whitespaces)
        if trimmed.contains("@") { return token("e", trimmed.lowercased()) }
        guard let first = Self.words(trimmed).first, first.count >= 2 else { return nil }
        return first.count >= 4 ? token("p4", String(first.prefix(4))) : token("p2", String(first.prefix(2)))
    }

    /// Whether a candidate really matches: an e-mail exactly, or every query word a prefix of a name word.
    static func matches(_ fields: [String: JSONValue], query: String) -> Bool {
        let trimmed = query.trimmingCharacters(in: .whitespaces)
        if trimmed.contains("@") {
            return fields["email"]?.stringValue?.lowercased().trimmingCharacters(in: .whitespaces) == trimmed.lowercased()
        }
        let nameWords = words(fields["name"]?.stringValue ?? "")
        return words(trimmed).allSatisfy { queryWord in nameWords.contains { $0.hasPrefix(queryWord) } }
    }
}
