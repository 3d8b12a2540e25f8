import Foundation
import Logging
import OutpostProtocol
import PostgresNIO
import Testing

@testable import OutpostServer

/// The two storage engines; the behaviour suite runs once for each.
enum StorageKind: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite
    case postgres
    /// PostgreSQL with the bytes of uploaded files in a directory (`--file-directory`): only the file suites.
    case postgresFileDirectory = "postgres, files in a directory"

    static let allCases: [StorageKind] = [.sqlite, .postgres]
    /// Every place the bytes of files are kept: SQLite's directory, PostgreSQL's table and a directory beside it.
    static let fileStores: [StorageKind] = [.sqlite, .postgres, .postgresFileDirectory]

    var testDescription: String { rawValue }

    /// A fresh PostgreSQL store on the database at `url`, its files in a temporary directory for
    /// ``postgresFileDirectory``; that directory, to remove after.
    func postgres(url: String) throws -> (PostgresStorage, URL?) {
        let files =
            self == .postgresFileDirectory
            ? FileManager.default.temporaryDirectory.appendingPathComponent("outpost-test-files-\(UUID())") : nil
        let directory = files.map(FileDirectory.init(root:))
        try directory?.prepare()
        let storage = PostgresStorage(
            location: try PostgresLocation(url: url), logger: Fixtures.quietLogger, files: directory,
            startupTimeout: Fixtures.postgresStartup)
        return (storage, files)
    }
}

/// Makes a fresh store of `kind`, migrated and running, hands it to `body`, and cleans up after.
func withStorage<T: Sendable>(
    _ kind: StorageKind, _ body: @Sendable (any SyncStorage) async throws -> T
) async throws -> T {
    switch kind {
    case .sqlite:
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-test-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let storage = try SQLiteStorage(directory: directory)
        return try await storage.withRunning { storage in
            try await storage.migrate()
            return try await body(storage)
        }
    case .postgres, .postgresFileDirectory:
        let url = try await TestPostgres.shared.makeDatabase()
        let (storage, files) = try kind.postgres(url: url)
        defer { if let files { try? FileManager.default.removeItem(at: files) } }
        let result = try await storage.withRunning { storage in
            try await storage.migrate()
            return try await body(storage)
        }
        await TestPostgres.shared.dropDatabase(url: url)
        return result
    }
}

/// Opens a second storage on the same database as a PostgreSQL test, as another server process would.
func withPostgresDatabase<T: Sendable>(_ body: @Sendable (String) async throws -> T) async throws -> T {
    let url = try await TestPostgres.shared.makeDatabase()
    let result = try await body(url)
    await TestPostgres.shared.dropDatabase(url: url)
    return result
}

enum Fixtures {
    /// How long a test's storage waits for its database at start. The server's 15 s default is for an
    /// operator's database; here dozens of suites create databases at once on one test cluster, two cores
    /// shared with everything else the suite runs, and the first ones at times took longer than 15 s.
    static let postgresStartup: Duration = .seconds(60)

    static let quietLogger: Logger = {
        var logger = Logger(label: "outpost-test")
        logger.logLevel = .critical
        return logger
    }()

    static let secret = Array("an-outpost-test-secret-of-32-bytes-or-more".utf8)

    /// A fixed instant; tests move time explicitly from here.
    static let now = Timestamp(iso8601: "2026-11-21T09:00:00.000Z")!

    static func time(_ offsetSeconds: Double) -> Timestamp {
        Timestamp(millisecondsSince1970: now.millisecondsSince1970 + Int64(offsetSeconds * 1000))
    }

    static func upsert(
        _ recordId: String, _ fields: [String: JSONValue], at seconds: Double = 0, collection: String = "notes",
        device: String = "dev-a", base: Int64? = nil, key: String? = nil, scope: String? = nil
    ) -> Mutation {
        let timestamp = time(seconds)
        return Mutation(
            idempotencyKey: key ?? "\(device):\(recordId):\(timestamp.iso8601)", collection: collection,
            recordId: recordId, scope: scope, op: .upsert, fields: fields, clientTimestamp: timestamp, baseVersion: base)
    }

