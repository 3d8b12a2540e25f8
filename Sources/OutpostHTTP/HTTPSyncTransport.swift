import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import OutpostClient
import OutpostConcurrency
import OutpostProtocol

/// HTTP and JSON over AsyncHTTPClient, streaming pulls (OutpostHTTP). `URLSessionSyncTransport`
/// (OutpostURLSession) is the one for an app that sends its requests through URLSession.
public struct HTTPSyncTransport: BulkSyncTransport, SyncMonitorTransport, DeliveryStatusTransport, RecordIdKeyTransport,
    FileTransport
{
    public var baseURL: URL
    /// The token sent, renewed through the transport's ``CredentialsProvider`` when the server refuses it.
    public let bearer: BearerToken
    private let client: HTTPClient
    private let timeout: TimeAmount
    /// Ends answers that fall silent for as long as `timeout`.
    private let silence: DeadlineWatch
    private let silenceLimit: Duration

    /// - Parameters:
    ///   - baseURL: the server, such as `http://127.0.0.1:8080`.
    ///   - token: the bearer token; it is sent in a header and never logged.
    ///   - credentials: asked for a fresh token when the server refuses `token` (HTTP 401); the refused request is
    ///     sent once more with it, and later ones keep it. Without it, or when it has none, the call throws
    ///     ``TransportError/signInRequired(wire:)``.
    ///   - timeout: how long the server may take to begin its answer, and the longest it may then fall silent
    ///     before the answer is complete. Either ends the call with a retryable network error.
    ///   - clock: the clock that times those silences (tests use a test clock).
    public init(
        baseURL: URL, token: String, credentials: (any CredentialsProvider)? = nil, client: HTTPClient = .shared,
        timeout: Duration = .seconds(30), clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.baseURL = baseURL
        self.bearer = BearerToken(token, credentials: credentials)
        self.client = client
        self.timeout = .nanoseconds(timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
        // A quarter of the limit between looks: a silent answer ends between one and one and a quarter limits
        // after the last piece heard.
        self.silence = DeadlineWatch(clock: clock, tick: max(timeout / 4, .milliseconds(10)))
        self.silenceLimit = timeout
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
            .GET, path: "/v1/pull", query: TransportRequest.pullQuery(collection, scope, cursor, limit),
            decode: { try PullResponse(jsonBytes: $0) })
    }

    /// A pull whose change fields are kept as the JSON text received (see ``PullPage``).
    public func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage {
        try await send(
            .GET, path: "/v1/pull", query: TransportRequest.pullQuery(collection, scope, cursor, limit),
            decode: { try PullPage(jsonBytes: Array($0)) })
    }

    public func snapshot(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotResponse
    {
        try await send(
            .GET, path: "/v1/snapshot", query: TransportRequest.snapshotQuery(collection, scope, continuation, limit),
            decode: { try SnapshotResponse(jsonBytes: $0) })
    }

    public func snapshotPage(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotPage
    {
        try await send(
            .GET, path: "/v1/snapshot", query: TransportRequest.snapshotQuery(collection, scope, continuation, limit),
            decode: { try SnapshotPage(jsonBytes: Array($0)) })
    }

    public func health() async throws -> HealthResponse {
        try await send(.GET, path: "/health", query: [], body: nil)
    }

    public func deliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        try await send(.GET, path: "/v1/deliveries", query: TransportRequest.deliveriesQuery(collection, scope, recordIds))
    }

    public func retryDeliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
        try await send(.POST, path: "/v1/deliveries/retry", query: TransportRequest.deliveriesQuery(collection, scope, recordIds))
    }

    public func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
        try await send(.POST, path: "/v1/heartbeats", query: [], body: try JSONEncoder().encode(heartbeat))
    }

    public func recordIdKey() async throws -> RecordIdKeyResponse {
        try await send(.GET, path: "/v1/record-id-key", query: [])
    }

    /// A single-use sign-in link to the sync monitor, for an organizer's token.
    public func signInCode() async throws -> SignInCode {
        try await send(.POST, path: "/v1/sign-in-codes", query: [], body: nil)
    }

    /// One exchange with the server's other routes, for the organizer tools: the answer's body, or the error.
    package func exchange(_ method: HTTPMethod, path: String, body: Data? = nil) async throws -> Data {
        try await send(method, path: path, query: [], body: body, decode: { $0 })
    }

    public func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
        try await send(.POST, path: "/v1/sync-failures", query: [], body: try JSONEncoder().encode(report))
    }

    // MARK: Files

    public func upload(of sha256: String, collection: String) async throws -> FileUpload? {
        do {
            return try await send(.GET, path: "/v1/uploads/\(sha256)", query: [("collection", collection)])
        } catch let error as TransportError where TransportRequest.isNoUpload(error) {
            return nil
        }
    }

    /// Sends all of `body` in one request, read from the store as the connection takes it: the server stores it as
    /// it arrives. The silence limit counts from the last piece the connection took, or the last the answer
    /// brought, so a long upload on a slow link goes on while it moves.
    public func uploadRange(_ body: UploadBody, of file: FileReference, collection: String) async throws -> FileUpload {
        let query = TransportRequest.uploadQuery(file, collection, body.offset)
        return try await bearer.authorizing { token in
            var request = try makeRequest(.PUT, path: "/v1/uploads/\(file.sha256)", query: query, body: nil, token: token)
            request.headers.add(name: "Content-Type", value: "application/octet-stream")
            // The answer's head may wait for the whole body: the silence limit bounds the wait instead.
            return try await exchangeOnce(headTimeout: .hours(24), decode: { try JSONDecoder().decode(FileUpload.self, from: $0) }) {
                [request] heard in
                var sent = request
                sent.body = .stream(
                    JoinedPieces(body: body, heard: heard, elapsed: { [silence] in silence.timePassed() }),
                    length: .known(body.count))
                return sent
            }
        }
    }

    public func download(
        _ sha256: String, collection: String, scope: String?, recordId: String, from offset: Int64,
        receive: @escaping @Sendable (Data) async throws -> Void
    ) async throws {
        let query = TransportRequest.fileQuery(collection, scope, recordId)
        try await bearer.authorizing { token in
            var request = try makeRequest(.GET, path: "/v1/files/\(sha256)", query: query, body: nil, token: token)
            request.headers.replaceOrAdd(name: "Accept", value: "*/*")
            if offset > 0 { request.headers.add(name: "Range", value: "bytes=\(offset)-") }
            let (client, timeout, ranged) = (client, timeout, request)
            try await untilSilent { heard in
                let response = try await Self.head(of: ranged, client: client, timeout: timeout, heard: heard)
                try await Self.readFile(response, from: offset, heard: heard, receive)
            }
        }
    }

    /// A file's answer, given to `receive` a piece at a time as it comes.
    private static func readFile(
        _ response: HTTPClientResponse, from offset: Int64, heard: DeadlineWatch.Hearing,
        _ receive: @Sendable (Data) async throws -> Void
    ) async throws {
        let status = Int(response.status.code)
        guard status == 200 || status == 206 else {
            let body = try? await response.body.collect(upTo: 1024 * 1024)
            try TransportRequest.check(status: status, body: body.map { Data(buffer: $0) } ?? Data())
            throw TransportError(kind: .invalidResponse, status: status, message: "the server answered \(status)")
        }
        // A server that sends the whole file for a range request is read from the offset on.
        var skip = status == 200 ? offset : 0
        do {
            for try await piece in response.body {
                heard()
                var bytes = Data(buffer: piece)
                if skip > 0 {
                    let dropped = min(skip, Int64(bytes.count))
                    bytes.removeFirst(Int(dropped))
                    skip -= dropped
                }
                // Storing a piece reads nothing: the silence limit waits meanwhile.
                if !bytes.isEmpty { try await heard.resting { try await receive(bytes) } }
            }
        } catch let error as TransportError {
            throw error
        } catch let error as ClientError {
            throw error
        } catch {
            throw TransportError.droppedExchange(underlying: error)
        }
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
        contentType: String = "application/json", decode: (Data) throws -> T
    ) async throws -> T {
        try await bearer.authorizing { token in
            try await sendOnce(
                method, path: path, query: query, body: body, contentType: contentType, token: token, decode: decode)
        }
    }

    /// Runs `operation`, ended with a retryable network error once the server falls silent for the limit.
    private func untilSilent<T: Sendable>(
        _ operation: @escaping @Sendable (_ heard: DeadlineWatch.Hearing) async throws -> T
    ) async throws -> T {
        let limit = silenceLimit
        // Until the answer's head, AsyncHTTPClient's own deadline (the same limit) bounds the wait.
        return try await silence.endingSilence(after: limit, first: limit * 2, operation) { heardAnything in
            guard heardAnything else { return TransportError.unreachable() }
            var error = TransportError(
                kind: .network, message: "the server fell silent for \(limit.components.seconds) s in the middle of its answer")
            error.reachedServer = true
            return error
        }
    }

    /// One exchange with `token`.
    private func sendOnce<T>(
        _ method: HTTPMethod, path: String, query: [(String, String?)], body: Data?, contentType: String,
        token: String, decode: (Data) throws -> T
    ) async throws -> T {
        let request = try makeRequest(method, path: path, query: query, body: body, contentType: contentType, token: token)
        return try await exchangeOnce(decode: decode) { _ in request }
    }

    /// One exchange: the request `make` builds (given the hearing, for a body that tells its progress), its answer
    /// read whole, checked and decoded.
    ///
    /// - Parameter headTimeout: how long AsyncHTTPClient waits for the answer's head, when not the silence limit.
    private func exchangeOnce<T>(
        headTimeout: TimeAmount? = nil, decode: (Data) throws -> T,
        _ make: @escaping @Sendable (DeadlineWatch.Hearing) -> HTTPClientRequest
    ) async throws -> T {
        let (client, timeout) = (client, timeout)
        let (response, bytes) = try await untilSilent { heard in
            let response = try await Self.head(
                of: make(heard), client: client, timeout: headTimeout ?? timeout, limit: timeout, heard: heard)
            // The answer began: the server was reached, whatever breaks now.
            do {
                return (response, try await Self.collect(response.body, heard: heard))
            } catch let error as TransportError {
                throw error
            } catch {
                throw TransportError.droppedExchange(underlying: error)
            }
        }
        let data = Data(buffer: bytes)
        try TransportRequest.check(status: Int(response.status.code), body: data)
        return try TransportRequest.decoded(data, status: Int(response.status.code), decode)
    }

    /// Streams pulls as the server writes them, one page a line (`GET /v1/pull` with `pages`).
    public func pullPageStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullPage, any Error>
    {
        streamOfPulls(collection, scope, cursor, limit, pages) { try PullPage(jsonBytes: $0) }
    }

    /// The same stream, each page decoded whole (see ``BulkSyncTransport/pullStream(collection:scope:cursor:limit:pages:)``).
    public func pullStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullResponse, any Error>
    {
        streamOfPulls(collection, scope, cursor, limit, pages) { try PullResponse(jsonBytes: $0) }
    }

    /// Sends `request` and waits for its answer's head, which is heard: before it, no answer means no server.
    /// - Parameter limit: the wait reported when `timeout` passes (it is the wait for the answer's head).
    private static func head(
        of request: HTTPClientRequest, client: HTTPClient, timeout: TimeAmount, limit: TimeAmount? = nil,
        heard: DeadlineWatch.Hearing
    ) async throws -> HTTPClientResponse {
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: timeout)
        } catch let error as HTTPClientError where error == .deadlineExceeded {
            // Connected (a connection that cannot be made fails within AsyncHTTPClient's shorter connect
            // timeout), and no answer began.
            throw TransportError.notAnswering(within: .nanoseconds((limit ?? timeout).nanoseconds), underlying: error)
        } catch {
            throw TransportError.unreachable(underlying: error)
        }
        heard()
        return response
    }

    /// How a line that ends a stream with the server's error begins.
    private static let errorLinePrefix = Array(#"{"error""#.utf8)
    /// The largest answer read whole (a stream of pages is read a line at a time).
    private static let maxAnswerBytes = 256 * 1024 * 1024

    /// An answer's whole body, each piece heard as it comes.
    private static func collect(_ body: HTTPClientResponse.Body, heard: DeadlineWatch.Hearing) async throws -> ByteBuffer {
        var bytes = ByteBuffer()
        for try await piece in body {
            heard()
            bytes.writeImmutableBuffer(piece)
            guard bytes.readableBytes <= maxAnswerBytes else {
                throw TransportError(kind: .invalidResponse, message: "the server's answer is larger than 256 MiB")
            }
        }
        return bytes
    }

    /// A stream of pulls (`GET /v1/pull` with `pages`), each line read with `decode`.
    private func streamOfPulls<Page: Sendable>(
        _ collection: String, _ scope: String?, _ cursor: String?, _ limit: Int, _ pages: Int,
        decode: @escaping @Sendable ([UInt8]) throws -> Page
    ) -> AsyncThrowingStream<Page, any Error> {
        let query = TransportRequest.pullQuery(collection, scope, cursor, limit) + [("pages", String(pages))]
        return AsyncThrowingStream.produced { deliver in
            // A refused token is answered before any page, so that the stream can start again with a fresh one.
            try await bearer.authorizing { token in
                var ndjson = try makeRequest(.GET, path: "/v1/pull", query: query, body: nil, token: token)
                ndjson.headers.replaceOrAdd(name: "Accept", value: "application/x-ndjson")
                let (client, timeout, request) = (client, timeout, ndjson)
                try await untilSilent { heard in
                    let response = try await Self.head(of: request, client: client, timeout: timeout, heard: heard)
                    try await Self.readPages(of: response, decode: decode, heard: heard, deliver)
                }
            }
        }
    }

    /// The pages of a pull's answer: lines of a stream, or one page from a server that predates streams.
    private static func readPages<Page>(
        of response: HTTPClientResponse, decode: ([UInt8]) throws -> Page, heard: DeadlineWatch.Hearing,
        _ deliver: (Page) async throws -> Void
    ) async throws {
        guard (200..<300).contains(response.status.code) else {
            let body = try? await response.body.collect(upTo: 1024 * 1024)
            try TransportRequest.check(status: Int(response.status.code), body: body.map { Data(buffer: $0) } ?? Data())
            return
        }
        let status = Int(response.status.code)
        func page(_ bytes: [UInt8]) throws -> Page {
            if bytes.starts(with: Self.errorLinePrefix) {
                let wire = try? JSONDecoder().decode(WireError.self, from: Data(bytes))
                // The status the error would have come with, had it come before the stream began.
                throw TransportError(
                    kind: .server, status: wire?.code == .internalError ? 500 : 503, wire: wire,
                    message: wire?.message ?? "the server could not finish the stream")
            }
            do {
                return try decode(bytes)
            } catch {
                throw TransportError(
                    kind: .invalidResponse, status: status, message: "the server's answer is not Outpost's protocol",
                    underlying: error)
            }
        }
        // A server that predates streams answers one page, as an ordinary pull.
        guard response.headers["Content-Type"].contains(where: { $0.hasPrefix("application/x-ndjson") }) else {
            let bytes: ByteBuffer
            do {
                bytes = try await collect(response.body, heard: heard)
            } catch let error as TransportError {
                throw error
            } catch {
                throw TransportError.droppedPull(underlying: error)
            }
            let page = try page(Array(buffer: bytes))
            try await heard.resting { try await deliver(page) }
            return
        }
        var lines = LineSplitter()
        do {
            for try await piece in response.body {
                heard()
                for line in lines.lines(in: piece.readableBytesView) {
                    let page = try page(line)
                    // Waiting for the consumer to take a page reads nothing: the server's writes wait meanwhile.
                    try await heard.resting { try await deliver(page) }
                }
            }
        } catch let error as TransportError {
            throw error
        } catch {
            throw TransportError.droppedPull(underlying: error)
        }
        // A last line without its newline is a page cut short: the stream broke.
        guard !lines.holdsPartialLine else {
            throw TransportError.droppedPull()
        }
    }

    private func makeRequest(
        _ method: HTTPMethod, path: String, query: [(String, String?)], body: Data?,
        contentType: String = "application/json", token: String
    ) throws -> HTTPClientRequest {
        let url = try TransportRequest.url(baseURL, path: path, query: query)
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: ProtocolFeature.header, value: ProtocolFeature.allNames)
        if let body {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        return request
    }
}

