import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOConcurrencyHelpers
import NIOFoundationCompat
import OutpostClient
import OutpostProtocol
import Testing

@testable import OutpostServer

@Suite("Wire protocol over the real application")
struct ProtocolTests {
    @Test(
        "snapshot pages end by size over HTTP, and following their continuations gives every record once",
        arguments: [1000, 0])
    func snapshotPagesBySize(pageMaxBytes: Int) async throws {
        let filler = String(repeating: "x", count: 280)
        let guests = (0..<10).map {
            Fixtures.upsert(
                String(format: "g%02d", $0), ["event_id": "ev", "note": .string(filler)],
                at: Double($0), collection: "guests")
        }
        try await withServer(.sqlite, configure: { $0.pageMaxBytes = pageMaxBytes }) { client, _ in
            _ = try await client.push(guests, token: try await Fixtures.token(role: .organizer))
            let staff = try await Fixtures.token()
            var ids: [String] = []
            var continuation: String?
            var cursor: String?
            var pages = 0
            repeat {
                let query = "collection=guests&scope=ev&limit=100" + (continuation.map { "&continuation=\($0)" } ?? "")
                let response = try await client.send(.get, "/v1/snapshot?\(query)", token: staff)
                #expect(response.status == .ok)
                let page = try JSONDecoder().decode(SnapshotResponse.self, from: response.body)
                ids += page.records.map(\.recordId)
                #expect(page.records.count <= (pageMaxBytes > 0 ? 4 : 1))
                continuation = page.continuation
                cursor = page.cursor
                pages += 1
            } while continuation != nil && pages < 20
            #expect(ids == guests.map(\.recordId))
            #expect(cursor != nil)
            #expect(pages == (pageMaxBytes > 0 ? 3 : 11))
        }
    }

