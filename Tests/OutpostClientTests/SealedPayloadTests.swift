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

    @Test("written without Codable, read by Codable; written by Codable, read without it", arguments: [
        LocalStore.SealedPayload(fields: ["name": "Zoë \"Q\"\n", "n": .integer(-1), "x": .number(0.5), "o": .object(["a": .array([.null, .bool(true)])])], syncError: nil, conflict: nil),
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
            #expect(LocalStore.SealedPayload.wrapping(fieldsJSON: try fields.jsonBytes())
                == (try LocalStore.SealedPayload(fields: fields, syncError: nil, conflict: nil).jsonBytes()))
        }
    }

    @Test("a payload that is not a record's is refused", arguments: ["[]", #"{"syncError":"x"}"#, #"{"fields":{},"syncError":3}"#, "{"])
    func refused(text: String) {
        #expect(throws: (any Error).self) { try LocalStore.SealedPayload(jsonBytes: Data(text.utf8)) }
    }
}

/// A page of reference rows is sealed with nonces drawn at once; each must be fresh and each seal must open.
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
    }
}
