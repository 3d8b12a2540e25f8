import Crypto
import Foundation

/// Where the next snapshot page starts, carried by the client: stateless, signed, valid across restarts.
///
/// It names the tenant, collection and scope it was issued for, the last record id sent, the pull cursor
/// taken when the snapshot started and the total counted then. The server's HMAC makes it tamper-proof.
struct SnapshotContinuation: Sendable, Hashable, Codable {
    var tenant: String
    var collection: String
    var scope: String?
    var after: String
    var cursor: String
    var total: Int

    private enum CodingKeys: String, CodingKey {
        case tenant = "t", collection = "c", scope = "s", after = "a", cursor = "k", total = "n"
    }

    func token(key: SymmetricKey) throws -> String {
        let body = try StorageCoding.encoder.encode(self)
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: key)
        return Self.base64URL(body) + "." + Self.base64URL(Data(mac))
    }

    /// The continuation in `token`, or `nil` when it is malformed or was not signed with `key`.
    init?(token: String, key: SymmetricKey) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let body = Self.data(base64URL: parts[0]), let mac = Self.data(base64URL: parts[1]),
            HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: body, using: key),
            let value = try? JSONDecoder().decode(Self.self, from: body)
        else { return nil }
        self = value
    }

    init(tenant: String, collection: String, scope: String?, after: String, cursor: String, total: Int) {
        self.tenant = tenant
        self.collection = collection
        self.scope = scope
        self.after = after
        self.cursor = cursor
        self.total = total
    }

    private static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func data(base64URL text: Substring) -> Data? {
        guard text.count < 4096 else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
