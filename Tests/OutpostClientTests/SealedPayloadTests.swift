import Crypto
import Foundation
import OutpostProtocol
import Testing

@testable import OutpostClient

/// A record's sealed payload is written and read without Codable unless it holds a conflict; either way it is
/// the JSON Codable writes, so stores written before read the same.
@Suite("Sealed record payloads")
struct SealedPayloadTests {
    static let conflict = ConflictDetail(
        conflictId: "c1", fields: ["status"], serverFields: ["status": "checked_in", "n": .integer(3)], serverVersion: 7)

    @Test(
        "written without Codable, read by Codable; written by Codable, read without it",
        arguments: [
            LocalStore.SealedPayload(
                fields: ["name": "Zoë \"Q\"\n", "n": .integer(-1), "x": .number(0.5), "o": .object(["a": .array([.null, .bool(true)])])],
                syncError: nil, conflict: nil),
            LocalStore.SealedPayload(fields: [:], syncError: "rejected: guest_cancelled — “refer to organizer”", conflict: nil),
            LocalStore.SealedPayload(fields: ["status": "scanned"], syncError: "conflict on status", conflict: conflict),
        ])
    func compatible(payload: LocalStore.SealedPayload) throws {
        let written = Data(try payload.jsonBytes())
        let byCodable = try JSONDecoder().decode(LocalStore.SealedPayload.self, from: written)
        #expect(byCodable.fields == payload.fields && byCodable.syncError == payload.syncError && byCodable.conflict == payload.conflict)
        let read = try LocalStore.SealedPayload(jsonBytes: try JSONEncoder().encode(payload))
        #expect(read.fields == payload.fields && read.syncError == payload.syncError && read.conflict == payload.conflict)
    }

    @Test("a new record's payload wrapped around its fields' JSON is the payload written whole")
    func wrapping() throws {
        let fields: [String: JSONValue] = ["name": "Zoë \"Q\"\n", "n": .integer(-1), "o": .object(["a": .array([.null])])]
        for fields in [fields, [:]] {
            #expect(
                LocalStore.SealedPayload.wrapping(fieldsJSON: try fields.jsonBytes())
                    == (try LocalStore.SealedPayload(fields: fields, syncError: nil, conflict: nil).jsonBytes()))
        }
    }

    @Test("a payload that is not a record's is refused", arguments: ["[]", #"{"syncError":"x"}"#, #"{"fields":{},"syncError":3}"#, "{"])
    func refused(text: String) {
        #expect(throws: (any Error).self) { try LocalStore.SealedPayload(jsonBytes: Data(text.utf8)) }
    }
}

/// Nonces come from a sequence per sealer (a random field and a counter); each must be fresh and each seal
/// must open.
@Suite("Sealing with a page's nonces")
struct PageNonceTests {
    @Test("a page's nonces are all different, across pages too, and what they seal opens only in its own row")
    func nonces() throws {
        let sealer = Sealer(key: SymmetricKey(size: .bits256))
        let pages = [try sealer.nonces(500), try sealer.nonces(500), try sealer.nonces(1)]
        let all = pages.flatMap { $0 }.map { Data($0) }
        #expect(all.count == 1001)
        #expect(Set(all).count == all.count)
        #expect(all.allSatisfy { $0.count == 12 && $0 != Data(count: 12) })
        #expect(try sealer.nonces(0).isEmpty)

        let sealed = try sealer.seal(Data("Zoë".utf8), context: "reference:guests/ev-1/g1", nonce: pages[0][7])
        #expect(sealed.prefix(12) == Data(pages[0][7]))
        #expect(try sealer.open(sealed, context: "reference:guests/ev-1/g1") == Data("Zoë".utf8))
        #expect(throws: ClientError.self) { try sealer.open(sealed, context: "reference:guests/ev-1/g2") }
        // A seal with no nonce given takes the sequence's next one.
        let next = try sealer.seal(Data("Zoë".utf8), context: "c")
        #expect(!Set(all).contains(next.prefix(12)))
    }

    @Test("a sequence counts from its field; it wraps its counter, and after 2^32 nonces it draws a new field")
    func sequence() throws {
        let sequence = NonceSequence(field: 0x0102_0304_0506_0708, counter: .max, left: 3)
        let nonces = try (0..<5).map { _ in Data(try sequence.next()) }
        #expect(nonces[0] == Data([1, 2, 3, 4, 5, 6, 7, 8, 0xFF, 0xFF, 0xFF, 0xFF]))
        #expect(nonces[1] == Data([1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0]))
        #expect(nonces[2] == Data([1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 1]))
        // Three were left: the fourth has a field of its own, and the fifth follows it.
        #expect(nonces[3].prefix(8) != nonces[0].prefix(8))
        #expect(nonces[4].prefix(8) == nonces[3].prefix(8))
        #expect(nonces[4].suffix(4) != nonces[3].suffix(4))
        // Two stores opened on the same key draw their own fields.
        let one = Sealer(key: SymmetricKey(size: .bits256)), other = Sealer(key: one.key)
        #expect(Data(try one.nonceSequence.next()).prefix(8) != Data(try other.nonceSequence.next()).prefix(8))
    }
}
