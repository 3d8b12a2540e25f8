import Crypto
import Foundation
import GRDB
import OutpostProtocol

/// Reference data on the device, such as an event's guest roster: a resumable download, delta refresh with
/// tombstones, and lookups and search that work with no network.
///
/// Rows are sealed at rest like every payload; search goes through a blind index (``ReferenceIndex``).
public struct ReferenceData: Sendable {
    public let store: LocalStore
    let transport: any SyncTransport
    let now: @Sendable () -> Date
    let index: ReferenceIndex
    /// Rows per snapshot page.
    public var pageSize: Int

    public init(store: LocalStore, transport: any SyncTransport, pageSize: Int = 500, now: @escaping @Sendable () -> Date = { Date() }) {
        self.store = store
        self.transport = transport
        self.pageSize = pageSize
        self.now = now
        self.index = ReferenceIndex(storeKey: store.sealer.key)
    }

    // MARK: State

    public func state(collection: String, scope: String) async throws -> ReferenceState {
        try await store.perform {
            try await store.read { db in try Self.state(db, collection: collection, scope: scope) }
        }
    }

    static func state(_ db: Database, collection: String, scope: String) throws -> ReferenceState {
        try ReferenceStateRow.find(collection: collection, scope: scope, db)?.referenceState ?? .notDownloaded
    }

    /// Runs `prepare` over `items` in two halves at once: sealing and tokens are a page's heaviest CPU work on
    /// the device.
    static func inHalves<Item: Sendable, Output: Sendable>(
        _ items: [Item], _ prepare: @escaping @Sendable (Item) throws -> Output
    ) async throws -> [Output] {
        let middle = items.count / 2
        async let first = items[..<middle].map(prepare)
        let second = try items[middle...].map(prepare)
        return try await first + second
    }

    /// A record ready to store: sealed, with what it is indexed by.
    struct PreparedRow: Sendable {
        let recordId: String
        let payload: Data
        let version: Int64
        /// The name and e-mail the row is indexed by, and their ``ReferenceIndex/fingerprint(name:email:)``.
        let name: String?
        let email: String?
        let fingerprint: Int64
        /// The search tokens as the row and the search index keep them (``ReferenceIndex/text(_:)``), worked out on
        /// the preparing tasks for a download's rows, all new; a refresh's are worked out only for rows whose
        /// fingerprint changed.
        private let tokens: Tokens

        private enum Tokens: Sendable {
            /// The text; nil when the row has none.
            case ready(String?)
            /// Left to ``tokenText(_:)``.
            case deferred
        }

        init(
            recordId: String, payload: Data, version: Int64, name: String?, email: String?, index: ReferenceIndex,
            withTokens: Bool
        ) {
            self.recordId = recordId
            self.payload = payload
            self.version = version
            self.name = name
            self.email = email
            self.fingerprint = index.fingerprint(name: name, email: email)
            self.tokens = withTokens ? .ready(ReferenceIndex.text(index.tokens(name: name, email: email))) : .deferred
        }

        /// The row's search tokens as the row and the index keep them; nil when it has none.
        func tokenText(_ index: ReferenceIndex) -> String? {
            switch tokens {
            case .ready(let text): return text
            case .deferred: return ReferenceIndex.text(index.tokens(name: name, email: email))
            }
        }
    }

    /// Seals `record`, and works out its fingerprint and, if asked, its tokens from the fields `search` names
    /// (none without it: the collection is not searched).
    static func prepare(
        _ record: SnapshotPage.Record, collection: String, scope: String, sealer: Sealer,
        index: ReferenceIndex, search: ReferenceSearch?, withTokens: Bool
    ) throws -> PreparedRow {
        let fields = record.fieldsJSON
        let indexed =
            try search.map { try JSONValue.members([$0.words, $0.exact ?? ""], ofObject: fields) } ?? [nil, nil]
        return PreparedRow(
            recordId: record.recordId,
            payload: try sealer.seal(fields, context: "reference:\(collection)/\(scope)/\(record.recordId)"),
            version: record.version, name: indexed[0]?.stringValue, email: indexed[1]?.stringValue, index: index,
            withTokens: withTokens)
    }

    /// Rows per multi-row `INSERT`: one statement per row costs more than the B-tree work it does.
    static let insertBatch = 50

    /// The statements that insert 1 to ``insertBatch`` rows: the set's collection and scope are bound once, as
    /// ?1 and ?2, for every row of the statement.
    private static let inserts = (1...insertBatch).map { insertSQL(rows: $0) }

    private static func insertSQL(rows: Int) -> String {
        let tuples = (0..<rows).map { row in
            let first = 3 + 5 * row
            return "(?1, ?2, ?\(first), ?\(first + 1), ?\(first + 2), ?\(first + 3), ?\(first + 4))"
        }
        return "INSERT INTO reference_records (collection, scope, record_id, payload, version, tokens, fingerprint) VALUES "
            + tuples.joined(separator: ", ")
    }

    static func insertRecords(
        _ rows: [PreparedRow], collection: String, scope: String, index: ReferenceIndex, db: Database
    ) throws {
        var start = 0
        while start < rows.count {
            let count = min(insertBatch, rows.count - start)
            var values: [(any DatabaseValueConvertible)?] = [collection, scope]
            values.reserveCapacity(2 + 5 * count)
            for row in rows[start..<(start + count)] {
                values += [row.recordId, row.payload, row.version, row.tokenText(index), row.fingerprint]
            }
            try db.cachedStatement(sql: Self.inserts[count - 1]).execute(arguments: StatementArguments(values))
            start += count
        }
    }

    /// The highest ordinal given to a reference row so far; rows stored next take the ones after it.
    static func lastOrdinal(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT coalesce(max(ordinal), 0) FROM reference_records")) ?? 0
    }

    /// Puts the rows stored after ordinal `ordinal` into the search index, with the tokens each row keeps.
    static func indexRows(_ db: Database, after ordinal: Int64) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO reference_index (rowid, tokens)
                SELECT ordinal, tokens FROM reference_records WHERE ordinal > ? AND tokens IS NOT NULL
                """
        ).execute(arguments: [ordinal])
    }

    /// Takes a set's rows out of the search index, with the tokens each row keeps (what a contentless FTS5
    /// index needs to remove a document).
    static func unindex(_ db: Database, collection: String, scope: String) throws {
        try db.execute(
            sql: """
                INSERT INTO reference_index (reference_index, rowid, tokens)
                SELECT 'delete', ordinal, tokens FROM reference_records
                WHERE collection = ? AND scope = ? AND tokens IS NOT NULL
                """,
            arguments: [collection, scope])
    }
}