/// An upload's pieces as the connection asks for them, in writes sized by how fast it asks: 64 KiB at first and
/// after any wait of over a second (a slow link), doubled each time it asks again within 100 ms, up to 2 MiB (one
/// write and one hand-off for four chunks of the store). Each ask is heard: it means the last write went out, so
/// on a slow link the silence limit counts from the last 64 KiB sent, not the last 2 MiB.
struct JoinedPieces: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    static let smallestBytes = 64 * 1024
    static let largestBytes = 2 * 1024 * 1024
    static let quickAsk = Duration.milliseconds(100)
    static let slowAsk = Duration.seconds(1)

    let body: UploadBody
    let heard: DeadlineWatch.Hearing
    /// The time passed, on the transport's clock.
    let elapsed: @Sendable () -> Duration

    struct AsyncIterator: AsyncIteratorProtocol {
        var pieces: AsyncThrowingStream<Data, any Error>.AsyncIterator
        let heard: DeadlineWatch.Hearing
        let elapsed: @Sendable () -> Duration
        var target = JoinedPieces.smallestBytes
        var lastAsk: Duration?
        /// Bytes read from the store and not given yet.
        var pending = ByteBuffer()

        mutating func next() async throws -> ByteBuffer? {
            let now = elapsed()
            if let lastAsk {
                let wait = now - lastAsk
                if wait < JoinedPieces.quickAsk {
                    target = Swift.min(target * 2, JoinedPieces.largestBytes)
                } else if wait > JoinedPieces.slowAsk {
                    target = JoinedPieces.smallestBytes
                }
            }
            lastAsk = now
            heard()
            if pending.readableBytes == 0 {
                var joined: ByteBuffer?
                while (joined?.readableBytes ?? 0) < target, let piece = try await pieces.next() {
                    if joined == nil { joined = ByteBufferAllocator().buffer(capacity: Swift.max(target, piece.count)) }
                    joined?.writeBytes(piece)
                }
                guard let joined else { return nil }
                pending = joined
            }
            return pending.readSlice(length: Swift.min(target, pending.readableBytes))
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(pieces: body.pieces().makeAsyncIterator(), heard: heard, elapsed: elapsed)
    }
}

/// Splits bytes that arrive in pieces into lines at each newline, whatever the pieces' boundaries.
struct LineSplitter {
    private var partial: [UInt8] = []

    /// The lines `piece` completes, without their newlines; empty lines are skipped.
    mutating func lines(in piece: some Collection<UInt8>) -> [[UInt8]] {
        var complete: [[UInt8]] = []
        var rest = piece[...]
        while let end = rest.firstIndex(of: UInt8(ascii: "\n")) {
            partial.append(contentsOf: rest[..<end])
            if !partial.isEmpty { complete.append(partial) }
            partial = []
            rest = rest[rest.index(after: end)...]
        }
        partial.append(contentsOf: rest)
        return complete
    }

    /// Whether bytes of a line without its newline are held.
    var holdsPartialLine: Bool { !partial.isEmpty }
}
