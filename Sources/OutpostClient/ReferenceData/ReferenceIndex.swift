import Crypto
import Foundation
import NIOConcurrencyHelpers
import OutpostProtocol

/// A blind search index: terms become truncated HMACs under a key derived from the store's key, so the
/// index answers "who has this name prefix or e-mail" without holding a name or an e-mail in the clear.
///
/// Names are indexed by the 2- and 4-character prefixes of each word; a query looks up the longest indexed
/// prefix of each of its words at once, then the candidates are opened and filtered exactly.
struct ReferenceIndex: Sendable {
    /// HMAC-SHA256 (RFC 2104) with the padded key already absorbed into the inner and outer hashes: each token
    /// copies them and feeds its bytes without `DataProtocol`'s generic path (tested equal to swift-crypto's HMAC).
    /// Home-made because a copy of swift-crypto's keyed `HMAC`, the same hashing behind its generic `update`,
    /// made a roster download and a delta refresh measurably slower (BENCHMARKS.md).
    private let inner: SHA256
    private let outer: SHA256
    /// Name terms already hashed and words already folded: a roster's given names, family names and their
    /// prefixes repeat from row to row (e-mails, which do not, are not kept).
    private let memo: Memo

    init(storeKey: SymmetricKey, memoLimit: Int = Memo.defaultLimit) {
        memo = Memo(limit: memoLimit)
        let key = HMAC<SHA256>.authenticationCode(for: Array("outpost-reference-search".utf8), using: storeKey)
        // A 32-byte key is shorter than SHA-256's 64-byte block: it is padded with zeros, not hashed.
        var block = [UInt8](repeating: 0, count: 64)
        key.withUnsafeBytes { bytes in for (offset, byte) in bytes.enumerated() { block[offset] = byte } }
        var inner = SHA256()
        var outer = SHA256()
        inner.update(data: block.map { $0 ^ 0x36 })
        outer.update(data: block.map { $0 ^ 0x5C })
        self.inner = inner
        self.outer = outer
    }

    private static let posix = Locale(identifier: "en_US_POSIX")

    /// Lower-case, without diacritics, split into words.
    ///
    /// The text is cut at ASCII spaces and punctuation first. ASCII pieces, most of most names, are lower-cased
    /// byte by byte; the others go through Foundation's folding, which is slow on Linux, once per distinct
    /// piece when `memo` is given.
    static func words(_ text: String, memo: Memo? = nil) -> [String] {
        var words: [String] = []
        var piece: [UInt8] = []
        var isASCII = true
        func endPiece() {
            guard !piece.isEmpty else { return }
            if isASCII {
                words.append(String(decoding: piece, as: UTF8.self))
            } else {
                let text = String(decoding: piece, as: UTF8.self)
                words += memo?.folded(text) { folded($0) } ?? folded(text)
            }
            piece.removeAll(keepingCapacity: true)
            isASCII = true
        }
        for byte in text.utf8 {
            if let lowered = wordByte(byte) {
                piece.append(lowered)
            } else if byte >= 0x80 {
                piece.append(byte)
                isASCII = false
            } else {
                endPiece()
            }
        }
        endPiece()
        return words
    }

