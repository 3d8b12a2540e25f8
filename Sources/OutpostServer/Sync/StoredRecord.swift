import Foundation
import OutpostProtocol

/// Who wrote a field's current value, and when: the key that orders concurrent writes.
///
/// Stamps compare by client time, then device id, then idempotency key, so every server
/// resolves a tie the same way whatever order the mutations arrive in.
struct FieldStamp: Sendable, Hashable, Codable, Comparable {
    /// Client time, in milliseconds since 1970.
    var t: Int64
    /// Device id.
    var d: String
    /// Idempotency key.
    var k: String
    /// The record version at which this value was written.
    var v: Int64

    /// `{"d":…,"k":…,"t":…,"v":…}`, as a sorted-key `JSONEncoder` writes it.
    func writeJSON(to output: inout [UInt8]) {
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("d", first: true, to: &output)
        JSONWriter.string(d, to: &output)
        JSONWriter.key("k", to: &output)
        JSONWriter.string(k, to: &output)
        JSONWriter.key("t", to: &output)
        output.append(contentsOf: String(t).utf8)
        JSONWriter.key("v", to: &output)
        output.append(contentsOf: String(v).utf8)
        output.append(UInt8(ascii: "}"))
    }

    static func < (lhs: FieldStamp, rhs: FieldStamp) -> Bool {
        (lhs.t, lhs.d, lhs.k) < (rhs.t, rhs.d, rhs.k)
    }

    static func == (lhs: FieldStamp, rhs: FieldStamp) -> Bool {
        (lhs.t, lhs.d, lhs.k) == (rhs.t, rhs.d, rhs.k)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(t)
        hasher.combine(d)
        hasher.combine(k)
    }
}

/// Identifies a record inside a tenant: its collection, its id and its scope (empty in a collection without
/// one). The same id in two scopes is two records.
struct RecordKey: Sendable, Hashable, Comparable {
    var collection: String
    var recordId: String
    var scope: String

    init(collection: String, recordId: String, scope: String = "") {
        self.collection = collection
        self.recordId = recordId
        self.scope = scope
    }

    /// The record a validated mutation names (its scope resolved by ``CollectionPolicy/scope(of:)``).
    init(_ mutation: Mutation) {
        self.init(collection: mutation.collection, recordId: mutation.recordId, scope: mutation.scope ?? "")
    }

    static func < (lhs: RecordKey, rhs: RecordKey) -> Bool {
        (lhs.collection, lhs.recordId, lhs.scope) < (rhs.collection, rhs.recordId, rhs.scope)
    }
}

/// A record as the server stores it: its values plus the stamps that last-write-wins needs.
package struct StoredRecord: Sendable, Hashable {
    var collection: String
    var recordId: String
    var scope: String
    /// The user who created the record: in a collection of own records, the only member of staff who may
    /// read or change it.
    var owner: String = ""
    var version: Int64
    var tombstone: Bool
    var fields: [String: JSONValue]
    var meta: Meta
    /// Client time of the first write, in milliseconds.
    var createdAt: Int64
    /// Client time of the latest applied change, in milliseconds.
    var updatedAt: Int64

    /// The per-field stamps, and the stamp of the latest delete, kept as one JSON column.
    struct Meta: Sendable, Hashable, Codable {
        var stamps: [String: FieldStamp] = [:]
        var deletion: FieldStamp?
    }

    var key: RecordKey { RecordKey(collection: collection, recordId: recordId, scope: scope) }

    var change: Change {
        Change(
            collection: collection,
            recordId: recordId,
            scope: scope,
            version: version,
            tombstone: tombstone,
            fields: tombstone ? [:] : fields,
            createdAt: Timestamp(millisecondsSince1970: createdAt),
            updatedAt: Timestamp(millisecondsSince1970: updatedAt)
        )
    }
}

/// A record as a snapshot or pull page sends it, its fields still the JSON text storage holds: that text is
/// written into the page as it is, never parsed and written again, which would cost more than the rest of the
/// page. Every engine stores fields as compact JSON objects (`StorageCoding`). A tombstone's fields are sent
/// empty.
package struct RecordRow: Sendable, Hashable {
    package var collection: String
    package var recordId: String
    package var scope: String
    package var version: Int64
    package var tombstone: Bool = false
    package var fieldsJSON: String
    package var createdAt: Int64
    package var updatedAt: Int64

    func writeJSON(to output: inout [UInt8]) throws(JSONSyntaxError) {
        try Change.writeJSON(
            collection: collection, recordId: recordId, scope: scope, version: version, tombstone: tombstone,
            createdAt: Timestamp(millisecondsSince1970: createdAt), updatedAt: Timestamp(millisecondsSince1970: updatedAt),
            to: &output
        ) { (output: inout [UInt8]) throws(JSONSyntaxError) in
            output.append(contentsOf: tombstone ? "{}".utf8 : fieldsJSON.utf8)
        }
    }

    /// Rows as a JSON array.
    static func writeJSON(_ rows: [RecordRow], to output: inout [UInt8]) throws(JSONSyntaxError) {
        try JSONWriter.array(rows, to: &output) { (row, output: inout [UInt8]) throws(JSONSyntaxError) in
            try row.writeJSON(to: &output)
        }
    }

    /// The row as a change, its fields parsed.
    package func change() throws -> Change {
        Change(
            collection: collection, recordId: recordId, scope: scope, version: version, tombstone: tombstone,
            fields: tombstone ? [:] : try StorageCoding.decode([String: JSONValue].self, from: fieldsJSON),
            createdAt: Timestamp(millisecondsSince1970: createdAt), updatedAt: Timestamp(millisecondsSince1970: updatedAt))
    }
}

