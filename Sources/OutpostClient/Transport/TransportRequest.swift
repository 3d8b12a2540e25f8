import Foundation
import OutpostProtocol

/// What both HTTP transports share: the URL of a call and the reading of an answer's status.
package enum TransportRequest {
    /// `baseURL` with `path` appended and the query's non-nil items.
    package static func url(_ baseURL: URL, path: String, query: [(String, String?)]) throws -> URL {
        guard var components = URLComponents(url: baseURL, resolvingAgainstBaseURL: false) else {
            throw TransportError(kind: .invalidResponse, message: "cannot build a URL from \(baseURL)")
        }
        let basePath = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        components.path = basePath + path
        let items = query.compactMap { name, value in value.map { URLQueryItem(name: name, value: $0) } }
        if !items.isEmpty { components.queryItems = items }
        // '+' is a literal in a query but some servers read it as a space.
        let encodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        components.percentEncodedQuery = encodedQuery
        guard let url = components.url else {
            throw TransportError(kind: .invalidResponse, message: "cannot build a URL from \(baseURL)")
        }
        return url
    }

    package static func pullQuery(_ collection: String, _ scope: String?, _ cursor: String?, _ limit: Int?) -> [(String, String?)] {
        [("collection", collection), ("scope", scope), ("cursor", cursor), ("limit", limit.map(String.init))]
    }

    package static func deliveriesQuery(_ collection: String, _ scope: String?, _ recordIds: [String]) -> [(String, String?)] {
        [("collection", collection), ("scope", scope), ("ids", recordIds.joined(separator: ","))]
    }

    package static func snapshotQuery(
        _ collection: String, _ scope: String?, _ continuation: String?, _ limit: Int?
    ) -> [(String, String?)] {
        [("collection", collection), ("scope", scope), ("continuation", continuation), ("limit", limit.map(String.init))]
    }

    /// `PUT /v1/uploads/{sha256}`'s query: one range of `file`, at `offset`, for a record of `collection`.
    package static func uploadQuery(_ file: FileReference, _ collection: String, _ offset: Int64) -> [(String, String?)] {
        [("collection", collection), ("size", String(file.size)), ("type", file.type), ("offset", String(offset))]
    }

    /// `GET /v1/files/{sha256}`'s query: the record that names the file.
    package static func fileQuery(_ collection: String, _ scope: String?, _ recordId: String) -> [(String, String?)] {
        [("collection", collection), ("recordId", recordId), ("scope", scope)]
    }

    /// Whether `error` is `GET /v1/uploads/{sha256}`'s answer that the server holds none of the file.
    package static func isNoUpload(_ error: TransportError) -> Bool {
        error.status == 404 && error.wire?.code == .notFound
    }

    /// Throws the server's error for an answer other than 2xx; a refused token says to sign in again.
    package static func check(status: Int, body: Data) throws {
        guard !(200..<300).contains(status) else { return }
        let wire = try? JSONDecoder().decode(WireError.self, from: body)
        if status == 401 { throw TransportError.signInRequired(wire: wire) }
        throw TransportError(kind: .server, status: status, wire: wire, message: wire?.message ?? "the server answered \(status)")
    }

    /// `decode`'s value, or the error of an answer that is not Outpost's protocol.
    package static func decoded<T>(_ data: Data, status: Int, _ decode: (Data) throws -> T) throws -> T {
        do {
            return try decode(data)
        } catch {
            throw TransportError(
                kind: .invalidResponse, status: status, message: "the server's answer is not Outpost's protocol", underlying: error)
        }
    }
}
