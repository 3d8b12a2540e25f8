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

/// Each seal takes its sealer's next nonce (a random field and a counter); a nonce never repeats under a key,
/// and what it seals opens only in its own row.
@Suite("Sealing with a sequence of nonces")
struct SealNonceTests {
    @Test("a thousand seals of the same value under one key have a thousand nonces, and each opens only in its row")
    func nonces() throws {
        let sealer = Sealer(key: SymmetricKey(size: .bits256))
        let plain = Data("Zoë".utf8)
        let sealed = try (0..<1000).map { try sealer.seal(plain, context: "reference:guests/ev-1/g\($0)") }
        let nonces = sealed.map { Data($0.prefix(12)) }
        #expect(Set(nonces).count == 1000)
        #expect(Set(sealed).count == 1000)
        #expect(try sealer.open(sealed[7], context: "reference:guests/ev-1/g7") == plain)
        let refused = #expect(throws: ClientError.self) { try sealer.open(sealed[7], context: "reference:guests/ev-1/g8") }
        // The message is the device's; swift-crypto's error is kept beneath it.
        #expect(refused?.message == "a sealed payload does not open with this device's key")
        #expect(refused?.underlying is CryptoKitError)
        // Two sealers on the same key (two stores opened) draw their own.
        let other = Sealer(key: sealer.key)
        #expect(!nonces.contains(Data(try other.seal(plain, context: "c").prefix(12))))
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
    }
}
