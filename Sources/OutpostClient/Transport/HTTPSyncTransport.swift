import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import OutpostProtocol

/// The default transport: HTTP and JSON over AsyncHTTPClient. (On Apple platforms URLSession would serve.)
public struct HTTPSyncTransport: SyncTransport {
    public var baseURL: URL
    private let token: String
    private let client: HTTPClient
    private let timeout: TimeAmount

    /// - Parameters:
    ///   - baseURL: the server, such as `http://127.0.0.1:8080`.
    ///   - token: the bearer token; it is sent in a header and never logged.
    public init(baseURL: URL, token: String, client: HTTPClient = .shared, timeout: Duration = .seconds(30)) {
        self.baseURL = baseURL
        self.token = token
        self.client = client
        self.timeout = .nanoseconds(timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
    }

    /// A client configured for field devices: a refused connection fails at once instead of being retried
    /// until the request's deadline, so that going offline is noticed in milliseconds. The caller owns it
    /// and shuts it down.
    public static func makeDeviceClient() -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.timeout.connect = .seconds(5)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    public func push(_ request: PushRequest) async throws -> PushResponse {
        return try await send(
            .POST, path: "/v1/push", query: [], body: Data(try request.jsonBytes()),
            decode: { try PushResponse(jsonBytes: $0) })
    }

    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        try await send(
            .GET, path: "/v1/pull", query: Self.pullQuery(collection, scope, cursor, limit),
            decode: { try PullResponse(jsonBytes: $0) })
    }

    /// A pull whose change fields are kept as the JSON text received (see ``PullPage``).
    public func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage {
        try await send(
            .GET, path: "/v1/pull", query: Self.pullQuery(collection, scope, cursor, limit),
            decode: { try PullPage(jsonBytes: Array($0)) })
    }

    private static func pullQuery(
        _ collection: String, _ scope: String?, _ cursor: String?, _ limit: Int?
    ) -> [(String, String?)] {
        [("collection", collection), ("scope", scope), ("cursor", cursor), ("limit", limit.map(String.init))]
    }

    public func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws
        -> SnapshotResponse
    {
        try await send(
            .GET, path: "/v1/snapshot", query: Self.snapshotQuery(collection, scope, continuation, limit),
            decode: { try SnapshotResponse(jsonBytes: $0) })
    }

    public func snapshotPage(collection: String, scope: String?, continuation: String?, limit: Int?) async throws
        -> SnapshotPage
    {
        try await send(
            .GET, path: "/v1/snapshot", query: Self.snapshotQuery(collection, scope, continuation, limit),
            decode: { try SnapshotPage(jsonBytes: Array($0)) })
    }

    private static func snapshotQuery(
        _ collection: String, _ scope: String?, _ continuation: String?, _ limit: Int?
    ) -> [(String, String?)] {
        [("collection", collection), ("scope", scope), ("continuation", continuation), ("limit", limit.map(String.init))]
    }

    public func health() async throws -> HealthResponse {
        try await send(.GET, path: "/health", query: [], body: nil)
    }

    public func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
        try await send(.POST, path: "/v1/heartbeats", query: [], body: try JSONEncoder().encode(heartbeat))
    }

    public func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        try await send(.POST, path: "/v1/sync-failures", query: [], body: try JSONEncoder().encode(report))
    }

    private func send<T: Decodable>(
        _ method: HTTPMethod, path: String, query: [(String, String?)], body: Data? = nil
    ) async throws -> T {
        try await send(method, path: path, query: query, body: body, decode: { try JSONDecoder().decode(T.self, from: $0) })
    }

    /// Pages of changes are read with `decode` (their own reader; see `JSONValue.init(parsing:)`), the rest
    /// with `JSONDecoder`.
    private func send<T>(
        _ method: HTTPMethod, path: String, query: [(String, String?)], body: Data? = nil,
        decode: (Data) throws -> T
    ) async throws -> T {
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
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Accept", value: "application/json")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        do {
            response = try await client.execute(request, timeout: timeout)
            bytes = try await response.body.collect(upTo: 256 * 1024 * 1024)
        } catch {
            throw TransportError(kind: .network, message: "the server could not be reached")
        }
        let data = Data(buffer: bytes)
        guard (200..<300).contains(response.status.code) else {
            let wire = try? JSONDecoder().decode(WireError.self, from: data)
            throw TransportError(
                kind: .server, status: Int(response.status.code), wire: wire,
                message: wire?.message ?? "the server answered \(response.status.code)")
        }
        do {
            return try decode(data)
        } catch {
            throw TransportError(
                kind: .invalidResponse, status: Int(response.status.code),
                message: "the server's answer is not Outpost's protocol")
        }
    }
}