    @Test("snapshot pages are stable across a server restart and end with the pull cursor")
    func snapshotAcrossRestart() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-test-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let configuration = ServerConfiguration(port: 0, jwtSecret: Fixtures.secret)
        let organizer = try await Fixtures.token(role: .organizer)
        let staff = try await Fixtures.token(role: .staff)
        let guests = (0..<25).map {
            Fixtures.upsert(
                String(format: "g%03d", $0), ["event_id": "ev-1", "name": .string("Guest \($0)")],
                at: Double($0), collection: "guests")
        }
        func app() throws -> some ApplicationProtocol {
            try buildApplication(
                configuration: configuration, storage: try SQLiteStorage(directory: directory),
                now: { Fixtures.serverNow.date }, logger: Fixtures.quietLogger)
        }
        // First server: load the roster and take the first page.
        let firstPage = try await app().test(.router) { client in
            _ = try await client.push(guests, token: organizer)
            let response = try await client.send(.get, "/v1/snapshot?collection=guests&scope=ev-1&limit=10", token: staff)
            return try JSONDecoder().decode(SnapshotResponse.self, from: response.body)
        }
        #expect(firstPage.records.count == 10)
        #expect(firstPage.total == 25)
        #expect(firstPage.cursor == nil)
        let continuation = try #require(firstPage.continuation)
        // A restarted server continues from the token.
        let rest = try await app().test(.router) { client in
            var records: [Change] = []
            var token: String? = continuation
            var cursor: String?
            while let next = token {
                let response = try await client.send(
                    .get, "/v1/snapshot?collection=guests&scope=ev-1&limit=10&continuation=\(next)", token: staff)
                #expect(response.status == .ok)
                let page = try JSONDecoder().decode(SnapshotResponse.self, from: response.body)
                #expect(page.total == 25)
                records += page.records
                token = page.continuation
                cursor = page.cursor
            }
            // The last page's cursor continues into pull: a change made now arrives there.
            _ = try await client.push(
                [Fixtures.upsert("g001", ["name": "Renamed"], at: 100, collection: "guests", scope: "ev-1")], token: organizer)
            let pulled = try await client.pull("collection=guests&scope=ev-1&cursor=\(try #require(cursor))", token: staff)
            #expect(pulled.changes.map(\.recordId) == ["g001"])
            return records
        }
        let ids = (firstPage.records + rest).map(\.recordId)
        #expect(ids == (0..<25).map { String(format: "g%03d", $0) })
    }

    @Test("a tampered continuation token is refused")
    func tamperedContinuation() async throws {
        try await withServer(.sqlite) { client, _ in
            let organizer = try await Fixtures.token(role: .organizer)
            _ = try await client.push(
                (0..<3).map { Fixtures.upsert("g\($0)", ["event_id": "ev"], at: Double($0), collection: "guests") },
                token: organizer)
            let response = try await client.send(.get, "/v1/snapshot?collection=guests&limit=1", token: organizer)
            let token = try #require(try JSONDecoder().decode(SnapshotResponse.self, from: response.body).continuation)
            var bytes = Array(token.utf8)
            bytes[3] = bytes[3] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            let tampered = String(decoding: bytes, as: UTF8.self)
            let refused = try await client.send(
                .get, "/v1/snapshot?collection=guests&limit=1&continuation=\(tampered)", token: organizer)
            #expect(refused.status == .badRequest)
            #expect(refused.wireError?.code == .invalidContinuation)
            // And one for another scope is refused too.
            let otherScope = try await client.send(
                .get, "/v1/snapshot?collection=guests&scope=ev&limit=1&continuation=\(token)", token: organizer)
            #expect(otherScope.wireError?.code == .invalidContinuation)
        }
    }

    @Test("the audit over HTTP lists client times in order, never the replay time", arguments: StorageKind.allCases)
    func auditOverHTTP(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let staff = try await Fixtures.token(role: .staff)
            let organizer = try await Fixtures.token(role: .organizer)
            _ = try await client.push([Fixtures.upsert("r1", ["s": "late"], at: 50, device: "dev-b")], token: staff, device: "dev-b")
            _ = try await client.push([Fixtures.upsert("r1", ["s": "early"], at: 5)], token: staff)
            let response = try await client.send(.get, "/v1/audit?collection=notes&recordId=r1", token: organizer)
            let entries = try JSONDecoder().decode(AuditResponse.self, from: response.body).entries
            #expect(entries.map(\.clientTimestamp) == [Fixtures.time(5), Fixtures.time(50)])
            #expect(entries.map(\.deviceId) == ["dev-a", "dev-b"])
            #expect(entries.allSatisfy { $0.receivedAt == Fixtures.serverNow && $0.userName == "Ana Staff" })
            try await storage.settle()
            let pulled = try await client.pull("collection=notes", token: staff)
            #expect(pulled.changes.first?.createdAt == Fixtures.time(5))
            #expect(pulled.changes.first?.updatedAt == Fixtures.time(50))
            #expect(pulled.changes.first?.fields["s"] == "late")
        }
    }

    @Test(
        "a pull page writes stored fields as they are: the same bytes as the canonical writer, a tombstone's fields empty",
        arguments: StorageKind.allCases)
    func pullPageBytes(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let staff = try await Fixtures.token(role: .staff)
            let fields: [String: JSONValue] = [
                "b": 1, "a": "é/\"quoted\"", "c": .object(["nested": .array([1.5, true, nil])]),
            ]
            _ = try await client.push(
                [
                    Fixtures.upsert("r1", fields, at: 1),
                    Fixtures.upsert("r2", ["s": "gone"], at: 2),
                    Fixtures.delete("r2", at: 3),
                ], token: staff)
            try await storage.settle()
            let response = try await client.send(.get, "/v1/pull?collection=notes", token: staff)
            #expect(response.status == .ok)
            let body = Array(response.body.readableBytesView)
            let page = try PullResponse(jsonBytes: body)
            #expect(try page.jsonBytes() == body)
            #expect(page.changes.map(\.recordId) == ["r1", "r2"])
            #expect(page.changes[0].fields == fields)
            #expect(page.changes[1].tombstone && page.changes[1].fields.isEmpty)
            #expect(String(decoding: body, as: UTF8.self).contains(#""fields":{}"#))
        }
    }

    @Test("a pull asking for more pages than the server streams gets the server's limit, the last page saying more follow")
    func pagesTrimmedToLimit() async throws {
        try await withServer(.sqlite, configure: { $0.pullMaxPages = 2 }) { client, storage in
            let staff = try await Fixtures.token(role: .staff)
            _ = try await client.push((1...3).map { Fixtures.upsert("r\($0)", ["n": .number(Double($0))], at: Double($0)) }, token: staff)
            try await storage.settle()
            let response = try await client.send(.get, "/v1/pull?collection=notes&limit=1&pages=50", token: staff)
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "application/x-ndjson")
            let lines = String(buffer: response.body).split(separator: "\n")
            #expect(lines.count == 2)
            let last = try PullResponse(jsonBytes: Array(lines.last.map(String.init)?.utf8 ?? "".utf8))
            #expect(last.changes.map(\.recordId) == ["r2"])
            #expect(last.hasMore)
        }
    }

    @Test("a protected conflict over HTTP carries the server's value and is listed for review")
    func conflictOverHTTP() async throws {
        try await withServer(.sqlite) { client, _ in
            let staff = try await Fixtures.token(role: .staff)
            let organizer = try await Fixtures.token(role: .organizer)
            let activity: [String: JSONValue] = ["type": "visit", "date": "2026-11-20", "duration_minutes": 60, "travel_expense": "40.00"]
            _ = try await client.push([Fixtures.upsert("a1", activity, collection: "activities")], token: staff)
            _ = try await client.push(
                [Fixtures.upsert("a1", ["travel_expense": "55.00"], at: 10, collection: "activities", device: "dev-b", base: 1)],
                token: staff, device: "dev-b")
            let result = try await client.push(
                [Fixtures.upsert("a1", ["travel_expense": "70.00", "notes": "taxi"], at: 20, collection: "activities", base: 1)],
                token: staff
            ).results[0]
            #expect(result.status == .conflict)
            #expect(result.conflict?.serverFields == ["travel_expense": "55.00"])
            let listed = try await client.send(.get, "/v1/conflicts?collection=activities", token: organizer)
            let conflicts = try JSONDecoder().decode(ConflictsResponse.self, from: listed.body).conflicts
            #expect(conflicts.map(\.conflictId) == [result.conflict?.conflictId])
        }
    }

    @Test("openapi.yaml and the router list the same routes")
    func openAPIMatchesRoutes() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-test-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let router = buildRouter(configuration: ServerConfiguration(), storage: try SQLiteStorage(directory: directory))
        let routes = Set(router.routes.map { "\($0.method.rawValue) \($0.path.description.hasPrefix("/") ? "" : "/")\($0.path)" })
        let document = String(decoding: try OpenAPIDocument.data(), as: UTF8.self)
        var documented = Set<String>()
        var inPaths = false
        var currentPath: String?
        for line in document.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            if inPaths, let first = line.first, first != " " { break }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                currentPath = String(line.dropFirst(2).dropLast())
            } else if line.hasPrefix("    "), !line.hasPrefix("     "), let path = currentPath {
                let method = line.trimmingCharacters(in: .whitespaces).dropLast()
                if ["get", "post", "put", "patch", "delete"].contains(String(method)) {
                    documented.insert("\(method.uppercased()) \(path)")
                }
            }
        }
        #expect(!documented.isEmpty)
        #expect(documented == routes)
    }

    @Test("the repository's openapi.yaml is the one the server serves")
    func servedDocumentIsTheRepositoryOne() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("openapi.yaml")
        #expect(try Data(contentsOf: repository) == (try OpenAPIDocument.data()))
    }
}

