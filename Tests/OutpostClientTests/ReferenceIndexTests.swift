import Crypto
import Foundation
import GRDB
import OutpostApps
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// The blind search index (FTS5, contentless): each row keeps its own tokens, so that refreshes touch exactly
/// the rows whose tokens changed, and stores made before that layout are migrated in place.
@Suite("Reference search index")
struct ReferenceIndexTests {
    static let key = SymmetricKey(size: .bits256)

    /// Every (record, token) pair the search index holds, read back through FTS5's vocabulary table; an entry
    /// for a document no row has any more is listed under its ordinal.
    static func searchRows(_ url: URL) throws -> [String: Set<Int64>] {
        try DatabaseQueue(path: url.path).write { db in
            try db.execute(sql: "CREATE VIRTUAL TABLE temp.entries USING fts5vocab(main, reference_index, 'instance')")
            var rows: [String: Set<Int64>] = [:]
            for row in try Row.fetchAll(
                db,
                sql: """
                    SELECT coalesce(r.record_id, 'ordinal ' || e.doc) AS record_id, e.term FROM temp.entries e
                    LEFT JOIN reference_records r ON r.ordinal = e.doc
                    """)
            {
                rows[row["record_id"], default: []].formUnion(ReferenceIndex.tokens(fromText: row["term"] as String))
            }
            return rows
        }
    }

    /// Whether the store still has the search table that repeated each set's collection and scope in every row.
    static func hasOldSearchTable(_ url: URL) throws -> Bool {
        try DatabaseQueue(path: url.path).read { try $0.tableExists("reference_search") }
    }

