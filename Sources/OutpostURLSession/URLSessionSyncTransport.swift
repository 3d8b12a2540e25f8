import Foundation
import OutpostClient
import OutpostProtocol

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// HTTP and JSON over `URLSession`: the transport for an app that ships without NIO. It shares the token rule of
/// `HTTPSyncTransport` (``BearerToken``) and its errors; pulls come a page per request.
///
/// Pass a session configured for the app (a background session cannot serve: the engine awaits each answer), with
/// no `URLCache`, as ``uncachedSession`` is: a sync answer must never come from a cache, and FoundationNetworking
/// (Linux) traps the process when a request is cancelled while its session's cache is being read.
public struct URLSessionSyncTransport: BulkSyncTransport, SyncMonitorTransport, DeliveryStatusTransport, RecordIdKeyTransport,
    FileTransport
{
    public var baseURL: URL
    /// The token sent, renewed through the transport's ``CredentialsProvider`` when the server refuses it.
    public let bearer: BearerToken
    private let session: URLSession
    private let timeout: TimeInterval

    /// - Parameters:
    ///   - baseURL: the server, such as `https://sync.example.org`.
    ///   - token: the bearer token; it is sent in a header and never logged.
    ///   - credentials: asked for a fresh token when the server refuses `token`, as `HTTPSyncTransport` does.
    ///   - session: the session requests go through; one without a `URLCache` (see ``uncachedSession``).
    ///   - timeout: the longest the server may fall silent, before or during its answer: a retryable network error.
    public init(
        baseURL: URL, token: String, credentials: (any CredentialsProvider)? = nil, session: URLSession = uncachedSession,
        timeout: Duration = .seconds(30)
    ) {
        self.baseURL = baseURL
        self.bearer = BearerToken(token, credentials: credentials)
        self.session = session
        self.timeout = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
    }

    /// A session with no cache, for sync requests.
    public static let uncachedSession: URLSession = {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        return URLSession(configuration: configuration)
    }()

    public func push(_ request: PushRequest) async throws -> PushResponse {
        try await send("POST", path: "/v1/push", body: Data(try request.jsonBytes())) { try PushResponse(jsonBytes: $0) }
    }

    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        try await send("GET", path: "/v1/pull", query: TransportRequest.pullQuery(collection, scope, cursor, limit)) {
            try PullResponse(jsonBytes: $0)
        }
    }

    public func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage {
        try await send("GET", path: "/v1/pull", query: TransportRequest.pullQuery(collection, scope, cursor, limit)) {
            try PullPage(jsonBytes: Array($0))
        }
    }

    public func snapshot(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotResponse
    {
        try await send(
            "GET", path: "/v1/snapshot", query: TransportRequest.snapshotQuery(collection, scope, continuation, limit)
        ) { try SnapshotResponse(jsonBytes: $0) }
    }

    public func snapshotPage(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotPage
    {
        try await send(
            "GET", path: "/v1/snapshot", query: TransportRequest.snapshotQuery(collection, scope, continuation, limit)
        ) { try SnapshotPage(jsonBytes: Array($0)) }
    }

    public func health() async throws -> HealthResponse {
        try await send("GET", path: "/health") { try JSONDecoder().decode(HealthResponse.self, from: $0) }
    }

    public func deliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        try await send("GET", path: "/v1/deliveries", query: TransportRequest.deliveriesQuery(collection, scope, recordIds)) {
            try JSONDecoder().decode(RecordDeliveries.self, from: $0)
        }
    }

    public func retryDeliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        try await send("POST", path: "/v1/deliveries/retry", query: TransportRequest.deliveriesQuery(collection, scope, recordIds)) {
            try JSONDecoder().decode(RecordDeliveries.self, from: $0)
        }
    }

    public func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
        try await send("POST", path: "/v1/heartbeats", body: try JSONEncoder().encode(heartbeat)) {
            try JSONDecoder().decode(HeartbeatResponse.self, from: $0)
        }
    }

    public func recordIdKey() async throws -> RecordIdKeyResponse {
        try await send("GET", path: "/v1/record-id-key") {
            try JSONDecoder().decode(RecordIdKeyResponse.self, from: $0)
        }
    }

    public func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        try await send("POST", path: "/v1/sync-failures", body: try JSONEncoder().encode(report)) {
            try JSONDecoder().decode(SyncFailureReceipt.self, from: $0)
        }
    }

    // MARK: Files

    public func upload(of sha256: String, collection: String) async throws -> FileUpload? {
        do {
            return try await send("GET", path: "/v1/uploads/\(sha256)", query: [("collection", collection)]) {
                try JSONDecoder().decode(FileUpload.self, from: $0)
            }
        } catch let error as TransportError where TransportRequest.isNoUpload(error) {
            return nil
        }
    }

    /// The bytes of one upload request: URLSession sends a body it holds whole, so a range of at most this many is
    /// read and sent at a time.
    public static let uploadRangeBytes = 1024 * 1024

    /// Sends the first ``uploadRangeBytes`` of `body` (all of it when shorter).
    public func uploadRange(_ body: UploadBody, of file: FileReference, collection: String) async throws -> FileUpload {
        let bytes = try await body.prefix(Self.uploadRangeBytes)
        return try await send(
            "PUT", path: "/v1/uploads/\(file.sha256)", query: TransportRequest.uploadQuery(file, collection, body.offset),
            body: bytes, contentType: "application/octet-stream"
        ) { try JSONDecoder().decode(FileUpload.self, from: $0) }
    }

    /// The bytes of one download request: URLSession on Linux streams no answer, so a file comes this many bytes a
    /// request, each piece given to `receive` before the next is asked for.
    public static let downloadRangeBytes = 1024 * 1024

    /// The file's bytes from `offset`, ``downloadRangeBytes`` a request, until the answers' `Content-Range` says the
    /// file has ended. A server that answers a range with the whole file is read from the offset on.
    public func download(
        _ sha256: String, collection: String, scope: String?, recordId: String, from offset: Int64,
        receive: @escaping @Sendable (Data) async throws -> Void
    ) async throws {
        let query = TransportRequest.fileQuery(collection, scope, recordId)
        var next = offset
        while true {
            let last = next + Int64(Self.downloadRangeBytes) - 1
            let (bytes, answer) = try await send(
                "GET", path: "/v1/files/\(sha256)", query: query, accept: "*/*", headers: ["Range": "bytes=\(next)-\(last)"]
            ) { $0 }
            guard answer.statusCode == 206 else {
                try await receive(bytes.dropFirst(Int(next)))
                return
            }
            guard let range = answer.value(forHTTPHeaderField: "Content-Range").flatMap(Self.contentRange),
                range.first == next, range.last - range.first + 1 == Int64(bytes.count), !bytes.isEmpty
            else {
                throw TransportError(kind: .invalidResponse, message: "the server's answer to a range of a file is not that range")
            }
            try await receive(bytes)
            next = range.last + 1
            if next >= range.size { return }
        }
    }

    /// The first byte, last byte and file size that a `Content-Range: bytes F-L/S` header gives.
    static func contentRange(_ header: String) -> (first: Int64, last: Int64, size: Int64)? {
        guard header.hasPrefix("bytes ") else { return nil }
        let parts = header.dropFirst("bytes ".count).split(whereSeparator: { $0 == "-" || $0 == "/" })
        guard parts.count == 3, let first = Int64(parts[0]), let last = Int64(parts[1]), let size = Int64(parts[2]),
            first <= last, last < size
        else { return nil }
        return (first, last, size)
    }

    private func send<T>(
        _ method: String, path: String, query: [(String, String?)] = [], body: Data? = nil,
        contentType: String = "application/json", decode: @escaping (Data) throws -> T
    ) async throws -> T {
        try await send(method, path: path, query: query, body: body, contentType: contentType, decode: decode).value
    }

    private func send<T>(
        _ method: String, path: String, query: [(String, String?)] = [], body: Data? = nil,
        contentType: String = "application/json", accept: String = "application/json", headers: [String: String] = [:],
        decode: @escaping (Data) throws -> T
    ) async throws -> (value: T, answer: HTTPURLResponse) {
        let url = try TransportRequest.url(baseURL, path: path, query: query)
        return try await bearer.authorizing { token in
            var request = URLRequest(url: url, timeoutInterval: timeout)
            request.httpMethod = method
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            request.setValue(accept, forHTTPHeaderField: "Accept")
            request.setValue(ProtocolFeature.allNames, forHTTPHeaderField: ProtocolFeature.header)
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            if let body {
                request.setValue(contentType, forHTTPHeaderField: "Content-Type")
                request.httpBody = body
            }
            let data: Data
            let response: URLResponse
            do {
                (data, response) = try await session.data(for: request)
            } catch let error as URLError where error.code == .timedOut {
                throw TransportError.notAnswering(within: .seconds(request.timeoutInterval), underlying: error)
            } catch {
                if Task.isCancelled { throw CancellationError() }
                throw TransportError.unreachable(underlying: error)
            }
            guard let http = response as? HTTPURLResponse else {
                throw TransportError(kind: .invalidResponse, message: "the server's answer is not HTTP")
            }
            try TransportRequest.check(status: http.statusCode, body: data)
            return (try TransportRequest.decoded(data, status: http.statusCode, decode), http)
        }
    }
}

extension Outpost.Transport {
    /// HTTP on `URLSession` (``URLSessionSyncTransport``): the transport of an app that links no NIO.
    public static func urlSession(
        _ session: URLSession = URLSessionSyncTransport.uncachedSession, timeout: Duration = .seconds(30)
    ) -> Self {
        Self { server, token, credentials in
            URLSessionSyncTransport(baseURL: server, token: token, credentials: credentials, session: session, timeout: timeout)
        }
    }
}