    static func delete(
        _ recordId: String, at seconds: Double = 0, collection: String = "notes", device: String = "dev-a",
        base: Int64? = nil, scope: String? = nil
    ) -> Mutation {
        let timestamp = time(seconds)
        return Mutation(
            idempotencyKey: "\(device):\(recordId):\(timestamp.iso8601):delete", collection: collection,
            recordId: recordId, scope: scope, op: .delete, clientTimestamp: timestamp, baseVersion: base)
    }

    static func context(
        tenant: String = "acme", device: String = "dev-a", user: String = "ana", role: Role = .staff
    ) -> PushContext {
        PushContext(tenant: tenant, deviceId: device, userId: user, userName: "Ana", role: role, receivedAt: time(3600))
    }

    /// Valid push items, each with its scope resolved as the server's validation resolves it.
    static func items(_ mutations: [Mutation], collections: CollectionRegistry = .standard) -> [PushItem] {
        mutations.map { mutation in
            var resolved = mutation
            if case .success(let scope)? = collections[mutation.collection]?.scope(of: mutation) {
                resolved.scope = scope
            }
            return .valid(resolved, contentHash: MutationValidator.contentHash(of: mutation))
        }
    }
}

extension SyncStorage {
    /// Pushes valid mutations as one device of one tenant.
    func push(
        _ mutations: [Mutation], tenant: String = "acme", device: String = "dev-a", user: String = "ana",
        role: Role = .staff
    ) async throws -> [MutationResult] {
        try await push(
            Fixtures.items(mutations), context: Fixtures.context(tenant: tenant, device: device, user: user, role: role),
            collections: .standard)
    }

    /// A page of changes after `cursor`, bounded by the server's default page size in bytes.
    func pull(
        tenant: String, collection: String, scope: String?, after cursor: PullCursor, limit: Int
    )
        async throws -> PulledChanges
    {
        try await pull(
            tenant: tenant, collection: collection, scope: scope, after: cursor, limit: limit,
            maxBytes: ServerConfiguration().pageMaxBytes)
    }

    /// A page of a snapshot, bounded by the server's default page size in bytes.
    func snapshotPage(
        tenant: String, collection: String, scope: String?, after position: RecordPosition?, limit: Int
    )
        async throws -> [RecordRow]
    {
        try await snapshotPage(
            tenant: tenant, collection: collection, scope: scope, after: position, limit: limit,
            maxBytes: ServerConfiguration().pageMaxBytes)
    }

    /// Pulls everything after `cursor`, following `hasMore`.
    func pullAll(
        tenant: String = "acme", collection: String = "notes", scope: String? = nil, from cursor: PullCursor = .start,
        limit: Int = 500, maxBytes: Int = ServerConfiguration().pageMaxBytes
    ) async throws -> (records: [Change], cursor: PullCursor) {
        try await settle()
        var cursor = cursor
        var records: [Change] = []
        while true {
            let page = try await pull(
                tenant: tenant, collection: collection, scope: scope, after: cursor, limit: limit, maxBytes: maxBytes)
            records += try page.changes.map { try $0.change() }
            cursor = page.cursor
            if !page.hasMore { return (records, cursor) }
        }
    }
}

extension SyncStorage {
    /// Waits until every committed change is visible to pulls.
    ///
    /// On PostgreSQL a pull returns only changes of transactions older than every one still running in the
    /// cluster, and the tests run many at once; a test that reads its own writes waits for that horizon
    /// first. SQLite needs no wait.
    func settle() async throws {
        guard let postgres = self as? PostgresStorage else { return }
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while ContinuousClock.now < deadline {
            let rows = try await postgres.client.query(
                """
                SELECT coalesce(max(change_xid), 0), pg_snapshot_xmin(pg_current_snapshot())::text::bigint
                FROM records
                """)
            for try await (newest, horizon) in rows.decode((Int64, Int64).self) where newest < horizon {
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw TestSetupError("the PostgreSQL horizon did not pass the newest change within 30 s")
    }
}