    /// The tokens each record row keeps beside it.
    static func keptTokens(_ url: URL) throws -> [String: Set<Int64>] {
        try DatabaseQueue(path: url.path).read { db in
            var rows: [String: Set<Int64>] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT record_id, tokens FROM reference_records") {
                let tokens = ReferenceIndex.tokens(fromText: row["tokens"] as String?)
                if !tokens.isEmpty { rows[row["record_id"]] = Set(tokens) }
            }
            return rows
        }
    }

    @Test("a refresh that renames a guest moves it in search; a changed note leaves its tokens; a cancellation removes them")
    func refreshKeepsIndexExact() async throws {
        try await withStore { store, url in
            let server = ReferenceDataTests.roster(30)
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev-1")
            #expect(try Self.searchRows(url) == Self.keptTokens(url))
            let before = try Self.searchRows(url)

            server.put("g00001", ["event_id": "ev-1", "name": "Wilhelmina Okonkwo", "email": "w@example.org"], scope: "ev-1")
            server.put(
                "g00002", ["event_id": "ev-1", "name": "Guest2 Family2", "email": "guest2@example.org", "check_in_note": "table 4"], scope: "ev-1")
            server.cancel("g00003")
            #expect(try await data.refresh(collection: "guests", scope: "ev-1") == RefreshSummary(updated: 2, removed: 1))

            let after = try Self.searchRows(url)
            #expect(after == (try Self.keptTokens(url)))
            #expect(after["g00002"] == before["g00002"])
            #expect(after["g00003"] == nil)
            #expect(after["g00001"] != before["g00001"])
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "wilhel").map(\.recordId) == ["g00001"])
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "Family1").map(\.recordId).contains("g00001") == false)
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "guest2@example.org").map(\.recordId) == ["g00002"])
        }
    }

    @Test("search waits for the whole roster, and the index holds every page once, also after a resume")
    func indexBuiltAtCompletion() async throws {
        try await withStore { store, url in
            let server = ReferenceDataTests.roster(300)
            let data = ReferenceData(store: store, transport: server, pageSize: 50)
            server.failSnapshots(fromCall: 3)
            await #expect(throws: TransportError.self) { try await data.download(collection: "guests", scope: "ev-1") }
            // The three pages received before the failure are stored, and indexed with their rows.
            #expect(try Self.searchRows(url) == Self.keptTokens(url))
            #expect(try Self.keptTokens(url).count == 150)
            let error = await #expect(throws: ClientError.self) {
                try await data.search(collection: "guests", scope: "ev-1", query: "guest1")
            }
            #expect(error?.message == ReferenceMessages.incomplete)
            server.failSnapshots(fromCall: nil)
            try await data.download(collection: "guests", scope: "ev-1")
            #expect(try Self.searchRows(url) == Self.keptTokens(url))
            #expect(try Self.keptTokens(url).count == 300)
            #expect(try await data.search(collection: "guests", scope: "ev-1", query: "guest299@example.org").map(\.recordId) == ["g00299"])
        }
    }

    @Test("two events' rosters on one device are searched, refreshed and downloaded again apart")
    func setsApart() async throws {
        try await withStore { store, url in
            let server = ReferenceServer()
            for i in 0..<30 {
                server.put(String(format: "a%03d", i), ["name": .string("Ana First\(i)")], scope: "ev-a")
                server.put(String(format: "b%03d", i), ["name": .string("Ana Second\(i)")], scope: "ev-b")
            }
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev-a")
            try await data.download(collection: "guests", scope: "ev-b")
            func ids(_ scope: String, _ query: String) async throws -> Set<String> {
                Set(try await data.search(collection: "guests", scope: scope, query: query, limit: 100).map(\.recordId))
            }
            #expect(try await ids("ev-a", "ana") == Set((0..<30).map { String(format: "a%03d", $0) }))
            #expect(try await ids("ev-b", "ana") == Set((0..<30).map { String(format: "b%03d", $0) }))
            // A rename in one event moves only that event's entry.
            server.put("a000", ["name": .string("Zed Renamed")], scope: "ev-a")
            #expect(try await data.refresh(collection: "guests", scope: "ev-a") == RefreshSummary(updated: 1, removed: 0))
            #expect(try await ids("ev-a", "zed") == ["a000"])
            #expect(try await ids("ev-b", "zed").isEmpty)
            #expect(try await ids("ev-b", "ana").count == 30)
            // A download of one event again leaves the other's index whole.
            try await store.pool.write { db in
                try db.execute(sql: "DELETE FROM reference_state WHERE scope = 'ev-a'")
            }
            try await data.download(collection: "guests", scope: "ev-a")
            #expect(try await ids("ev-a", "ana").count == 29)
            #expect(try await ids("ev-b", "ana").count == 30)
            // The first download's entries went with its rows: none is left behind.
            #expect(try Self.searchRows(url) == Self.keptTokens(url))
        }
    }

    @Test("refreshes keep the index exact: tokens gained and lost, walk-ins, a cancelled row with none, one id changed twice")
    func refreshEdges() async throws {
        try await withStore { store, url in
            let server = ReferenceServer()
            server.put("a", ["name": "Ana Silva", "email": "ana@example.org"], scope: "ev")
            server.put("b", ["note": "no name yet"], scope: "ev")
            server.put("c", ["note": "never named"], scope: "ev")
            server.put("d", ["name": "Dora Lima"], scope: "ev")
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev")
            #expect(try Self.keptTokens(url).keys.sorted() == ["a", "d"])
            #expect(try Self.searchRows(url) == Self.keptTokens(url))

            server.put("a", ["note": "name withdrawn"], scope: "ev")
            server.put("b", ["name": "Bruno Costa"], scope: "ev")
            server.cancel("c")
            server.put("w", ["name": "Walk In", "email": "w@example.org"], scope: "ev")
            // One pull lists "d" twice here: only its last state counts.
            server.put("d", ["name": "Dora Renamed"], scope: "ev")
            server.put("d", ["name": "Dora Final"], scope: "ev")
            let summary = try await data.refresh(collection: "guests", scope: "ev")
            #expect(summary.removed == 1)
            #expect(try Self.searchRows(url) == Self.keptTokens(url))
            #expect(try Self.keptTokens(url).keys.sorted() == ["b", "d", "w"])
            func found(_ query: String) async throws -> [String] {
                try await data.search(collection: "guests", scope: "ev", query: query).map(\.recordId)
            }
            #expect(try await found("ana").isEmpty)
            #expect(try await found("bruno") == ["b"])
            #expect(try await found("walk in") == ["w"])
            #expect(try await found("dora fin") == ["d"])
            #expect(try await found("dora ren").isEmpty)
            #expect(try await data.lookup(collection: "guests", scope: "ev", recordId: "c") == .cancelled)
        }
    }

    @Test("a query of several words finds only records holding every word, past many that hold the first")
    func severalWords() async throws {
        try await withStore { store, _ in
            let server = ReferenceServer()
            for i in 0..<400 {
                server.put(String(format: "a%03d", i), ["name": .string("Ana Other\(i)")], scope: "ev")
            }
            for i in 0..<25 {
                server.put(String(format: "s%03d", i), ["name": .string("Ana Silvestre \(i)")], scope: "ev")
            }
            let data = ReferenceData(store: store, transport: server)
            try await data.download(collection: "guests", scope: "ev")
            let found = try await data.search(collection: "guests", scope: "ev", query: "ana silv", limit: 30)
            #expect(found.count == 25)
            #expect(found.allSatisfy { $0.recordId.hasPrefix("s") })
            #expect(try await data.search(collection: "guests", scope: "ev", query: "an sil 7").map(\.recordId) == ["s007"])
        }
    }

    @Test("a store from before tokens were kept per row, and before the FTS5 index, is migrated: same results, exact refreshes")
    func migratesOlderStores() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-migrate-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = ReferenceDataTests.roster(40)

        // A current store provides the sealed rows and the index.
        let currentURL = directory.appendingPathComponent("current.sqlite")
        let current = try LocalStore(url: currentURL, keys: StaticKeyProvider(Self.key), schema: .fieldApps)
        try await ReferenceData(store: current, transport: server).download(collection: "guests", scope: "ev-1")
        // The same data laid out as the schema before this migration had it.
        let olderURL = directory.appendingPathComponent("older.sqlite")
        try Self.copyAsOlderSchema(from: currentURL, to: olderURL)

        let migrated = try LocalStore(url: olderURL, keys: StaticKeyProvider(Self.key), schema: .fieldApps)
        let data = ReferenceData(store: migrated, transport: server)
        #expect(try Self.keptTokens(olderURL) == Self.searchRows(olderURL))
        #expect(try Self.keptTokens(olderURL).count == 40)
        #expect(try Self.hasOldSearchTable(olderURL) == false)
        let leftovers = try await DatabaseQueue(path: olderURL.path).read { db in
            try ["reference_tokens", "reference_sets"].filter { try db.tableExists($0) }
        }
        #expect(leftovers.isEmpty)
        #expect(try await data.search(collection: "guests", scope: "ev-1", query: "guest5@example.org").map(\.recordId) == ["g00005"])

        // Rows from before fingerprints have none: a refresh works out their tokens, reindexes a renamed row, and
        // keeps the entries of a row whose note alone changed, giving both their fingerprint.
        #expect(try Self.fingerprints(olderURL).values.allSatisfy { $0 == nil })
        server.put("g00005", ["event_id": "ev-1", "name": "Renamed Person", "email": "renamed@example.org"], scope: "ev-1")
        server.put(
            "g00006", ["event_id": "ev-1", "name": "Guest6 Family6", "email": "guest6@example.org", "note": "table 4"],
            scope: "ev-1")
        server.cancel("g00008")
        #expect(try await data.refresh(collection: "guests", scope: "ev-1") == RefreshSummary(updated: 2, removed: 1))
        #expect(try await data.search(collection: "guests", scope: "ev-1", query: "guest8@example.org").isEmpty)
        try await DatabaseQueue(path: olderURL.path).write { db in
            try db.execute(sql: "INSERT INTO reference_index (reference_index) VALUES ('integrity-check')")
        }
        #expect(try await data.search(collection: "guests", scope: "ev-1", query: "guest5@example.org").isEmpty)
        #expect(try await data.search(collection: "guests", scope: "ev-1", query: "renamed").map(\.recordId) == ["g00005"])
        #expect(try await data.search(collection: "guests", scope: "ev-1", query: "guest6@example.org").map(\.recordId) == ["g00006"])
        #expect(try Self.keptTokens(olderURL) == Self.searchRows(olderURL))
        let index = ReferenceIndex(storeKey: Self.key)
        let fingerprints = try Self.fingerprints(olderURL)
        #expect(fingerprints["g00005"] == index.fingerprint(name: "Renamed Person", email: "renamed@example.org"))
        #expect(fingerprints["g00006"] == index.fingerprint(name: "Guest6 Family6", email: "guest6@example.org"))
        #expect(fingerprints["g00007"] == .some(nil))
        #expect(fingerprints["g00008"] == nil)
    }

    /// Each reference row's fingerprint, by record id.
    static func fingerprints(_ url: URL) throws -> [String: Int64?] {
        try DatabaseQueue(path: url.path).read { db in
            var rows: [String: Int64?] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT record_id, fingerprint FROM reference_records") {
                rows[row["record_id"]] = row["fingerprint"] as Int64?
            }
            return rows
        }
    }

    /// Copies a current store's reference data into a new store migrated only up to the schema before
    /// per-row tokens.
    static func copyAsOlderSchema(from currentURL: URL, to olderURL: URL) throws {
        let (records, state) = try DatabaseQueue(path: currentURL.path).read { db in
            (
                try Row.fetchAll(db, sql: "SELECT collection, scope, record_id, payload, version, tokens FROM reference_records"),
                try Row.fetchAll(db, sql: "SELECT * FROM reference_state")
            )
        }
        let older = try DatabaseQueue(path: olderURL.path)
        try LocalStore.migrator.migrate(older, upTo: "v2-reference-data")
        try older.write { db in
            for row in records {
                try db.execute(
                    sql: "INSERT INTO reference_records (collection, scope, record_id, payload, version) VALUES (?, ?, ?, ?, ?)",
                    arguments: [row["collection"], row["scope"], row["record_id"], row["payload"] as Data, row["version"]])
            }
            for row in records {
                for token in ReferenceIndex.tokens(fromText: row["tokens"] as String?) {
                    try db.execute(
                        sql: "INSERT INTO reference_search (collection, scope, token, record_id) VALUES (?, ?, ?, ?)",
                        arguments: [row["collection"], row["scope"], token, row["record_id"]])
                }
            }
            for row in state {
                try db.execute(
                    sql: "INSERT INTO reference_state VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    arguments: StatementArguments(row.databaseValues))
            }
        }
        #expect(try older.read { try $0.indexes(on: "reference_search").contains { $0.name == "reference_search_by_record" } })
    }
}

