import Crypto
import Foundation
import OutpostProtocol

/// Where the next snapshot page starts, carried by the client: stateless, signed, valid across restarts.
///
/// It names the tenant, collection and scope it was issued for, the last record id sent, the pull cursor
/// taken when the snapshot started and the total counted then. The server's HMAC makes it tamper-proof.
struct SnapshotContinuation: Sendable, Hashable, Codable {
    var tenant: String
    var collection: String
    var scope: String?
    var after: String
    /// The scope of the last record sent, in a snapshot of every scope; nil in tokens issued before records
    /// were keyed by scope.
    var afterScope: String?
    var cursor: String
    var total: Int

    private enum CodingKeys: String, CodingKey {
        case tenant = "t", collection = "c", scope = "s", after = "a", afterScope = "as", cursor = "k", total = "n"
    }

    /// The last record sent, or nil before the first page.
    var position: RecordPosition? {
        after.isEmpty && afterScope == nil ? nil : RecordPosition(recordId: after, scope: afterScope ?? "")
    }

    func token(key: SymmetricKey) throws -> String {
        let body = try StorageCoding.encoder.encode(self)
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: key)
        return Base64URL.encode(body) + "." + Base64URL.encode(Data(mac))
    }

    /// The continuation in `token`, or `nil` when it is malformed or was not signed with `key`.
    init?(token: String, key: SymmetricKey) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count < 4096, parts[1].count < 4096,
            let body = Base64URL.decode(parts[0]).map({ Data($0) }), let mac = Base64URL.decode(parts[1]),
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
}
