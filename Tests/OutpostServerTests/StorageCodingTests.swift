import Crypto
import Foundation
import OutpostProtocol
import Testing

@testable import OutpostServer

/// A record's merge stamps are stored as JSON written without Codable; old rows, written by `JSONEncoder`,
/// must read back, and new rows must be the same bytes.
@Suite("Storage coding")
struct StorageCodingTests {
    @Test("stamps are written as a sorted-key JSONEncoder writes them, and read back either way", arguments: 0..<10)
    func meta(seed: Int) throws {
        for index in 0..<30 {
            var meta = StoredRecord.Meta()
            let names = ["name", "Email", "status", "é", "a\"b", "check_in_note", "z/1"]
            for (position, name) in names.enumerated() where (seed + index + position) % 3 != 0 {
                meta.stamps[name] = FieldStamp(
                    t: Int64(seed * 1000 + index * 7 + position) - 500, d: "dev-\(position)\u{1}\"", k: "key/\(index)", v: Int64(index))
            }
            if index % 4 == 0 { meta.deletion = FieldStamp(t: Int64(index), d: "d", k: "k", v: 3) }
            let ours = StorageCoding.encode(meta)
            let theirs = String(decoding: try StorageCoding.encoder.encode(meta), as: UTF8.self)
            #expect(ours == theirs)
            #expect(try StorageCoding.decode(StoredRecord.Meta.self, from: theirs) == meta)
            #expect(try StorageCoding.decode(StoredRecord.Meta.self, from: ours) == meta)
        }
    }

    @Test("stamps shared by several fields, or alike but for one part, are each written as JSONEncoder writes them")
    func sharedStamps() throws {
        let shared = FieldStamp(t: 1_700_000_000_000, d: "door-1", k: "door-1:g1:2026-01-01T00:00:00.000Z", v: 4)
        var alike: [FieldStamp] = []
        for part in 0..<4 {
            var stamp = shared
            switch part {
            case 0: stamp.t += 1
            case 1: stamp.v += 1
            case 2: stamp.d += "x"
            default: stamp.k += "x"
            }
            alike.append(stamp)
        }
        // Runs of the shared stamp, broken by each stamp alike but for one part, in the sorted order of the names.
        let stamps = [shared, shared, alike[0], shared, alike[1], alike[1], shared, alike[2], shared, alike[3], shared]
        var meta = StoredRecord.Meta()
        for (position, stamp) in stamps.enumerated() { meta.stamps["f\(position + 10)"] = stamp }
        let ours = StorageCoding.encode(meta)
        #expect(ours == String(decoding: try StorageCoding.encoder.encode(meta), as: UTF8.self))
        let read = try StorageCoding.decode(StoredRecord.Meta.self, from: ours)
        for (field, stamp) in meta.stamps { #expect(read.stamps[field]?.v == stamp.v, "\(field)") }
    }

    @Test(
        "stamps that do not decode are reported as corrupt",
        arguments: [
            "", "[]", #"{"stamps":[]}"#, #"{"stamps":{"a":{"t":1}}}"#, #"{"deletion":1,"stamps":{}}"#,
        ])
    func corruptMeta(text: String) {
        let error = #expect(throws: StorageError.self) { try StorageCoding.decode(StoredRecord.Meta.self, from: text) }
        #expect(error?.code == .corrupt)
    }

    @Test("a mutation's content hash is the digest of the bytes JSONEncoder writes, as stored hashes were made")
    func contentHash() throws {
        let mutation = Mutation(
            idempotencyKey: "dev:r1:1795000000000", collection: "guests", recordId: "g/1", op: .upsert,
            fields: ["Name": .string("Ana \"Q\" Silva"), "age": .integer(41), "score": .number(0.25), "tags": .array([.null, .bool(true)])],
            clientTimestamp: Timestamp(millisecondsSince1970: 1_795_000_000_000), baseVersion: 3)
        let digest = try StorageCoding.encoder.encode(mutation)
        #expect(MutationValidator.contentHash(of: mutation) == SHA256.hash(data: digest).hexString)
    }
}