@Suite("Reference search tokens")
struct ReferenceTokenTests {
    @Test(
        "a token is the first 8 bytes of HMAC-SHA256 of kind:term under the derived key",
        arguments: ["p2:an", "e:ana.1@example.org", "p4:" + String(repeating: "é", count: 40)])
    func tokenIsHMAC(message: String) {
        let storeKey = SymmetricKey(size: .bits256)
        let index = ReferenceIndex(storeKey: storeKey)
        let derived = SymmetricKey(
            data: HMAC<SHA256>.authenticationCode(for: Array("outpost-reference-search".utf8), using: storeKey))
        let expected = HMAC<SHA256>.authenticationCode(for: Array(message.utf8), using: derived)
            .withUnsafeBytes { $0.loadUnaligned(as: Int64.self) }
        let colon = message.firstIndex(of: ":")!
        #expect(index.token(String(message[..<colon]), message[message.index(after: colon)...]) == expected)
    }

    @Test("a fingerprint tells apart every name and e-mail pair, absent from empty, and differs from one store key to another")
    func fingerprints() {
        let index = ReferenceIndex(storeKey: SymmetricKey(size: .bits256))
        let pairs: [(String?, String?)] = [
            (nil, nil), ("", nil), (nil, ""), ("", ""), ("ab", "c"), ("a", "bc"), ("abc", nil), (nil, "abc"),
            ("Ana Silva", "ana@example.org"), ("ana silva", "ana@example.org"), ("Ana Silva", "ANA@example.org"),
            ("Ana\u{0}Silva", nil), ("Ana", "\u{1}Silva"),
        ]
        let digests = pairs.map { index.fingerprint(name: $0.0, email: $0.1) }
        #expect(Set(digests).count == pairs.count)
        // The same pair, the same digest (and so the same tokens); another key, another digest.
        #expect(pairs.map { index.fingerprint(name: $0.0, email: $0.1) } == digests)
        let other = ReferenceIndex(storeKey: SymmetricKey(size: .bits256))
        #expect(other.fingerprint(name: "Ana Silva", email: "ana@example.org") != digests[8])
    }