/// The JSON coding every engine uses for the JSON columns, so that both store byte-identical text.
enum StorageCoding {
    /// The value `raw` names, or a `corrupt` error: a stored value this version does not know is never read as
    /// another.
    static func known<Value: RawRepresentable>(_ raw: Value.RawValue, _ what: String) throws -> Value {
        guard let value = Value(rawValue: raw) else {
            throw StorageError(.corrupt, "a stored \(what) is not one this version knows")
        }
        return value
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    static func encode(_ value: some Encodable) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// Field maps, the bulk of every page served, skip Codable (see `JSONValue.init(parsing:)`).
    static func encode(_ fields: [String: JSONValue]) throws -> String {
        do {
            return String(decoding: try fields.jsonBytes(), as: UTF8.self)
        } catch {
            throw StorageError(.corrupt, "a field value cannot be stored: \(error.reason)")
        }
    }

    static func decode(_ type: [String: JSONValue].Type, from text: String) throws -> [String: JSONValue] {
        do {
            guard case .object(let fields) = try JSONValue(parsing: text) else {
                throw JSONSyntaxError(offset: 0, reason: "expected an object")
            }
            return fields
        } catch {
            throw StorageError(.corrupt, "stored fields do not decode")
        }
    }

    /// A record's merge stamps, written on every push of it, skip Codable too: the same JSON, keys sorted.
    static func encode(_ meta: StoredRecord.Meta) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(24 + meta.stamps.count * 96)
        output.append(UInt8(ascii: "{"))
        var first = true
        if let deletion = meta.deletion {
            JSONWriter.key("deletion", first: true, to: &output)
            deletion.writeJSON(to: &output)
            first = false
        }
        JSONWriter.key("stamps", first: first, to: &output)
        output.append(UInt8(ascii: "{"))
        // The fields one mutation wrote share its stamp: it is written out once and its bytes copied after.
        var previous: (stamp: FieldStamp, json: [UInt8])?
        for (position, field) in JSONWriter.sortedKeys(meta.stamps.keys).enumerated() {
            JSONWriter.key(field, first: position == 0, to: &output)
            let stamp = meta.stamps[field]!
            if let previous, previous.stamp.t == stamp.t, previous.stamp.v == stamp.v, previous.stamp.d == stamp.d,
                previous.stamp.k == stamp.k
            {
                output.append(contentsOf: previous.json)
            } else {
                let start = output.count
                stamp.writeJSON(to: &output)
                previous = (stamp, Array(output[start...]))
            }
        }
        output.append(contentsOf: "}}".utf8)
        return String(decoding: output, as: UTF8.self)
    }

    static func decode(_ type: StoredRecord.Meta.Type, from text: String) throws -> StoredRecord.Meta {
        func stamp(_ value: JSONValue) -> FieldStamp? {
            guard case .object(let object) = value, case .integer(let t)? = object["t"], case .string(let d)? = object["d"],
                case .string(let k)? = object["k"], case .integer(let v)? = object["v"]
            else { return nil }
            return FieldStamp(t: t, d: d, k: k, v: v)
        }
        guard case .object(let object)? = try? JSONValue(parsing: text) else {
            throw StorageError(.corrupt, "a stored record's stamps do not decode")
        }
        var meta = StoredRecord.Meta()
        if let deletion = object["deletion"], deletion != .null {
            guard let parsed = stamp(deletion) else { throw StorageError(.corrupt, "a stored record's stamps do not decode") }
            meta.deletion = parsed
        }
        if case .object(let stamps)? = object["stamps"] {
            meta.stamps.reserveCapacity(stamps.count)
            for (field, value) in stamps {
                guard let parsed = stamp(value) else { throw StorageError(.corrupt, "a stored record's stamps do not decode") }
                meta.stamps[field] = parsed
            }
        } else if object["stamps"] != nil {
            throw StorageError(.corrupt, "a stored record's stamps do not decode")
        }
        return meta
    }

    static func decode<T: Decodable>(_ type: T.Type, from text: String) throws -> T {
        do {
            return try JSONDecoder().decode(type, from: Data(text.utf8))
        } catch {
            throw StorageError(.corrupt, "a stored \(T.self) does not decode")
        }
    }
}
