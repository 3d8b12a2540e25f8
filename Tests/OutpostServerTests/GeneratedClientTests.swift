import Crypto
import Foundation
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime
import OutpostOpenAPIClient
import OutpostProtocol
import Testing

@testable import OutpostServer

/// Clients that other teams generate from openapi.yaml, used without a hand edit against a real `outpost serve`
/// on both engines, and the document itself through a validator.
@Suite("Generated clients")
struct GeneratedClientTests {
    static let secret = "a-generated-client-secret-of-32-bytes-or-more"
    static let declared = "inspections"

    static var repository: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }
    static var document: URL { repository.appendingPathComponent("Sources/OutpostServer/Resources/openapi.yaml") }

    @Test(
        "a Python client from openapi-python-client pushes, pulls, downloads, beats and reads the monitor as generated",
        .requires(.python, .openapiPythonClient), .timeLimit(.minutes(3)), arguments: StorageKind.allCases)
    func python(kind: StorageKind) async throws {
        try await Self.withServer(kind) { server in
            let run = try await Tool.run(
                "python3",
                [
                    Self.repository.appendingPathComponent("Tests/Clients/python_client.py").path, "--openapi", Self.document.path,
                    "--output", server.root.appendingPathComponent("python").path, "--server", server.url,
                    "--staff", server.staff, "--organizer", server.organizer, "--declared", Self.declared,
                ])
            #expect(run.status == 0 && run.output.contains("all checks passed"), "\(run.output)")
        }
    }

    @Test(
        "a Swift client from swift-openapi-generator pushes, pulls, downloads, beats and reads the monitor as generated",
        .timeLimit(.minutes(3)), arguments: StorageKind.allCases)
    func swift(kind: StorageKind) async throws {
        try await Self.withServer(kind) { server in
            // The generator's default sends whole seconds; the server answers with milliseconds, which a client reads
            // with the runtime's fractional-seconds transcoder (the protocol reference says so).
            let plain = Self.client(server, token: server.staff, dates: .iso8601)
            let client = Self.client(server, token: server.staff, dates: .iso8601WithFractionalSeconds)
            let organizer = Self.client(server, token: server.organizer, dates: .iso8601WithFractionalSeconds)
            let device = "swift-\(UUID().uuidString.prefix(8))"
            // A whole second, which the two transcoders write as `…:05Z` and `…:05.000Z`: one instant, two spellings.
            let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))

            // Push: applied, the same mutation with its time spelled otherwise a duplicate, a bad record id rejected.
            let note = try Self.mutation("\(device):n1:1", "n1", ["text": "gate B open"], at: now)
            #expect(try await Self.push(plain, device, [note]) == [.init(.applied)])
            #expect(try await Self.push(client, device, [note]) == [.init(.duplicate)])
            let bad = try Self.mutation("\(device):bad:1", "not an id", ["text": "x"], at: now)
            #expect(try await Self.push(plain, device, [bad]) == [.init(.rejected, "invalid_record_id")])

            // Pull from the start, then from its cursor: nothing new, then only the next write.
            let page = try await Self.pull(client, "notes", until: ["n1"])
            let n1 = try #require(page.changes.first { $0.recordId == "n1" })
            #expect(n1.fields.additionalProperties.value["text"] as? String == "gate B open")
            #expect(abs(n1.createdAt.timeIntervalSince(now)) < 60)
            #expect(try await client.pull(query: .init(collection: "notes", cursor: page.cursor)).ok.body.json.changes.isEmpty)
            _ = try await Self.push(plain, device, [try Self.mutation("\(device):n2:1", "n2", ["text": "next"], at: now)])
            let next = try await Self.pull(client, "notes", after: page.cursor, until: ["n2"])
            #expect(next.changes.map(\.recordId) == ["n2"])

            // A collection the operator declared is named like any other.
            let declared = try Self.mutation("\(device):d1:1", "d1", ["site": "north"], at: now, collection: Self.declared)
            #expect(try await Self.push(plain, device, [declared]) == [.init(.applied)])
            #expect(try await Self.pull(client, Self.declared, until: ["d1"]).changes.map(\.recordId) == ["d1"])

            // Snapshot: five guests in pages of two, joined by continuations.
            let guests = try (0..<5).map { i in
                try Self.mutation(
                    "import:gala:g\(i)", "g\(i)", ["event_id": "gala", "name": "Guest \(i)", "status": "registered"], at: now,
                    collection: "guests", scope: "gala")
            }
            #expect(try await Self.push(organizer, "admin", guests) == Array(repeating: .init(.applied), count: 5))
            var seen: [String] = []
            var continuation: String?
            var pages = 0
            var last: Components.Schemas.SnapshotResponse
            repeat {
                last = try await client.snapshot(
                    query: .init(collection: "guests", scope: "gala", limit: 2, continuation: continuation)
                ).ok.body.json
                pages += 1
                seen += last.records.map(\.recordId)
                continuation = last.continuation
            } while continuation != nil && pages < 10
            #expect(seen == (0..<5).map { "g\($0)" } && pages == 3)
            #expect(last.cursor != nil)

            // A file: uploaded in one range, named by a note, downloaded through it.
            let photo = Array("the photo of gate B".utf8)
            let digest = SHA256.hash(data: photo).hexString
            let upload = try await client.uploadRange(
                path: .init(sha256: digest),
                query: .init(collection: "notes", size: Int64(photo.count), _type: "image/jpeg", offset: 0),
                body: .binary(HTTPBody(photo))
            ).ok.body.json
            #expect(upload.complete && upload.received == Int64(photo.count))
            let reference: [String: (any Sendable)?] = ["sha256": digest, "size": photo.count, "type": "image/jpeg"]
            let file: [String: (any Sendable)?] = ["$file": reference]
            let named = Components.Schemas.Mutation(
                idempotencyKey: "\(device):f1:1", collection: "notes", recordId: "f1", op: .upsert,
                fields: .init(additionalProperties: try OpenAPIObjectContainer(unvalidatedValue: ["photo": file])), clientTimestamp: now)
            #expect(try await Self.push(plain, device, [named]) == [.init(.applied)])
            let download = try await client.downloadFile(
                path: .init(sha256: digest), query: .init(collection: "notes", recordId: "f1")
            ).ok
            #expect(try await [UInt8](collecting: download.body.any, upTo: 1024) == photo)
            #expect(download.headers.eTag == "\"\(digest)\"" && download.headers.cacheControl == .private_comma_NoStore)

            // Heartbeat with the event, then the organizer sees the device on the event's monitor.
            let beat = Components.Schemas.Heartbeat(
                deviceId: device, event: "gala", pendingCount: 0, failedCount: 0, lastRosterFetch: now, appVersion: "swift/1")
            #expect(try await plain.heartbeat(body: .json(beat)).ok.body.json.fingerprint.isEmpty == false)
            let board = try await organizer.monitor(query: .init(event: "gala")).ok.body.json
            #expect(board.devices.contains { $0.appVersion == "swift/1" && $0.lastRosterFetch != nil })
        }
    }

    @Test("openapi.yaml is a valid OpenAPI 3.1 document", .requires(.openapiSpecValidator))
    func validates() async throws {
        let run = try await Tool.run("openapi-spec-validator", ["--validation-errors", "all", Self.document.path])
        #expect(run.status == 0 && run.output.contains("OK"), "\(run.output)")
    }

    /// A push's outcome per mutation: its status, and the code of a rejection.
    struct Outcome: Equatable {
        var status: Components.Schemas.MutationResult.StatusPayload
        var code: String?
        init(_ status: Components.Schemas.MutationResult.StatusPayload, _ code: String? = nil) {
            self.status = status
            self.code = code
        }
    }

    static func client(_ server: Server, token: String, dates: any DateTranscoder) -> Client {
        Client(
            serverURL: URL(string: server.url)!, configuration: Configuration(dateTranscoder: dates),
            transport: AsyncHTTPClientTransport(), middlewares: [BearerToken(token: token)])
    }

    static func mutation(
        _ key: String, _ record: String, _ fields: [String: String], at time: Date, collection: String = "notes",
        scope: String? = nil
    ) throws -> Components.Schemas.Mutation {
        Components.Schemas.Mutation(
            idempotencyKey: key, collection: collection, recordId: record, scope: scope, op: .upsert,
            fields: .init(additionalProperties: try OpenAPIObjectContainer(unvalidatedValue: fields)), clientTimestamp: time)
    }

    /// Pulls `collection` from `cursor` until the answer holds `records`, as a client polls: on PostgreSQL a change
    /// shows once every transaction that began before it has ended, in the whole cluster (the gap-free rule).
    static func pull(
        _ client: Client, _ collection: String, after cursor: String? = nil, until records: Set<String>
    ) async throws -> Components.Schemas.PullResponse {
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while true {
            let page = try await client.pull(query: .init(collection: collection, cursor: cursor)).ok.body.json
            if records.isSubset(of: Set(page.changes.map(\.recordId))) || ContinuousClock.now > deadline { return page }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    static func push(_ client: Client, _ device: String, _ mutations: [Components.Schemas.Mutation]) async throws -> [Outcome] {
        let answer = try await client.push(body: .json(.init(deviceId: device, mutations: mutations))).ok.body.json
        return answer.results.map { Outcome($0.status, $0.error?.code) }
    }

    /// A running `outpost serve` with a declared collection, and tokens for it.
    struct Server: Sendable {
        var root: URL
        var url: String
        var staff: String
        var organizer: String
    }

    static func withServer(_ kind: StorageKind, _ body: (Server) async throws -> Void) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-generated-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let collections = root.appendingPathComponent("collections.yaml")
        try "collections:\n  - name: \(declared)\n    read: tenant\n".write(to: collections, atomically: true, encoding: .utf8)
        let database = kind == .postgres ? try await TestPostgres.shared.makeDatabase() : nil
        let storage = database.map { ["--database-url", $0] } ?? ["--data-dir", root.appendingPathComponent("server").path]
        let process = try await OutpostProcess.start(
            ["serve", "--port", "0", "--collections", collections.path] + storage, environment: ["OUTPOST_JWT_SECRET": secret])
        let port = try await process.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        let authority = try await TokenAuthority(secret: Array(secret.utf8))
        func token(_ user: String, _ role: Role) async throws -> String {
            try await authority.token(
                for: Identity(tenant: "acme", userId: user, role: role, name: user.capitalized), lifetime: .seconds(3600), now: Date())
        }
        let server = Server(
            root: root, url: "http://127.0.0.1:\(port)", staff: try await token("ana", .staff),
            organizer: try await token("olga", .organizer))
        do {
            try await body(server)
        } catch {
            _ = await process.stop()
            if let database { await TestPostgres.shared.dropDatabase(url: database) }
            throw error
        }
        #expect(await process.stop() == 0, "\(process.stderr)")
        if let database { await TestPostgres.shared.dropDatabase(url: database) }
    }
}
