import Foundation
import GRDB
import OutpostProtocol

extension ReferenceData {
    /// One id: found, cancelled since download, not in the set, or undecidable while incomplete.
    public func lookup(collection: String, scope: String, recordId: String) async throws -> ReferenceLookup {
        let sealer = store.sealer
        return try await store.perform {
            try store.readOnCaller { db in
                guard try Self.state(db, collection: collection, scope: scope).isReady else { return .incomplete }
                if let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: "SELECT payload, version FROM reference_records WHERE collection = ? AND scope = ? AND record_id = ?"),
                    arguments: [collection, scope, recordId])
                {
                    let fields = try sealer.open(
                        json: [String: JSONValue].self, from: row["payload"],
                        context: "reference:\(collection)/\(scope)/\(recordId)")
                    return .found(ReferenceRecord(recordId: recordId, fields: fields, version: row["version"]))
                }
                let cancelled =
                    try Bool.fetchOne(
                        db.cachedStatement(
                            sql: "SELECT 1 FROM reference_tombstones WHERE collection = ? AND scope = ? AND record_id = ?"),
                        arguments: [collection, scope, recordId]) ?? false
                return cancelled ? .cancelled : .notFound
            }
        }
    }

    /// Records whose words field (a name) has words that start with the query's words, or whose exact field (an
    /// e-mail) is the query, as the store's schema declares them for `collection` (``ReferenceSearch``): the
    /// first `limit` found, sorted by the words field (type more letters to narrow a common prefix).
    ///
    /// - Throws: ``ClientError`` `invalidInput` for a query of one character or a collection the schema gives
    ///   no search, `notFound` while the set is not fully downloaded.
    public func search(collection: String, scope: String, query: String, limit: Int = 20) async throws -> [ReferenceRecord] {
        guard let search = store.schema.search[collection] else {
            throw ClientError(.invalidInput, "\(collection) is not searched on this device: its store's schema names no search fields")
        }
        guard let tokens = index.tokens(forQuery: query) else {
            throw ClientError(.invalidInput, "type at least two characters of a name, or a whole e-mail")
        }
        let sealer = store.sealer
        return try await store.perform {
            try store.readOnCaller { db in
                // Until the last page is stored, a search would answer from part of the set.
                guard try Self.state(db, collection: collection, scope: scope).isReady else {
                    throw ClientError(.notFound, ReferenceMessages.incomplete)
                }
                // A record must hold every word's token: the index narrows by all the words at once. Candidates
                // come in ordinal order (as the rows arrived, by id within a download). CROSS JOIN keeps the
                // index the outer loop: SQLite could otherwise walk the whole set and probe the index per row.
                let sql = """
                    SELECT r.record_id, r.payload, r.version FROM reference_index f
                    CROSS JOIN reference_records r ON r.ordinal = f.rowid
                    WHERE reference_index MATCH ? AND r.collection = ? AND r.scope = ?
                    """
                let arguments: [any DatabaseValueConvertible] = [ReferenceIndex.matchExpression(tokens), collection, scope]
                // Compiled once per connection, as the lookups' statements: a desk searches all day.
                let candidates = try Row.fetchCursor(db.cachedStatement(sql: sql), arguments: StatementArguments(arguments))
                // Open candidates only until `limit` match: a two-letter prefix may have thousands.
                var found: [ReferenceRecord] = []
                let byName = !ReferenceIndex.isEmail(query)
                let index = self.index
                let queryWords = ReferenceIndex.queryWords(query)
                while found.count < limit, let row = try candidates.next() {
                    let id: String = row["record_id"]
                    let context = "reference:\(collection)/\(scope)/\(id)"
                    let opened = try sealer.open(row["payload"], context: context)
                    if byName {
                        // Most candidates of a short prefix do not match: their name alone is read to see.
                        let name = try? JSONValue.member(search.words, ofObject: opened)
                        guard index.matches(name: name?.stringValue, queryWords: queryWords) else { continue }
                    }
                    let fields: [String: JSONValue]
                    do {
                        fields = try [String: JSONValue](parsingObject: opened)
                    } catch {
                        throw ClientError(.cannotDecrypt, "a sealed payload does not decode")
                    }
                    if index.matches(fields, search: search, query: query, queryWords: queryWords) {
                        found.append(ReferenceRecord(recordId: id, fields: fields, version: row["version"]))
                    }
                }
                let key = search.words
                found.sort { ($0.fields[key]?.stringValue ?? "", $0.recordId) < ($1.fields[key]?.stringValue ?? "", $1.recordId) }
                return found
            }
        }
    }
}