/// The body of a streamed pull, written to memory.
@Suite("Streamed pull bodies")
struct StreamedPullBodyTests {
    final class Collected: @unchecked Sendable {
        var bytes: [UInt8] = []
        var finished = false
    }

    struct Collector: ResponseBodyWriter {
        let collected: Collected
        mutating func write(_ buffer: ByteBuffer) async throws { collected.bytes += buffer.readableBytesView }
        consuming func finish(_ trailingHeaders: HTTPFields?) async throws { collected.finished = true }
    }

    static func page(_ seq: Int64, hasMore: Bool) -> PulledChanges {
        PulledChanges(changes: [], cursor: PullCursor(xid: 0, seq: seq), hasMore: hasMore)
    }

    static func lines(_ response: Response) async throws -> [String] {
        let collected = Collected()
        try await response.body.write(Collector(collected: collected))
        #expect(collected.finished)
        #expect(collected.bytes.last == UInt8(ascii: "\n"))
        return String(decoding: collected.bytes, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    @Test("a storage failure after the first page ends the stream with an error line; the pages before it stand")
    func failureAfterFirstPage() async throws {
        let calls = NIOLockedValueBox(0)
        let response = try SyncController<SQLiteStorage>.stream(
            from: Self.page(1, hasMore: true), pages: 5, gate: AdmissionGate(limit: 1, maxWaiting: 0), caller: "",
            metrics: ServerMetrics(), logger: Fixtures.quietLogger, token: \.token
        ) { cursor in
            let call = calls.withLockedValue {
                $0 += 1; return $0
            }
            guard call == 1 else { throw StorageError(.unavailable, "connection refused") }
            return Self.page(cursor.seq + 1, hasMore: true)
        }
        #expect(response.headers[.contentType] == "application/x-ndjson")
        let lines = try await Self.lines(response)
        #expect(lines.count == 3)
        #expect(try PullResponse(jsonBytes: Array(lines[0].utf8)).cursor == "c1.0.1")
        #expect(try PullResponse(jsonBytes: Array(lines[1].utf8)).cursor == "c1.0.2")
        let error = try JSONDecoder().decode(WireError.self, from: Data(lines[2].utf8))
        #expect(error.code == .serviceUnavailable)
        #expect(!lines[2].contains("connection refused"))
        #expect(calls.withLockedValue { $0 } == 2)
    }

    @Test("a stream ends at `pages` pages, or at the page without more, whichever comes first")
    func endsAtPagesOrLastChange() async throws {
        for (pages, last, expected) in [(3, 10, 3), (10, 4, 4), (1, 10, 1)] {
            let response = try SyncController<SQLiteStorage>.stream(
                from: Self.page(1, hasMore: true), pages: pages, gate: AdmissionGate(limit: 1, maxWaiting: 0), caller: "",
                metrics: ServerMetrics(), logger: Fixtures.quietLogger, token: \.token
            ) { cursor in Self.page(cursor.seq + 1, hasMore: cursor.seq + 1 < last) }
            let lines = try await Self.lines(response)
            #expect(lines.count == expected, "pages \(pages), last \(last)")
        }
    }
}
