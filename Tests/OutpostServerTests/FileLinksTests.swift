import Crypto
import Foundation
import OutpostProtocol
import Testing

@testable import OutpostServer

/// Signed links to files, for systems outside Outpost: they name the record and the file, and end.
@Suite("File links")
struct FileLinksTests {
    static let links = FileLinks(
        base: URL(string: "https://sync.example.org/outpost/")!, key: SymmetricKey(data: Array("a-test-key-of-32-bytes-or-more-!".utf8)),
        lifetime: .seconds(3600))
    static let target = FileLinks.Target(tenant: "acme", collection: "builds", scope: "", recordId: "b1", sha256: String(repeating: "ab", count: 32))
    static let file = FileReference(sha256: String(repeating: "ab", count: 32), size: 5, type: "image/jpeg", name: "shed.jpg")

    /// The query of `link` by name.
    static func query(_ link: FileLink) throws -> [String: String] {
        let items = try #require(URLComponents(string: link.url)?.queryItems)
        return Dictionary(uniqueKeysWithValues: items.map { ($0.name, $0.value ?? "") })
    }

    @Test("a link names the record and the file under the server's address, works until it expires, and not after")
    func linkWorksUntilItExpires() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let link = Self.links.link(to: Self.file, of: Self.target, now: now)
        #expect(
            link.url.hasPrefix(
                "https://sync.example.org/outpost/files/\(Self.target.sha256)?tenant=acme&collection=builds&recordId=b1&expires=1800003600&signature="
            ))
        #expect(link.expiresAt == Timestamp(millisecondsSince1970: 1_800_003_600_000))
        #expect(link.name == "shed.jpg" && link.type == "image/jpeg" && link.size == 5)
        let query = try Self.query(link)
        let signature = try #require(query["signature"])
        #expect(Self.links.verifies(Self.target, expires: 1_800_003_600, signature: signature, now: now.addingTimeInterval(3599)))
        #expect(!Self.links.verifies(Self.target, expires: 1_800_003_600, signature: signature, now: now.addingTimeInterval(3600)))
    }

    @Test("a link changed in any part, or signed with another key, does not verify")
    func tamperedLinksFail() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let signature = try #require(try Self.query(Self.links.link(to: Self.file, of: Self.target, now: now))["signature"])
        var others: [FileLinks.Target] = []
        for change in [\FileLinks.Target.tenant, \.collection, \.scope, \.recordId, \.sha256] {
            var other = Self.target
            other[keyPath: change] += "x"
            others.append(other)
        }
        for other in others {
            #expect(!Self.links.verifies(other, expires: 1_800_003_600, signature: signature, now: now))
        }
        #expect(!Self.links.verifies(Self.target, expires: 1_800_009_999, signature: signature, now: now))
        #expect(!Self.links.verifies(Self.target, expires: 1_800_003_600, signature: "00" + signature.dropFirst(2), now: now))
        #expect(!Self.links.verifies(Self.target, expires: 1_800_003_600, signature: "not hex", now: now))
        let otherKey = FileLinks(base: Self.links.base, key: SymmetricKey(size: .bits256), lifetime: .seconds(3600))
        #expect(!otherKey.verifies(Self.target, expires: 1_800_003_600, signature: signature, now: now))
    }
}
