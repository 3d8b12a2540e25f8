import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import OutpostApps
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer
@testable import OutpostURLSession

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// ``URLSessionSyncTransport`` against the real application on a real loopback socket, through FoundationNetworking.
@Suite("URLSession transport")
struct URLSessionTransportTests {
    /// Hands out one fresh token, once.
    struct OneRenewal: CredentialsProvider {
        let token: String
        func refreshedToken(after rejected: String) async throws -> String? { rejected == token ? nil : token }
    }

    @Test("push, pull, snapshot, health and heartbeats through URLSession", arguments: StorageKind.allCases)
    func roundTrip(kind: StorageKind) async throws {
        try await withServer(kind, setup: .live) { client, storage in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let staff = URLSessionSyncTransport(baseURL: base, token: try await Fixtures.token(role: .staff))
            let organizer = URLSessionSyncTransport(baseURL: base, token: try await Fixtures.token(role: .organizer))
            #expect(try await staff.health().status == "ok")
            let mutation = Fixtures.upsert("r1", ["title": "über + 🚀 & more"], at: 1)
            #expect(try await staff.push(PushRequest(deviceId: "dev-a", mutations: [mutation])).results.map(\.status) == [.applied])
            #expect(try await staff.push(PushRequest(deviceId: "dev-a", mutations: [mutation])).results.map(\.status) == [.duplicate])
            try await storage.settle()
            let pulled = try await staff.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            #expect(pulled.changes.first?.fields["title"] == "über + 🚀 & more")
            #expect(try await staff.pullPage(collection: "notes", scope: nil, cursor: nil, limit: 1).changes.count == 1)
            _ = try await organizer.push(
                PushRequest(
                    deviceId: "org",
                    mutations: [
                        Fixtures.upsert("g1", ["event_id": "ev.1:a@b", "name": "A"], collection: "guests", device: "org")
                    ]))
            try await storage.settle()
            let snapshot = try await staff.snapshot(collection: "guests", scope: "ev.1:a@b", continuation: nil, limit: 10)
            #expect(snapshot.records.map(\.recordId) == ["g1"])
            let heartbeat = Heartbeat(
                deviceId: "dev-a", event: nil, pendingCount: 0, failedCount: 0, lastRosterFetch: nil, appVersion: "test")
            _ = try await staff.heartbeat(heartbeat)
        }
    }

    @Test("a file goes up through URLSession a megabyte a request, and through AsyncHTTPClient in one, sent again whole after a renewed token")
    func uploads() async throws {
        try await withServer(.sqlite, setup: .live) { client, storage in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let token = try await Fixtures.token(role: .staff)
            let file = TestFile(count: 2_500_000, seed: 21)
            let session = URLSessionSyncTransport(baseURL: base, token: token)
            var answers: [FileUpload] = []
            while answers.last?.complete != true {
                let offset = answers.last?.received ?? 0
                let body = UploadBody(Data(file.bytes[Int(offset)...]), at: offset)
                answers.append(try await session.uploadRange(body, of: file.reference, collection: "builds"))
            }
            #expect(answers.map(\.received) == [1_048_576, 2_097_152, 2_500_000])

            let other = TestFile(count: 2_500_000, seed: 22)
            let http = HTTPSyncTransport(baseURL: base, token: "expired", credentials: OneRenewal(token: token))
            let whole = try await http.uploadRange(UploadBody(Data(other.bytes), at: 0), of: other.reference, collection: "builds")
            #expect(whole == FileUpload(sha256: other.reference.sha256, size: 2_500_000, type: "image/jpeg", received: 2_500_000, complete: true))
            #expect(try await storage.completeFiles(tenant: "acme", sha256s: [file.reference.sha256, other.reference.sha256]).count == 2)
        }
    }