    /// Foundation's folding of text that is not all ASCII, split at whatever is neither letter nor number.
    private static func folded(_ text: String) -> [String] {
        text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: posix)
            .lowercased()
            .split(whereSeparator: { !$0.isLetter && !$0.isNumber })
            .map(String.init)
    }

    /// The first 8 bytes of HMAC-SHA256 of `kind:term`.
    func token(_ kind: String, _ term: some StringProtocol) -> Int64 {
        var message = Array(kind.utf8)
        message.append(UInt8(ascii: ":"))
        message.append(contentsOf: term.utf8)
        return message.withUnsafeBytes { token(message: $0) }
    }

    /// What a row's tokens are made from, as one keyed digest (the first 8 bytes of an HMAC, like a token): the
    /// same name and e-mail, the same digest, and so the same tokens. A refresh compares it with the stored one
    /// and works out tokens, a few times this digest's cost, only for rows whose name or e-mail changed.
    ///
    /// The digest names the way tokens are made (`fingerprintVersion`): a change to ``tokens(name:email:)``
    /// must change it, so that a refresh never keeps a row's tokens of the old making, and come with a migration
    /// that works out again the tokens of the rows no refresh touches.
    func fingerprint(name: String?, email: String?) -> Int64 {
        var message = Array(Self.fingerprintVersion.utf8)
        message.reserveCapacity(message.count + 10 + (name?.utf8.count ?? 0) + (email?.utf8.count ?? 0))
        // Each part absent, or its length and bytes: no two pairs write the same message.
        for part in [name, email] {
            guard let part else {
                message.append(0)
                continue
            }
            message.append(1)
            withUnsafeBytes(of: UInt32(part.utf8.count).littleEndian) { message.append(contentsOf: $0) }
            message.append(contentsOf: part.utf8)
        }
        return message.withUnsafeBytes { token(message: $0) }
    }

    /// The way ``tokens(name:email:)`` makes tokens, as ``fingerprint(name:email:)`` names it.
    static let fingerprintVersion = "fingerprint-1:"

    /// The first 8 bytes of HMAC-SHA256 of `message`.
    func token(message: UnsafeRawBufferPointer) -> Int64 {
        var innerHash = inner
        innerHash.update(bufferPointer: message)
        var outerHash = outer
        innerHash.finalize().withUnsafeBytes { outerHash.update(bufferPointer: $0) }
        return outerHash.finalize().withUnsafeBytes { $0.loadUnaligned(as: Int64.self) }
    }

    /// Without leading and trailing blanks (what Foundation's `CharacterSet.whitespaces` holds: space
    /// separators and the tab), at a fraction of `trimmingCharacters(in:)`'s cost.
    static func trimmed(_ text: String) -> Substring {
        let isBlank: (Character) -> Bool = { character in
            character.unicodeScalars.allSatisfy { $0 == "\t" || $0.properties.generalCategory == .spaceSeparator }
        }
        guard let first = text.firstIndex(where: { !isBlank($0) }) else { return "" }
        let last = text.lastIndex(where: { !isBlank($0) })!
        return text[first...last]
    }

    /// Every token of a record with this name and e-mail, sorted, without repeats.
    ///
    /// All-ASCII names and e-mails, most of a roster, are read straight from their bytes; the others take
    /// ``generalTokens(name:email:)``, which gives the same tokens for all-ASCII ones too (tested).
    func tokens(name: String?, email: String?) -> [Int64] {
        var tokens: [Int64] = []
        tokens.reserveCapacity(8)
        if let name, !asciiNameTokens(name, into: &tokens) { nameTokens(name, into: &tokens) }
        if let email, !email.isEmpty, !asciiEmailToken(email, into: &tokens) { tokens.append(emailToken(email)) }
        return Self.sortedUnique(tokens)
    }

    /// ``tokens(name:email:)`` through Foundation's folding and strings alone, for any text.
    func generalTokens(name: String?, email: String?) -> [Int64] {
        var tokens: [Int64] = []
        if let name { nameTokens(name, into: &tokens) }
        if let email, !email.isEmpty { tokens.append(emailToken(email)) }
        return Self.sortedUnique(tokens)
    }

    private func nameTokens(_ name: String, into tokens: inout [Int64]) {
        for word in Self.words(name, memo: memo) {
            let length = word.count
            if length >= 2 { tokens.append(memo.token("p2:" + word.prefix(2)) { token("p2", word.prefix(2)) }) }
            if length >= 4 { tokens.append(memo.token("p4:" + word.prefix(4)) { token("p4", word.prefix(4)) }) }
        }
    }

    private func emailToken(_ email: String) -> Int64 {
        token("e", Self.trimmed(email.lowercased()))
    }

    private static func sortedUnique(_ tokens: [Int64]) -> [Int64] {
        var tokens = tokens
        tokens.sort()
        var unique: [Int64] = []
        unique.reserveCapacity(tokens.count)
        for token in tokens where unique.last != token { unique.append(token) }
        return unique
    }

    /// The name tokens of an all-ASCII name, most names, straight from its bytes: the words ``words(_:memo:)``
    /// gives (runs of letters and digits, lower-cased), and the memo keyed by the prefix's bytes instead of a
    /// string per prefix. False, and nothing added, for a name with any other byte.
    func asciiNameTokens(_ name: String, into tokens: inout [Int64]) -> Bool {
        var name = name
        return name.withUTF8 { bytes in
            guard !bytes.contains(where: { $0 >= 0x80 }) else { return false }
            var index = 0
            while index < bytes.count {
                // One word: a run of ASCII letters and digits.
                var prefix: UInt32 = 0
                var length = 0
                while index < bytes.count, let lowered = Self.wordByte(bytes[index]) {
                    if length < 4 { prefix |= UInt32(lowered) << (8 * UInt32(length)) }
                    length += 1
                    index += 1
                }
                if length >= 2 { tokens.append(prefixToken(kind: 2, bytes: prefix & 0xFFFF)) }
                if length >= 4 { tokens.append(prefixToken(kind: 4, bytes: prefix)) }
                if length == 0 { index += 1 }
            }
            return true
        }
    }

    /// An ASCII byte of a word, lower-cased; nil for an ASCII separator, and for any byte past ASCII.
    @inline(__always)
    private static func wordByte(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): byte
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): byte + 32
        default: nil
        }
    }

    /// The token of `p2:` or `p4:` and the prefix's bytes (packed little-end first), through the memo.
    private func prefixToken(kind: UInt8, bytes: UInt32) -> Int64 {
        memo.token(prefix: UInt64(kind) << 32 | UInt64(bytes)) {
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 7) { message in
                message[0] = UInt8(ascii: "p")
                message[1] = UInt8(ascii: "0") + kind
                message[2] = UInt8(ascii: ":")
                for offset in 0..<Int(kind) { message[3 + offset] = UInt8(truncatingIfNeeded: bytes >> (8 * UInt32(offset))) }
                return token(message: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(message)[..<(3 + Int(kind))]))
            }
        }
    }

    /// The e-mail token of an all-ASCII e-mail: lower-cased and without leading and trailing spaces and tabs,
    /// as the general path has it. False, and nothing added, for an e-mail with any other byte.
    func asciiEmailToken(_ email: String, into tokens: inout [Int64]) -> Bool {
        var email = email
        return email.withUTF8 { bytes in
            guard !bytes.contains(where: { $0 >= 0x80 }) else { return false }
            var start = 0
            var end = bytes.count
            while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
            while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: end - start + 2) { message in
                message[0] = UInt8(ascii: "e")
                message[1] = UInt8(ascii: ":")
                for offset in start..<end {
                    let byte = bytes[offset]
                    message[2 + offset - start] = (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
                }
                tokens.append(token(message: UnsafeRawBufferPointer(message)))
                return true
            }
        }
    }

    /// Whether a query is a whole e-mail rather than name words.
    static func isEmail(_ query: some StringProtocol) -> Bool { query.contains("@") }

    /// The tokens a record must hold to match a query: one for an e-mail, else one per word of two letters
    /// or more (the longest indexed prefix of each); nil when the first word is shorter than two letters.
    func tokens(forQuery query: String) -> [Int64]? {
        let trimmed = Self.trimmed(query)
        if Self.isEmail(trimmed) { return [token("e", trimmed.lowercased())] }
        let words = Self.words(String(trimmed))
        guard let first = words.first, first.count >= 2 else { return nil }
        var tokens: [Int64] = []
        for word in words where word.count >= 2 {
            let token = word.count >= 4 ? token("p4", word.prefix(4)) : token("p2", word.prefix(2))
            if !tokens.contains(token) { tokens.append(token) }
        }
        return tokens
    }

    /// Tokens as the search index (FTS5) takes them, and as each row keeps its own, so that a change removes
    /// exactly its old ones: each token's 64 bits as 16 lower-case hex digits, separated by spaces; nil for
    /// none.
    static func text(_ tokens: [Int64]) -> String? {
        guard !tokens.isEmpty else { return nil }
        // Written digit by digit into one buffer: a string per token and a join cost more than sealing the row.
        return String(unsafeUninitializedCapacity: tokens.count * 17 - 1) { buffer in
            var count = 0
            for (position, token) in tokens.enumerated() {
                if position > 0 {
                    buffer[count] = UInt8(ascii: " ")
                    count += 1
                }
                let bits = UInt64(bitPattern: token)
                for shift in stride(from: 60, through: 0, by: -4) {
                    buffer[count] = hexDigits[Int((bits >> UInt64(shift)) & 0xF)]
                    count += 1
                }
            }
            return count
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// The tokens of ``text(_:)``; tokens it cannot read are left out.
    static func tokens(fromText text: String?) -> [Int64] {
        guard let text else { return [] }
        return text.split(separator: " ").compactMap { UInt64($0, radix: 16).map { Int64(bitPattern: $0) } }
    }

    /// The FTS5 query for records holding every one of `tokens`: each token quoted, joined by AND.
    static func matchExpression(_ tokens: [Int64]) -> String {
        tokens.map { "\"" + (text([$0]) ?? "") + "\"" }.joined(separator: " AND ")
    }

    /// The words of a query of name words, to give ``matches(name:queryWords:)``.
    static func queryWords(_ query: String) -> [String] { words(String(trimmed(query))) }

    /// Whether a candidate really matches: its exact field (an e-mail) exactly, or every query word a prefix of a
    /// word of its words field (a name).
    func matches(_ fields: [String: JSONValue], search: ReferenceSearch, query: String, queryWords: [String]) -> Bool {
        let trimmed = Self.trimmed(query)
        if Self.isEmail(trimmed) {
            guard let exact = search.exact else { return false }
            return fields[exact]?.stringValue.map { Self.trimmed($0.lowercased()) == trimmed.lowercased() } ?? false
        }
        return matches(name: fields[search.words]?.stringValue, queryWords: queryWords)
    }

    /// Whether a name matches a query's words: every query word a prefix of a name word. The name's words come
    /// through the memo, as when the name was indexed: a short prefix may have thousands of candidates.
    func matches(name: String?, queryWords: [String]) -> Bool {
        let nameWords = Self.words(name ?? "", memo: memo)
        return queryWords.allSatisfy { queryWord in nameWords.contains { $0.hasPrefix(queryWord) } }
    }
}

extension ReferenceIndex {
    /// What ``ReferenceIndex`` has already computed, shared by the threads that prepare a page: at most
    /// `limit` entries of each kind, forgotten all at once past that.
    final class Memo: Sendable {
        static let defaultLimit = 65_536
        let limit: Int
        private let tokens = NIOLockedValueBox<[String: Int64]>([:])
        private let words = NIOLockedValueBox<[String: [String]]>([:])

        init(limit: Int = defaultLimit) { self.limit = limit }

        func token(_ term: String, _ compute: () -> Int64) -> Int64 {
            if let known = tokens.withLockedValue({ $0[term] }) { return known }
            let token = compute()
            tokens.withLockedValue { tokens in
                if tokens.count >= limit { tokens.removeAll(keepingCapacity: true) }
                tokens[term] = token
            }
            return token
        }

        /// A token of an ASCII name prefix, keyed by its kind and bytes (``asciiNameTokens(_:into:)``).
        func token(prefix key: UInt64, _ compute: () -> Int64) -> Int64 {
            // Spread over shards, each with its own lock: the threads preparing a page look prefixes up at once.
            let shard = prefixShards[Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> 61)]
            if let known = shard.withLockedValue({ $0[key] }) { return known }
            let token = compute()
            shard.withLockedValue { tokens in
                if tokens.count >= limit / Self.shardCount { tokens.removeAll(keepingCapacity: true) }
                tokens[key] = token
            }
            return token
        }

        static let shardCount = 8
        private let prefixShards = (0..<shardCount).map { _ in NIOLockedValueBox<[UInt64: Int64]>([:]) }

        func folded(_ piece: String, _ compute: (String) -> [String]) -> [String] {
            if let known = words.withLockedValue({ $0[piece] }) { return known }
            let folded = compute(piece)
            words.withLockedValue { words in
                if words.count >= limit { words.removeAll(keepingCapacity: true) }
                words[piece] = folded
            }
            return folded
        }
    }
}
