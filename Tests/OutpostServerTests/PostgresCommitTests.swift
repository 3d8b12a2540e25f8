import Foundation
import OutpostProtocol
import PostgresNIO
import Testing

@testable import OutpostServer

/// PostgreSQL reports a lone statement complete before the implicit transaction around it commits, and
/// PostgresNIO ends the query there: a commit that then fails (a deferred check, the database stopping between
/// the two) would go unseen. A write is acknowledged only once its commit is. A check deferred to the commit
/// stands in for the failure, which a crash would make happen at a moment no test can choose.
@Suite("PostgreSQL commits")
struct PostgresCommitTests {
    @Test("a push that fails at its commit is answered with the failure, never as applied, and nothing of it is stored")
    func pushFailsAtCommit() async throws {
        try await withStorage(.postgres) { storage in
            let storage = try #require(storage as? PostgresStorage)
            // Given a stored record, and a check that refuses some records only when their transaction commits,
            _ = try await storage.push([Fixtures.upsert("refused-edit", ["n": 1], at: 1)])
            try await Self.refuseAtCommit("records", when: "NEW.record_id LIKE 'refused%'", in: storage)
            // a push of new records (written without reading first) fails, and stores nothing,
            await #expect(throws: StorageError.self) {
                try await storage.push([Fixtures.upsert("refused-new", ["n": 1], at: 2)])
            }
            // and so does a change of the stored record (the conditional write).
            await #expect(throws: StorageError.self) {
                try await storage.push([Fixtures.upsert("refused-edit", ["n": 2], at: 3, base: 1)])
            }
            let records = try await storage.pullAll().records
            #expect(records.map(\.recordId) == ["refused-edit"])
            #expect(records.first?.fields == ["n": 1])
            #expect(try await storage.audit(tenant: "acme", collection: "notes", recordId: "refused-new").isEmpty)
            // A push the check lets through is answered as applied.
            #expect(try await storage.push([Fixtures.upsert("kept", ["n": 1], at: 4)]).map(\.status) == [.applied])
        }
    }

    @Test("heartbeats, device bindings, sign-in codes and notifications that fail at their commit fail")
    func otherWritesFailAtCommit() async throws {
        try await withStorage(.postgres) { storage in
            let storage = try #require(storage as? PostgresStorage)
            let identity = Identity(tenant: "acme", userId: "ana", role: .organizer, name: "Ana")
            let code = AdminGrant(
                kind: .code, hash: "c0de", identity: identity, csrf: "", expiresAt: 10_000, sessionExpiresAt: 10_000)
            try await storage.storeGrant(code, now: 0)
            for table in ["devices", "device_owners", "admin_grants", "event_notifications"] {
                try await Self.refuseAtCommit(table, when: "true", in: storage)
            }
            let report = DeviceReport(
                tenant: "acme", fingerprint: "f1", userId: "ana", staffName: "Ana", event: "", pendingCount: 0,
                failedCount: 0, appVersion: "1", lastSeen: 1)
            await #expect(throws: StorageError.self) { try await storage.recordHeartbeat(report) }
            await #expect(throws: StorageError.self) {
                try await storage.bindDevice(tenant: "acme", fingerprint: "f1", userId: "ana", at: 1)
            }
            await #expect(throws: StorageError.self) {
                try await storage.setNotification(
                    EventNotification(tenant: "acme", event: "gala", url: "https://example.com/hook", format: .json))
            }
            // A sign-in code whose use did not commit is not taken: it was not used.
            await #expect(throws: StorageError.self) { try await storage.takeGrant(.code, hash: "c0de", now: 1) }
            #expect(try await storage.grant(.code, hash: "c0de", now: 1) == code)
            #expect(try await storage.deviceReports(tenant: "acme", event: nil).isEmpty)
            #expect(try await storage.notification(tenant: "acme", event: "gala") == nil)
        }
    }

    /// A check on `table` that refuses, at commit, each row written for which `condition` holds.
    static func refuseAtCommit(_ table: String, when condition: String, in storage: PostgresStorage) async throws {
        let logger = Fixtures.quietLogger
        try await storage.client.query(
            PostgresQuery(
                unsafeSQL: """
                    CREATE FUNCTION refuse_\(table)() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                      IF \(condition) THEN RAISE EXCEPTION 'refused at commit'; END IF;
                      RETURN NULL;
                    END $$
                    """), logger: logger)
        try await storage.client.query(
            PostgresQuery(
                unsafeSQL: """
                    CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT OR UPDATE OR DELETE ON \(table)
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_\(table)()
                    """), logger: logger)
    }
}