    @Test("a file comes down through URLSession a megabyte a request, from the start or from a byte on; an empty one whole")
    func downloads() async throws {
        try await withServer(.sqlite, setup: .live) { client, _ in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let session = URLSessionSyncTransport(baseURL: base, token: try await Fixtures.token(role: .staff))
            let file = TestFile(count: 2_500_000, seed: 23)
            var state: FileUpload?
            while state?.complete != true {
                let offset = state?.received ?? 0
                state = try await session.uploadRange(
                    UploadBody(Data(file.bytes[Int(offset)...]), at: offset), of: file.reference, collection: "builds")
            }
            let pushed = try await session.push(PushRequest(deviceId: "phone-ana", mutations: [FileTests.build("b1", photo: file.reference)]))
            #expect(pushed.results.map(\.status) == [.applied])

            /// The pieces a download from `offset` gives, in order.
            func pieces(from offset: Int64) async throws -> [Data] {
                let received = NIOLockedValueBox<[Data]>([])
                try await session.download(
                    file.reference.sha256, collection: "builds", scope: nil, recordId: "b1", from: offset,
                    receive: { piece in received.withLockedValue { $0.append(piece) } })
                return received.withLockedValue { $0 }
            }
            let whole = try await pieces(from: 0)
            #expect(whole.map(\.count) == [1_048_576, 1_048_576, 402_848])
            #expect(Array(whole.joined()) == file.bytes)
            let rest = try await pieces(from: 2_000_000)
            #expect(rest.map(\.count) == [500_000])
            #expect(Array(rest.joined()) == Array(file.bytes[2_000_000...]))

            // An empty file is answered whole, whatever range is asked.
            let empty = TestFile(count: 0, seed: 24)
            #expect(
                try await session.uploadRange(UploadBody(Data(), at: 0), of: empty.reference, collection: "builds").complete)
            _ = try await session.push(PushRequest(deviceId: "phone-ana", mutations: [FileTests.build("b2", photo: empty.reference)]))
            let nothing = NIOLockedValueBox<[Data]>([])
            try await session.download(
                empty.reference.sha256, collection: "builds", scope: nil, recordId: "b2", from: 0,
                receive: { piece in nothing.withLockedValue { $0.append(piece) } })
            #expect(nothing.withLockedValue { $0.allSatisfy(\.isEmpty) })

            #expect(URLSessionSyncTransport.contentRange("bytes 0-1048575/2500000")! == (0, 1_048_575, 2_500_000))
            for wrong in ["bytes 5-4/10", "bytes 0-10/10", "bytes */10", "items 0-1/2", "bytes 0-1"] {
                #expect(URLSessionSyncTransport.contentRange(wrong) == nil, "\(wrong)")
            }
        }
    }

    @Test("a server that answers a range with the whole file is read from the offset; one that answers another range is refused")
    func downloadsFromOtherServers() async throws {
        let bytes = Data((0..<3_000).map { UInt8($0 % 251) })
        let router = Router()
        router.get("/v1/files/:sha256") { _, context -> Response in
            switch context.parameters.get("sha256") {
            case "whole":
                return Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(data: bytes)))
            default:
                return Response(
                    status: .partialContent, headers: [.contentRange: "bytes 5-9/3000"],
                    body: ResponseBody(byteBuffer: ByteBuffer(data: bytes[5..<10])))
            }
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let session = URLSessionSyncTransport(baseURL: base, token: "t")
            let received = NIOLockedValueBox<[Data]>([])
            try await session.download(
                "whole", collection: "builds", scope: nil, recordId: "b1", from: 1_000,
                receive: { piece in received.withLockedValue { $0.append(piece) } })
            #expect(received.withLockedValue { $0 } == [bytes[1_000...]])
            let astray = await #expect(throws: TransportError.self) {
                try await session.download("astray", collection: "builds", scope: nil, recordId: "b1", from: 0, receive: { _ in })
            }
            #expect(astray?.kind == .invalidResponse)
        }
    }

    @Test("the server's refusals: a bad token asks to sign in, a bad request keeps the server's code", arguments: StorageKind.allCases)
    func refusals(kind: StorageKind) async throws {
        try await withServer(kind, setup: .live) { client, _ in
            let port = try #require(client.port)
            let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
            let forged = URLSessionSyncTransport(baseURL: base, token: "not-a-token")
            let refused = await #expect(throws: TransportError.self) {
                try await forged.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            }
            #expect(refused?.requiresSignIn == true)
            #expect(refused?.message == TransportError.signInAgainMessage)

            let staff = URLSessionSyncTransport(baseURL: base, token: try await Fixtures.token(role: .staff))
            let bad = await #expect(throws: TransportError.self) {
                try await staff.pull(collection: "no such collection!", scope: nil, cursor: nil, limit: nil)
            }
            #expect(bad.flatMap(\.status).map { (400..<500).contains($0) } == true)
            #expect(bad?.wire != nil)
            #expect(bad?.isRetryable == false)

            // A refused token is renewed once through the credentials, and the request goes through.
            let renewed = URLSessionSyncTransport(
                baseURL: base, token: "expired", credentials: OneRenewal(token: try await Fixtures.token(role: .staff)))
            #expect(try await renewed.health().status == "ok")
            _ = try await renewed.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            #expect(renewed.bearer.current != "expired")
        }
    }

    /// The live server's URL, and a device store in a folder of its own (the caller removes it).
    static func deviceStore(port: Int?) throws -> (URL, LocalStore, URL) {
        let port = try #require(port)
        let base = try #require(URL(string: "http://127.0.0.1:\(port)"))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-urlsession-\(UUID())")
        let url = directory.appendingPathComponent("device.sqlite")
        return (base, try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps), directory)
    }

    @Test("a device syncs through it: what it saved offline reaches the server once, in order")
    func deviceSync() async throws {
        try await withServer(.sqlite, setup: .live) { client, storage in
            let (base, store, directory) = try Self.deviceStore(port: client.port)
            defer { try? FileManager.default.removeItem(at: directory) }
            let transport = URLSessionSyncTransport(baseURL: base, token: try await Fixtures.token(role: .staff))
            let engine = SyncEngine(
                store: store, transport: transport,
                configuration: SyncConfiguration(deviceId: "dev-u", retryDelays: [], deliversAfterSave: false),
                now: { Fixtures.serverNow.date })
            for id in ["a", "b", "c"] {
                _ = try await engine.save(LocalStore.Write(collection: "notes", recordId: id, fields: ["n": 1]))
            }
            #expect(await engine.probe(syncingPending: false))
            let summary = try await engine.sync()
            #expect(summary.synced == 3 && summary.isComplete, "\(summary)")
            try await storage.settle()
            let pulled = try await transport.pull(collection: "notes", scope: nil, cursor: nil, limit: nil)
            #expect(pulled.changes.map(\.recordId) == ["a", "b", "c"])
        }
    }

    @Test("through the store's credentials, a refused token waits for a sign-in, and a sign-in in the same process is taken at the next sync")
    func signInThroughTheStore() async throws {
        try await withServer(.sqlite, setup: .live) { client, _ in
            let (base, store, directory) = try Self.deviceStore(port: client.port)
            defer { try? FileManager.default.removeItem(at: directory) }
            let good = try await Fixtures.token(role: .staff)
            // The same claims under a signature the server refuses: an expired or revoked token.
            let refused = String(good.dropLast(4)) + (good.hasSuffix("AAAA") ? "BBBB" : "AAAA")
            try await Device.initialize(store: store, server: base, token: refused, deviceId: "dev-u")
            let transport = URLSessionSyncTransport(
                baseURL: base, token: refused, credentials: Device.storedCredentials(store: store))
            let device = try await Device.open(store: store, transport: transport) { configuration in
                configuration.retryDelays = []
                configuration.deliversAfterSave = false
            } now: {
                Fixtures.serverNow.date
            }
            _ = try await device.engine.save(LocalStore.Write(collection: "notes", recordId: "a", fields: ["n": 1]))
            #expect(await device.engine.probe(syncingPending: false))

            let stranded = try await device.engine.sync()
            #expect(stranded.requiresSignIn, "\(stranded)")
            #expect(try await Device.needsSignIn(store: store))
            #expect(await device.engine.status.needsSignIn)

            _ = try await Device.signIn(store: store, token: good)
            #expect(try await Device.needsSignIn(store: store) == false)
            let summary = try await device.engine.sync()
            #expect(summary.synced == 1 && summary.isComplete, "\(summary)")
            #expect(await device.engine.status.needsSignIn == false)
            #expect(await transport.bearer.current == good)
        }
    }

    @Test("no server: a retryable network error")
    func unreachable() async throws {
        // Port 9 (discard): nothing listens on it here.
        let transport = URLSessionSyncTransport(
            baseURL: URL(string: "http://127.0.0.1:9")!, token: "t", timeout: .seconds(5))
        let error = await #expect(throws: TransportError.self) { try await transport.health() }
        #expect(error?.kind == .network)
        #expect(error?.isRetryable == true)
        #expect(error?.underlying is URLError)
    }
}
