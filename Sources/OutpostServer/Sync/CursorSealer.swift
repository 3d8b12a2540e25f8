import Crypto
import Foundation
import OutpostProtocol

/// Turns pull cursors into the opaque tokens clients hold, and back.
///
/// A cursor is a position in the server's change order, which every tenant shares: in the clear, two cursors a
/// tenant receives would tell how many changes other tenants made between them. A token is the position sealed
/// with AES-GCM under a key derived from the server's secret, with a fresh nonce each time and the tenant as
/// authenticated data: it tells nothing but whether two tokens stand for the same position, cannot be forged,
/// and is refused by any other tenant. The nonce is a keyed hash of the tenant and the position (as in
/// AES-GCM-SIV), so one position always gives one token: a nonce repeats only with its plaintext.
///
/// Tokens of the unsealed form `c1.<xid>.<seq>`, which earlier servers issued and devices keep, are still
/// read: they only position a read that is filtered by tenant anyway.
struct CursorSealer: Sendable {
    let key: SymmetricKey
    let nonceKey: SymmetricKey

    /// Derives both keys from `secret`.
    init(secret: SymmetricKey) {
        func derive(_ label: String) -> SymmetricKey {
            SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: Array(label.utf8), using: secret))
        }
        key = derive("outpost-pull-cursor")
        nonceKey = derive("outpost-pull-cursor-nonce")
    }

    /// The prefix of a sealed token.
    static let prefix = "c2."

    /// The opaque token of `cursor` for `tenant`.
    func token(_ cursor: PullCursor, tenant: String) -> String {
        guard cursor != .start else { return cursor.token }
        var plain = [UInt8]()
        plain.reserveCapacity(16)
        withUnsafeBytes(of: cursor.xid.bigEndian) { plain.append(contentsOf: $0) }
        withUnsafeBytes(of: cursor.seq.bigEndian) { plain.append(contentsOf: $0) }
        let context = Array(tenant.utf8)
        let digest = HMAC<SHA256>.authenticationCode(for: context + [0] + plain, using: nonceKey)
        // Twelve bytes always make a nonce, and sealing 16 bytes under a 256-bit key cannot fail.
        let nonce = try! AES.GCM.Nonce(data: Array(digest.prefix(12)))
        let box = try! AES.GCM.seal(plain, using: key, nonce: nonce, authenticating: context)
        return Self.prefix + Base64URL.encode(box.combined!)
    }

    /// The cursor `token` stands for, or nil when this server did not issue it for `tenant`.
    func cursor(_ token: String, tenant: String) -> PullCursor? {
        guard token.hasPrefix(Self.prefix) else { return PullCursor(token: token) }
        guard token.utf8.count < 128, let data = Base64URL.decode(token.dropFirst(Self.prefix.count)).map({ Data($0) }),
            let box = try? AES.GCM.SealedBox(combined: data),
            let plain = try? AES.GCM.open(box, using: key, authenticating: Array(tenant.utf8)), plain.count == 16
        else { return nil }
        let bytes = Array(plain)
        func number(_ range: Range<Int>) -> Int64 {
            bytes[range].reduce(Int64(0)) { $0 << 8 | Int64($1) }
        }
        let cursor = PullCursor(xid: number(0..<8), seq: number(8..<16))
        return cursor.xid >= 0 && cursor.seq >= 0 ? cursor : nil
    }
}
