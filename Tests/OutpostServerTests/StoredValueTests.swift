import Foundation
import GRDB
import OutpostProtocol
import PostgresNIO
import Testing

@testable import OutpostServer

/// A value in the database that this version does not know is `corrupt`: it is never read as another.
@Suite("Stored values")
struct StoredValueTests {
    @Test("an unknown mutation status or operation is corrupt, on both engines", arguments: StorageKind.allCases)
    func unknownValues(kind: StorageKind) async throws {
        try await withStorage(kind) { storage in
            _ = try await storage.push([Fixtures.upsert("n1", ["t": "x"])])
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "n1").count == 1)
            for statement in ["UPDATE mutations SET status = 'teleported'", "UPDATE mutations SET status = 'applied', op = 'merge'"] {
                try await Self.execute(statement, in: storage)
                do {
                    _ = try await storage.audit(tenant: "acme", collection: "notes", recordId: "n1")
                    Issue.record("\(statement): read as a known value")
                } catch let error as StorageError {
                    #expect(error.code == .corrupt, "\(statement)")
                }
            }
            // A push of the same key reads the stored status too: it is refused, never answered as another.
            try await Self.execute("UPDATE mutations SET status = 'teleported', op = 'upsert'", in: storage)
            await #expect(throws: StorageError.self) { try await storage.push([Fixtures.upsert("n1", ["t": "x"])]) }
        }
    }

    static func execute(_ sql: String, in storage: any SyncStorage) async throws {
        if let sqlite = storage as? SQLiteStorage {
            try await sqlite.pool.write { try $0.execute(sql: sql) }
        } else if let postgres = storage as? PostgresStorage {
            try await postgres.client.query(PostgresQuery(unsafeSQL: sql), logger: postgres.logger)
        }
    }
}

/// A storage error says what failed in words fit to log and answer, and keeps the engine's error beneath.
@Suite("Storage errors")
struct StorageErrorCauseTests {
    struct Refused: Error {}

    @Test("PostgreSQL's errors are translated to a message, and kept as the underlying error")
    func postgresKeepsCause() {
        let error = PostgresStorage.translate(Refused())
        #expect(error.code == .unavailable)
        #expect(error.message == "PostgreSQL is unreachable")
        #expect(error.underlying is Refused)
    }

    @Test("a SQLite store that cannot be opened says where, and keeps GRDB's error")
    func sqliteKeepsCause() throws {
        // A file where the store's directory should be.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-not-a-directory-\(UUID().uuidString)")
        try Data("x".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let error = #expect(throws: StorageError.self) { _ = try SQLiteStorage(directory: file) }
        #expect(error?.code == .configuration)
        #expect(error?.message.contains(file.path) == true)
        #expect(error?.underlying != nil)
        #expect(error?.message.contains("SQLite error") == false)
    }
}
