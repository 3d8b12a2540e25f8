import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Logging
import NIOFoundationCompat
import OutpostProtocol
import Testing

@testable import OutpostServer

/// Every kind of bad input gets a clear 4xx in the wire format and writes nothing.
@Suite("Bad input")
struct BadInputTests {
    static let badBodies: [(name: String, body: [UInt8], code: WireError.Code)] = [
        ("empty", [], .invalidJSON),
        ("not JSON", Array("hello".utf8), .invalidJSON),
        ("truncated", Array(#"{"deviceId":"d","mutations":[{"idempotencyKey":"k""#.utf8), .invalidJSON),
        ("array instead of object", Array("[]".utf8), .invalidJSON),
        ("missing deviceId", Array(#"{"mutations":[]}"#.utf8), .invalidJSON),
        ("mutations is a string", Array(#"{"deviceId":"d","mutations":"x"}"#.utf8), .invalidJSON),
        (
            "wrong op",
            Array(
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"merge","clientTimestamp":"2026-11-21T09:00:00.000Z"}]}"#
                    .utf8), .invalidJSON
        ),
        (
            "timestamp without a zone",
            Array(
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","clientTimestamp":"2026-11-21T09:00:00.000"}]}"#
                    .utf8), .invalidJSON
        ),
        (
            "timestamp as a number",
            Array(
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","clientTimestamp":1763715600000}]}"#
                    .utf8), .invalidJSON
        ),
        (
            "fields is an array",
            Array(
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","fields":[1],"clientTimestamp":"2026-11-21T09:00:00.000Z"}]}"#
                    .utf8), .invalidJSON
        ),
        (
            "baseVersion is a string",
            Array(
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","baseVersion":"1","clientTimestamp":"2026-11-21T09:00:00.000Z"}]}"#
                    .utf8), .invalidJSON
        ),
        (
            "invalid UTF-8",
            Array(#"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","fields":{"a":""#.utf8) + [
                0xFF, 0xFE,
            ] + Array(#""},"clientTimestamp":"2026-11-21T09:00:00.000Z"}]}"#.utf8), .invalidJSON
        ),
        ("path traversal in deviceId", Array(#"{"deviceId":"../../etc","mutations":[]}"#.utf8), .invalidRequest),
    ]

    @Test("a malformed push body is 400 and writes nothing", arguments: 0..<13)
    func malformedBody(index: Int) async throws {
        let (name, body, code) = Self.badBodies[index]
        try await withServer(.sqlite) { client, storage in
            let token = try await Fixtures.token()
            let response = try await client.send(.post, "/v1/push", token: token, body: ByteBuffer(bytes: body))
            #expect(response.status == .badRequest, "\(name)")
            let error = response.wireError
            #expect(error?.code == code, "\(name)")
            #expect(error?.message.isEmpty == false)
            #expect(try await storage.pullAll().records.isEmpty)
        }
    }

    @Test("an error message says where, and never echoes a value")
    func errorMessageLocation() async throws {
        try await withServer(.sqlite) { client, _ in
            let body =
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","clientTimestamp":"SECRET-VALUE"}]}"#
            let response = try await client.send(
                .post, "/v1/push", token: try await Fixtures.token(), body: ByteBuffer(string: body))
            let message = try #require(response.wireError?.message)
            #expect(message.contains("mutations[0].clientTimestamp"))
            #expect(!message.contains("SECRET-VALUE"))
        }
    }

    @Test("a batch above the maximum is 413 and writes nothing")
    func batchTooLarge() async throws {
        try await withServer(.sqlite, configure: { $0.maxBatchSize = 10 }) { client, storage in
            let mutations = (0..<11).map { Fixtures.upsert("r\($0)", ["n": 1]) }
            let response = try await client.send(
                .post, "/v1/push", token: try await Fixtures.token(),
                body: try Fixtures.json(PushRequest(deviceId: "d", mutations: mutations)))
            #expect(response.status == .contentTooLarge)
            #expect(response.wireError?.code == .batchTooLarge)
            #expect(try await storage.pullAll().records.isEmpty)
        }
    }

    @Test("the default maximum batch is 500")
    func defaultBatch() {
        #expect(ServerConfiguration().maxBatchSize == 500)
    }

    @Test("a huge body is 413 and writes nothing")
    func hugeBody() async throws {
        try await withServer(.sqlite, configure: { $0.maxBodyBytes = 64 * 1024 }) { client, storage in
            let big = String(repeating: "x", count: 100 * 1024)
            let response = try await client.send(
                .post, "/v1/push", token: try await Fixtures.token(),
                body: try Fixtures.json(PushRequest(deviceId: "d", mutations: [Fixtures.upsert("r1", ["big": .string(big)])])))
            #expect(response.status == .contentTooLarge)
            #expect(response.wireError?.code == .payloadTooLarge)
            #expect(try await storage.pullAll().records.isEmpty)
        }
    }

    @Test(
        "a push of junk is refused by its shape before it is built: an unknown member, too many values, too many mutations",
        arguments: StorageKind.allCases)
    func junkPush(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let token = try await Fixtures.token()
            let mutation = String(decoding: try JSONEncoder().encode(Fixtures.upsert("r1", ["n": 1])), as: UTF8.self)
            // 8 MB: four million integers in a member no push has, beside a valid batch.
            let junk = "[" + String(repeating: "1,", count: 4_000_000) + "1]"
            let cases: [(String, String, HTTPResponse.Status, WireError.Code, String)] = [
                (
                    "unknown member, 8 MB", #"{"deviceId":"d","mutations":[\#(mutation)],"padding":\#(junk)}"#, .badRequest, .invalidJSON,
                    #"a push has the members deviceId and mutations only, not "padding""#
                ),
                (
                    "unknown member, small", #"{"deviceId":"d","mutations":[\#(mutation)],"extra":1}"#, .badRequest, .invalidJSON,
                    #"a push has the members deviceId and mutations only, not "extra""#
                ),
                (
                    "too many values", #"{"deviceId":"d","mutations":[\#(mutation.dropLast()),"junk":\#(junk)}]}"#, .contentTooLarge,
                    .payloadTooLarge, "a push holds at most 200000 JSON values; split the batch"
                ),
                (
                    "too many mutations", #"{"deviceId":"d","mutations":[\#(Array(repeating: mutation, count: 501).joined(separator: ","))]}"#,
                    .contentTooLarge, .batchTooLarge, "a push carries at most 500 mutations; split the batch"
                ),
            ]
            for (name, body, status, code, message) in cases {
                let response = try await client.send(.post, "/v1/push", token: token, body: ByteBuffer(string: body))
                #expect(response.status == status, "\(name)")
                #expect(response.wireError?.code == code, "\(name)")
                #expect(response.wireError?.message == message, "\(name): \(response.wireError?.message ?? "")")
            }
            #expect(try await storage.pullAll().records.isEmpty)
        }
    }

    @Test("over a real socket, requests the HTTP parser refuses are answered 400 with the error document, and the connection closed")
    func parserRefusals() async throws {
        try await withServer(.sqlite, setup: .live) { client, _ in
            let port = try #require(client.port)
            let token = try await Fixtures.token()
            let long = String(repeating: "a", count: 100 * 1024)
            let requests = [
                (
                    "a repeated Content-Length", "POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
                    "its Content-Length is invalid or repeated"
                ),
                (
                    "Content-Length beside Transfer-Encoding",
                    "POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
                    "it is not valid HTTP/1.1"
                ),
                (
                    "a 100 KB address", "GET /v1/pull?collection=\(long) HTTP/1.1\r\nHost: x\r\n\r\n",
                    "its address or headers are longer than the server reads"
                ),
                (
                    "a 100 KB token", "GET /v1/pull?collection=notes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\(long)\r\n\r\n",
                    "its address or headers are longer than the server reads"
                ),
            ]
            for (name, request, reason) in requests {
                // The server closes with bytes of the request it never read, so the kernel may send a reset that
                // overtakes the answer: a connection that ends with no answer at all is tried again, twice at most.
                var answer = ""
                for _ in 0..<3 where answer.isEmpty {
                    answer = try await Thread.blocking { () -> String in
                        let socket = try AdmissionGateTests.connect(port: port)
                        defer { close(socket) }
                        _ = request.withCString { send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                        return AdmissionGateTests.readToEnd(socket).0
                    }
                }
                #expect(answer.hasPrefix("HTTP/1.1 400"), "\(name): \(answer.prefix(200))")
                #expect(answer.lowercased().contains("content-type: application/json"), "\(name)")
                #expect(
                    answer.hasSuffix(#"{"error":{"code":"invalid_request","message":"the request could not be read: \#(reason)"}}"#),
                    "\(name): \(answer.suffix(200))")
            }
        }
    }

    static let badMutations: [(name: String, mutation: Mutation, code: WireError.Code)] = [
        ("unknown collection", Fixtures.upsert("r1", ["n": 1], collection: "nope"), .unknownCollection),
        ("path traversal in recordId", Fixtures.upsert("../../etc/passwd", ["n": 1], key: "k-trav"), .invalidRecordId),
        ("slash in recordId", Fixtures.upsert("a/b", ["n": 1], key: "k-slash"), .invalidRecordId),
        ("far past", Fixtures.upsert("r1", ["n": 1], at: -60 * 365 * 86400), .invalidTimestamp),
        ("far future", Fixtures.upsert("r1", ["n": 1], at: 30 * 86400), .invalidTimestamp),
        ("bad field name", Fixtures.upsert("r1", ["no spaces": 1]), .invalidFields),
        ("NUL in a value", Fixtures.upsert("r1", ["n": "a\u{0}b"]), .invalidFields),
        (
            "delete with fields",
            Mutation(
                idempotencyKey: "k-del", collection: "notes", recordId: "r1", op: .delete, fields: ["a": 1],
                clientTimestamp: Fixtures.now), .invalidFields
        ),
        ("negative base version", Fixtures.upsert("r1", ["n": 1], base: -1), .invalidBaseVersion),
        ("key with spaces", Fixtures.upsert("r1", ["n": 1], key: "has space"), .invalidIdempotencyKey),
        ("empty key", Fixtures.upsert("r1", ["n": 1], key: ""), .invalidIdempotencyKey),
        (
            "fields over 256 KiB", Fixtures.upsert("r1", ["big": .string(String(repeating: "x", count: 256 * 1024))]),
            .invalidFields
        ),
        (
            "257 fields", Fixtures.upsert("r1", Dictionary(uniqueKeysWithValues: (0..<257).map { ("f\($0)", JSONValue.integer(1)) })),
            .invalidFields
        ),
        (
            "a value nested 17 deep",
            Fixtures.upsert(
                "r1", ["deep": (0..<17).reduce(JSONValue.string("x")) { inner, _ in .array([inner]) }]), .invalidFields
        ),
    ]

    @Test(
        "a bad mutation is rejected with its code, writes nothing, and its neighbours apply",
        arguments: 0..<14)
    func badMutation(index: Int) async throws {
        let (name, bad, code) = Self.badMutations[index]
        try await withServer(.sqlite) { client, storage in
            let token = try await Fixtures.token()
            let good = Fixtures.upsert("good", ["n": 1], key: "good-key")
            let response = try await client.push([bad, good], token: token)
            #expect(response.results.map(\.status) == [.rejected, .applied], "\(name)")
            #expect(response.results[0].error?.code == code, "\(name)")
            #expect(try await storage.pullAll().records.map(\.recordId) == ["good"])
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "r1").isEmpty)
        }
    }

    @Test("guest rows break no roster rule, whatever client sends them")
    func guestRules() async throws {
        try await withServer(.sqlite) { client, storage in
            let organizer = try await Fixtures.token(role: .organizer)
            let results = try await client.push(
                [
                    Fixtures.upsert("g1", ["event_id": "ev", "name": ""], collection: "guests"),
                    Fixtures.upsert("g2", ["event_id": "ev", "name": "Ana", "email": "not-an-email"], collection: "guests"),
                    Fixtures.upsert("g3", ["event_id": "../ev", "name": "Ana"], collection: "guests"),
                    Fixtures.upsert("g4", ["event_id": "ev", "name": "Ana", "status": "asleep"], collection: "guests"),
                    Fixtures.upsert("g5", ["event_id": "ev", "name": "Ana", "email": "ana@example.org"], collection: "guests"),
                ], token: organizer)
            #expect(results.results.map(\.status) == [.rejected, .rejected, .rejected, .rejected, .applied])
            #expect(results.results.prefix(4).allSatisfy { $0.error?.code == .invalidFields })
            #expect(try await storage.pullAll(collection: "guests").records.map(\.recordId) == ["g5"])
        }
    }

    @Test("SQL and HTML in every field are stored as plain data", arguments: StorageKind.allCases)
    func injectionIsData(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let token = try await Fixtures.token()
            let nasty = "'; DROP TABLE records; -- <script>alert(1)</script> \" \\ %s"
            let mutation = Mutation(
                idempotencyKey: "k';DROP-TABLE-mutations;--", collection: "notes", recordId: "r1", op: .upsert,
                fields: ["title": .string(nasty), "_x": .object([nasty: .string(nasty)])],
                clientTimestamp: Fixtures.now)
            #expect(try await client.push([mutation], token: token).results[0].status == .applied)
            let record = try #require(try await storage.pullAll().records.first)
            #expect(record.fields["title"] == .string(nasty))
            #expect(record.fields["_x"] == .object([nasty: .string(nasty)]))
        }
    }

    @Test("bad query parameters are 400, unknown collections 404, unknown routes 404, all in the wire format")
    func badQueries() async throws {
        try await withServer(.sqlite) { client, _ in
            let token = try await Fixtures.token(role: .organizer)
            let cases: [(String, HTTPResponse.Status, WireError.Code)] = [
                ("/v1/pull", .badRequest, .invalidRequest),
                ("/v1/pull?collection=nope", .notFound, .unknownCollection),
                ("/v1/pull?collection=notes&cursor=garbage", .badRequest, .invalidCursor),
                ("/v1/pull?collection=notes&cursor=c1.-1.0", .badRequest, .invalidCursor),
                ("/v1/pull?collection=notes&limit=0", .badRequest, .invalidRequest),
                ("/v1/pull?collection=notes&limit=5001", .badRequest, .invalidRequest),
                ("/v1/pull?collection=notes&limit=ten", .badRequest, .invalidRequest),
                ("/v1/pull?collection=notes&pages=0", .badRequest, .invalidRequest),
                ("/v1/pull?collection=notes&pages=all", .badRequest, .invalidRequest),
                ("/v1/pull?collection=notes&pages=-1", .badRequest, .invalidRequest),
                ("/v1/pull?collection=notes&pages=++5", .badRequest, .invalidRequest),
                ("/v1/pull?collection=notes&pages=-99999999999999999999999", .badRequest, .invalidRequest),
                ("/v1/pull?collection=notes&scope=../x", .badRequest, .invalidRequest),
                ("/v1/snapshot?collection=notes", .badRequest, .invalidRequest),
                ("/v1/snapshot?collection=guests&continuation=forged.token", .badRequest, .invalidContinuation),
                ("/v1/snapshot?collection=guests&limit=5001", .badRequest, .invalidRequest),
                ("/v1/audit?collection=notes", .badRequest, .invalidRequest),
                ("/v1/audit?collection=notes&recordId=../x", .badRequest, .invalidRequest),
                ("/v1/conflicts?limit=100000", .badRequest, .invalidRequest),
                ("/v1/nothing-here", .notFound, .notFound),
                ("/nothing-here", .notFound, .notFound),
            ]
            for (uri, status, code) in cases {
                let response = try await client.send(.get, uri, token: token)
                #expect(response.status == status, "\(uri)")
                #expect(response.wireError?.code == code, "\(uri)")
            }
            // Any whole number from 1 is a page count, as the schema says, however large: it streams the most.
            for pages in ["1", "+3", "99999999999999999999999"] {
                #expect(try await client.send(.get, "/v1/pull?collection=notes&pages=\(pages)", token: token).status == .ok, "pages=\(pages)")
            }
        }
    }

    @Test("contention and an unreachable database are 503 with Retry-After, never 500")
    func contentionIsRetryable() {
        let logger = Logger(label: "test")
        for error: any Error in [
            StorageError(.concurrentClaim, "claimed"), DatabaseError(resultCode: .SQLITE_BUSY),
            DatabaseError(resultCode: .SQLITE_LOCKED), StorageError(.unavailable, "down"),
        ] {
            let answer = ErrorMiddleware<OutpostRequestContext>.answer(for: error, logger: logger)
            #expect(answer.status == .serviceUnavailable, "\(error)")
            #expect(answer.wire.error.code == .serviceUnavailable)
            #expect(answer.headers[.retryAfter] != nil, "\(error)")
        }
        let corrupt = ErrorMiddleware<OutpostRequestContext>.answer(for: StorageError(.corrupt, "x"), logger: logger)
        #expect(corrupt.status == .internalServerError)
        let constraint = ErrorMiddleware<OutpostRequestContext>.answer(
            for: DatabaseError(resultCode: .SQLITE_CONSTRAINT), logger: logger)
        #expect(constraint.status == .internalServerError)
    }

    @Test("a wrong method gets a JSON error, not a crash")
    func wrongMethod() async throws {
        try await withServer(.sqlite) { client, _ in
            let response = try await client.send(.get, "/v1/push", token: try await Fixtures.token())
            #expect(response.status == .methodNotAllowed)
            #expect(response.headers[.allow] == "POST")
            #expect(response.wireError?.code == .methodNotAllowed)
            let asset = try await client.send(.delete, "/admin/assets/monitor.css", token: nil)
            #expect(asset.status == .methodNotAllowed)
            #expect(try await client.send(.get, "/v1/nowhere", token: try await Fixtures.token()).status == .notFound)
            let empty = try await client.send(.get, "/v1/monitor?event=", token: try await Fixtures.token(role: .organizer))
            #expect(empty.status == .badRequest)
        }
    }
}