    @Test("a row's tokens are kept as their 64 bits in 16 hex digits each, space-separated, and read back the same")
    func tokenText() throws {
        var random = SeededGenerator(seed: 7)
        var lists: [[Int64]] = [[0], [Int64.min, Int64.max, -1, 1, 9, 10, -10]]
        for count in 1...40 { lists.append((0..<count).map { _ in Int64(bitPattern: random.next()) }) }
        for tokens in lists {
            let text = try #require(ReferenceIndex.text(tokens))
            let expected = tokens.map { token -> String in
                let hex = String(UInt64(bitPattern: token), radix: 16)
                return String(repeating: "0", count: 16 - hex.count) + hex
            }.joined(separator: " ")
            #expect(text == expected)
            #expect(ReferenceIndex.tokens(fromText: text) == tokens)
        }
        #expect(ReferenceIndex.text([]) == nil)
        #expect(ReferenceIndex.tokens(fromText: nil).isEmpty)
    }
}

@Suite("Reference search words")
struct ReferenceWordTests {
    /// What the index did before it cut text at ASCII separators first: Foundation's folding of the whole text.
    static func foldedWhole(_ text: String) -> [String] {
        text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: Locale(identifier: "en_US_POSIX"))
            .lowercased()
            .split(whereSeparator: { !$0.isLetter && !$0.isNumber })
            .map(String.init)
    }

    static let names = [
        "Ana Silva 12", "Chloé Müller 7", "EUN-JI Ŀarsen", "Tomás García-López", "José\u{00A0}Ñúñez",
        "Zoe\u{0301} O'Brien", "Ǆemal İnce", "Søren Ærø", "Łukasz  Żółć", "María_José", "  Ιωάννα Παπαδοπούλου ",
        "山田 太郎", "Nguyễn Thị Minh Khai", "ﬁona ＡＢＣ", "a\u{0301}", "ß", "",
    ]

    @Test("cutting at ASCII separators first gives the words folding the whole text gave", arguments: names)
    func sameWords(name: String) {
        #expect(ReferenceIndex.words(name) == Self.foldedWhole(name))
        #expect(ReferenceIndex.words(name, memo: ReferenceIndex.Memo()) == Self.foldedWhole(name))
    }

    @Test("names and e-mails read straight from their ASCII bytes give the tokens the general path gives")
    func asciiPathAgrees() {
        let index = ReferenceIndex(storeKey: SymmetricKey(size: .bits256), memoLimit: 64)
        var random = SeededGenerator(seed: 11)
        // Letters of both cases, digits, and every kind of ASCII separator, tabs and spaces at the ends; and a few
        // texts that are not all ASCII, which both take the general path.
        let alphabet = Array("aZbYcX09 \t.-_'@,;()/\\+\"!~")
        var texts = [
            "", " ", "\t", "a", "ab", "abc", "abcd", "ABCDE", "  Ana  Silva ", "O'Brien-Smith", "x@Y.org ",
            "Chloé Müller", "José\u{00A0}Ñúñez", "ana@exämple.org",
        ]
        for _ in 0..<2000 {
            let length = Int(random.next() % 24)
            texts.append(String((0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }))
        }
        for name in texts {
            let email = texts[Int(random.next() % UInt64(texts.count))]
            #expect(
                index.tokens(name: name, email: email) == index.generalTokens(name: name, email: email),
                "name \(name.debugDescription), e-mail \(email.debugDescription)")
        }
    }

    @Test("remembered tokens and folded words are the ones computed afresh, also once the memo has been emptied")
    func memoAgrees() {
        let key = SymmetricKey(size: .bits256)
        // A memo of 16 entries of each kind is emptied many times over by these names.
        let remembering = ReferenceIndex(storeKey: key, memoLimit: 16)
        let names = Self.names + (0..<40).map { "Guest \($0 * 997) Müller\($0 % 7) Zoë\($0)" }
        // Twice over: the second pass reads what the first remembered, past a reset of the memo.
        for name in names + names {
            let fresh = ReferenceIndex(storeKey: key)
            #expect(remembering.tokens(name: name, email: "a@b.c") == fresh.tokens(name: name, email: "a@b.c"))
        }
    }
}
