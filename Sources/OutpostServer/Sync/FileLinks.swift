import Crypto
import Foundation
import OutpostProtocol

/// Signed, expiring links to the files records name, for systems outside Outpost that hold no token: a connector's
/// receiver (a crew's sheet) and an export.
///
/// A link names the record as well as the file, and the server checks, when it is opened, that the record still
/// names the file: a link to a photo that was replaced or deleted stops working before it expires. Its signature
/// is an HMAC-SHA256, under a key derived from the server's secret, of everything the link names and its expiry.
package struct FileLinks: Sendable {
    /// The server's address as the link's reader reaches it, such as `https://sync.example.org`.
    package let base: URL
    let key: SymmetricKey
    /// How long a link works.
    package let lifetime: Duration

    package init(base: URL, key: SymmetricKey, lifetime: Duration) {
        self.base = base
        self.key = key
        self.lifetime = lifetime
    }

    /// The links of a server configured with a public address (``ServerConfiguration/publicURL``), or nil.
    static func of(_ configuration: ServerConfiguration, secrets: ServerSecrets) throws -> FileLinks? {
        guard let base = configuration.publicURL else { return nil }
        return FileLinks(base: base, key: try secrets.fileLinkKey(), lifetime: configuration.fileLinkLifetime)
    }

    /// `fields` with each file a field names replaced by a link to it, as a system outside Outpost reads it.
    func linking(_ fields: [String: JSONValue], of target: Target, now: Date) -> [String: JSONValue] {
        var linked = fields
        for (name, file) in FileReference.references(in: fields) {
            var fileTarget = target
            fileTarget.sha256 = file.sha256
            linked[name] = .string(link(to: file, of: fileTarget, now: now).url)
        }
        return linked
    }

    /// The path links take: `/files/{sha256}`, outside `/v1`, since no bearer token comes with them.
    package static let pathPrefix = "/files/"

    /// What one link names.
    package struct Target: Sendable, Hashable {
        package var tenant: String
        package var collection: String
        package var scope: String
        package var recordId: String
        package var sha256: String

        package init(tenant: String, collection: String, scope: String, recordId: String, sha256: String) {
            self.tenant = tenant
            self.collection = collection
            self.scope = scope
            self.recordId = recordId
            self.sha256 = sha256
        }
    }

    /// A link to `file` of `target`, working until `lifetime` after `now`.
    package func link(to file: FileReference, of target: Target, now: Date) -> FileLink {
        let expires = Int64(now.timeIntervalSince1970) + lifetime.components.seconds
        var components = URLComponents(url: base, resolvingAgainstBaseURL: false) ?? URLComponents()
        let basePath = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        components.path = basePath + Self.pathPrefix + target.sha256
        components.queryItems =
            [
                URLQueryItem(name: "tenant", value: target.tenant), URLQueryItem(name: "collection", value: target.collection),
                URLQueryItem(name: "recordId", value: target.recordId),
            ] + (target.scope.isEmpty ? [] : [URLQueryItem(name: "scope", value: target.scope)]) + [
                URLQueryItem(name: "expires", value: String(expires)),
                URLQueryItem(name: "signature", value: signature(of: target, expires: expires)),
            ]
        components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        return FileLink(
            url: components.url?.absoluteString ?? "", name: file.name, type: file.type, size: file.size,
            expiresAt: Timestamp(millisecondsSince1970: expires * 1000))
    }

    /// Whether `signature` is this server's for `target` until `expires` (seconds since 1970), and that time has not
    /// come at `now`.
    package func verifies(_ target: Target, expires: Int64, signature: String, now: Date) -> Bool {
        guard Int64(now.timeIntervalSince1970) < expires, let given = [UInt8](hex: signature), given.count == 32 else {
            return false
        }
        // Compared in constant time.
        return HMAC<SHA256>.isValidAuthenticationCode(given, authenticating: Self.message(target, expires: expires), using: key)
    }

    private func signature(of target: Target, expires: Int64) -> String {
        Array(HMAC<SHA256>.authenticationCode(for: Self.message(target, expires: expires), using: key)).hexString
    }

    private static func message(_ target: Target, expires: Int64) -> [UInt8] {
        Array(
            [target.tenant, target.collection, target.scope, target.recordId, target.sha256, String(expires)]
                .joined(separator: "\u{0}").utf8)
    }
}
