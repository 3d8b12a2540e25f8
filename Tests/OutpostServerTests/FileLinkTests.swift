import Crypto
import Foundation
import HummingbirdTesting
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

/// Links to files in connectors' batches: the crew's sheet opens the photo without a token, until the link
/// expires or the record stops naming the photo.
@Suite("File links end to end")
struct FileLinkTests {
    static let base = URL(string: "https://sync.example.org")!

    @Test(
        "a connector's batch and an export link each file a build names; the link opens it without a token, and not once it expires, is changed, or the build names another photo",
        arguments: StorageKind.allCases)
    func connectorLinks(kind: StorageKind) async throws {
        let receiver = try await ConnectorReceiver()
        defer { Task { await receiver.stop() } }
        let now = ManualNow(Fixtures.serverNow.date)
        try await withServer(kind, configure: { $0.publicURL = Self.base }, now: { now.date }) { client, storage in
            try await Self.connectorLinks(client, storage, kind: kind, now: now, receiver: receiver)
        }
    }

    static func connectorLinks<S: SyncStorage>(
        _ client: any TestClientProtocol, _ storage: S, kind: StorageKind, now: ManualNow, receiver: ConnectorReceiver
    ) async throws {
        do {
            let ana = try await Fixtures.token(user: "ana")
            // Given a build with a photo on the server,
            let photo = TestFile(count: 300_000, seed: kind == .sqlite ? 3 : 4)
            #expect(try await client.putRange(photo.bytes, of: photo.reference, at: 0, token: ana).status == .ok)
            let build = Fixtures.upsert("b1", ["name": "Shed", "photo": photo.reference.json], at: 0, collection: "builds")
            #expect(try await client.push([build], token: ana).results.map(\.status) == [.applied])
            // when a connector of builds delivers it, with links signed by the server's key,
            let secrets = ServerSecrets(configuration: ServerConfiguration(port: 0, jwtSecret: Fixtures.secret))
            try await secrets.load(secret: Fixtures.secret)
            var delivery = ConnectorTests.delivery(storage, now: now)
            let key = try secrets.fileLinkKey()
            delivery.links = { FileLinks(base: Self.base, key: key, lifetime: .seconds(3600)) }
            try await storage.addConnector(ConnectorTests.connector(collection: "builds", url: receiver.url))
            #expect(try await storage.leaseConnector(tenant: "acme", id: "con_1", owner: delivery.owner, now: 0, until: .max))
            try await ConnectorTests.deliverNext(delivery, storage)
            let change = try #require(try receiver.batches(secret: ConnectorTests.secret).first?.changes.first)
            let link = try #require(change.files?["photo"])
            #expect(link.name == "photo.jpg" && link.type == "image/jpeg" && link.size == 300_000)
            #expect(link.expiresAt == Timestamp(now.date.addingTimeInterval(3600)))
            #expect(change.files?.count == 1)
            // then the link opens the photo, with no token,
            let path = try #require(link.url.split(separator: "sync.example.org", maxSplits: 1).last.map(String.init))
            let opened = try await client.send(.get, path, token: nil)
            #expect(opened.status == .ok)
            #expect(Array(buffer: opened.body) == photo.bytes)
            #expect(opened.headers[.contentType] == "image/jpeg")
            // An organizer's export links the photo too.
            let olga = try await Fixtures.token(user: "olga", role: .organizer)
            let csv = String(buffer: try await client.send(.get, "/v1/export?collection=builds", token: olga).body)
            let exported = try #require(
                csv.split(separator: ",").first { $0.hasPrefix("https://sync.example.org/files/\(photo.reference.sha256)?") })
            let exportedPath = try #require(exported.split(separator: "sync.example.org", maxSplits: 1).last.map(String.init))
            #expect(Array(buffer: try await client.send(.get, exportedPath, token: nil).body) == photo.bytes)
            // and not once changed, nor once expired;
            #expect(try await client.send(.get, path.replacingOccurrences(of: "recordId=b1", with: "recordId=b2"), token: nil).status == .notFound)
            now.advance(seconds: 3600)
            #expect(try await client.send(.get, path, token: nil).status == .notFound)
            now.advance(seconds: -3600)
            // nor once the build names another photo.
            let other = TestFile(count: 1000, seed: 9)
            #expect(try await client.putRange(other.bytes, of: other.reference, at: 0, token: ana).status == .ok)
            let replaced = Fixtures.upsert("b1", ["photo": other.reference.json], at: 10, collection: "builds")
            #expect(try await client.push([replaced], token: ana).results.map(\.status) == [.applied])
            #expect(try await client.send(.get, path, token: nil).status == .notFound)
        }
    }

    @Test("a server with no public address carries no links, and answers none")
    func noPublicAddress() async throws {
        try await withServer(.sqlite) { client, _ in
            let path = "/files/\(String(repeating: "ab", count: 32))?tenant=acme&collection=builds&recordId=b1&expires=9999999999&signature=00"
            let answer = try await client.send(.get, path, token: nil)
            #expect(answer.status == .notFound)
            #expect(answer.wireError?.code == .notFound)
        }
    }
}
