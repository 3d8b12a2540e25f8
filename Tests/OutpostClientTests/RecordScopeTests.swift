import Clocks
import Crypto
import Foundation
import GRDB
import OutpostApps
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@testable import OutpostClient

/// A record is its collection, scope and id, on the device as on the server: the same guest's check-ins at
/// two events are two records, written, queued, pulled and answered apart; a store from before scopes moves
/// its check-ins into their events when it opens.
@Suite("Record scopes")
struct RecordScopeTests {
    /// A check-in of `guest` at `event`, in that event's scope.
    static func checkIn(_ guest: String, at event: String, by device: String = "dev-1") -> LocalStore.Write {
        LocalStore.Write(
            collection: CheckIn.collection, scope: event, recordId: guest,
            fields: ["event_id": .string(event), "guest_id": .string(guest), "scanned_by": .string(device)])
    }

    /// An engine over a fresh store and an in-memory server, online.
    func withEngine(
        rejecting: @escaping @Sendable (Mutation) -> WireError.Detail? = { _ in nil },
        _ body: (LocalStore, SyncEngine, InMemoryServer) async throws -> Void
    ) async throws {
        try await withStore { store, _ in
            let server = InMemoryServer(rejecting: rejecting)
            let engine = SyncEngine(
                store: store, transport: InMemoryTransport(server: server),
                configuration: SyncConfiguration(deviceId: "dev-1", deliversAfterSave: false),
                clock: TestClock<Duration>(), now: ManualNow().closure)
            await engine.setOnline(true)
            try await body(store, engine, server)
        }
    }

    @Test("one record id written in two scopes is two records and two outbox entries, each naming its scope")
    func writesInTwoScopes() async throws {
        try await withStore { store, _ in
            // Given a guest checked in at the gala
            let time = Date(timeIntervalSince1970: 1_800_000_000)
            try await store.write(Self.checkIn("g1", at: "gala"), deviceId: "dev-1", at: time, offline: true)

            // When the same guest is checked in at the expo, and a note without scope is written
            try await store.write(Self.checkIn("g1", at: "expo"), deviceId: "dev-1", at: time, offline: true)
            try await store.write(note("n1"), deviceId: "dev-1", at: time, offline: true)

            // Then each check-in is its own record, in its own scope
            let gala = try #require(try await store.record(collection: CheckIn.collection, scope: "gala", recordId: "g1"))
            let expo = try #require(try await store.record(collection: CheckIn.collection, scope: "expo", recordId: "g1"))
            #expect(gala.fields["event_id"] == "gala")
            #expect(expo.fields["event_id"] == "expo")
            #expect(try await store.record(collection: CheckIn.collection, recordId: "g1") == nil)
            #expect(try await store.records(collection: CheckIn.collection).map(\.scope).sorted() == ["expo", "gala"])
            #expect(try await store.record(collection: "notes", recordId: "n1")?.scope == "")
            // And each queued mutation names its scope; the note names none
            let queued = try await store.outbox.nextChunk(limit: 10).map(\.mutation)
            #expect(queued.map(\.recordId) == ["g1", "g1", "n1"])
            #expect(queued.map(\.scope) == ["gala", "expo", nil])
            #expect(queued.map { $0.fields["event_id"] } == ["gala", "expo", nil])
            #expect(Set(queued.map(\.idempotencyKey)).count == 3)
        }
    }

    @Test("a write whose scope differs from its scope field, or is no identifier, is refused and queues nothing")
    func mismatchedScope() async throws {
        try await withStore { store, _ async throws in
            // Given a check-in for the gala that names the expo as its scope
            var write = Self.checkIn("g1", at: "gala")
            write.scope = "expo"

            // When it is written, Then it is refused
            let error = await #expect(throws: ClientError.self) {
                try await store.write(write, deviceId: "dev-1", at: Date(), offline: true)
            }
            #expect(error?.code == .invalidInput)
            write.scope = "../gala"
            write.fields["event_id"] = "../gala"
            await #expect(throws: ClientError.self) { try await store.write(write, deviceId: "dev-1", at: Date(), offline: true) }
            #expect(try await store.outbox.nextChunk(limit: 10).isEmpty)
            #expect(try await store.records().isEmpty)
        }
    }

    @Test("a pull of one record id in two scopes keeps both, replaying queued changes only over their own scope's")
    func mergeByScope() async throws {
        try await withStore { store, _ in
            // Given a scan of g1 queued at the gala
            try await store.write(Self.checkIn("g1", at: "gala"), deviceId: "dev-1", at: Date(), offline: true)

            // When a pull brings another device's check-ins of g1 at the gala and at the expo
            let time = Timestamp(millisecondsSince1970: 1_800_000_000_000)
            let merged = try await store.merge(
                [
                    Change(
                        collection: CheckIn.collection, recordId: "g1", scope: "gala", version: 4, tombstone: false,
                        fields: ["event_id": "gala", "guest_id": "g1", "scanned_by": "dev-2"], createdAt: time, updatedAt: time),
                    Change(
                        collection: CheckIn.collection, recordId: "g1", scope: "expo", version: 2, tombstone: false,
                        fields: ["event_id": "expo", "guest_id": "g1", "scanned_by": "dev-2"], createdAt: time, updatedAt: time),
                ], cursorSetting: "pull_cursor:checkins:", cursor: "2")

            // Then both are kept: the gala's with the queued scan on top, still pending; the expo's as pulled
            #expect(merged == 2)
            let gala = try #require(try await store.record(collection: CheckIn.collection, scope: "gala", recordId: "g1"))
            #expect(gala.fields["scanned_by"] == "dev-1")
            #expect(gala.version == 4)
            #expect(gala.syncStatus == .pending)
            let expo = try #require(try await store.record(collection: CheckIn.collection, scope: "expo", recordId: "g1"))
            #expect(expo.fields["scanned_by"] == "dev-2")
            #expect(expo.fields["event_id"] == "expo")
            #expect(expo.version == 2)
            #expect(expo.syncStatus == .synced)
            #expect(try await store.counts() == RecordCounts(pending: 1))
        }
    }

    @Test("a push's answers mark the record of each mutation's scope, and a retry names the scope")
    func answersByScope() async throws {
        let closed = WireError.Detail(code: .stateConflict, message: "the expo is closed")
        try await withEngine(rejecting: { $0.scope == "expo" ? closed : nil }) { store, engine, server in
            // Given g1 checked in at the gala and at the expo, offline
            await engine.setOnline(false)
            try await engine.save(Self.checkIn("g1", at: "gala"))
            try await engine.save(Self.checkIn("g1", at: "expo"))

            // When they are pushed, and the server refuses the expo's
            let summary = try await engine.sync(retrying: false)

            // Then the gala's check-in is synced and the expo's refused with the reason
            #expect(summary.synced == 1)
            #expect(summary.refused == 1)
            let gala = try #require(try await store.record(collection: CheckIn.collection, scope: "gala", recordId: "g1"))
            #expect(gala.syncStatus == .synced)
            #expect(gala.version == 1)
            let expo = try #require(try await store.record(collection: CheckIn.collection, scope: "expo", recordId: "g1"))
            #expect(expo.syncStatus == .refused)
            #expect(expo.syncError == "the expo is closed")
            #expect(await server.applied.map(\.mutation.scope) == ["gala"])

            // And a retry in a scope that holds no such record finds none; in the expo's, it sends that one again
            await #expect(throws: ClientError.self) {
                _ = try await engine.retry(collection: CheckIn.collection, scope: "fair", recordId: "g1")
            }
            let retried = try await engine.retry(collection: CheckIn.collection, scope: "expo", recordId: "g1")
            #expect(retried.refused == 1)
            #expect(retried.synced == 0)
        }
    }

    // MARK: Stores from before scopes

    /// A row of the records table as the schema before scopes had it, sealed as that version sealed it.
    struct OlderRecord {
        var collection: String
        var recordId: String
        var fields: [String: JSONValue]
        var deleted = false
        var status: RecordSyncStatus
        var version: Int64?
    }

    /// An outbox entry as the schema before scopes had it.
    struct OlderEntry {
        var collection: String
        var recordId: String
        var op: MutationOperation = .upsert
        var fields: [String: JSONValue] = [:]
        var time: Int64
        var key: String { "dev-1:\(recordId):\(Timestamp(millisecondsSince1970: time).iso8601)" }
    }

    /// Makes at `url` a store migrated up to the schema before scopes, holding `records` and `entries`.
    static func makeOlderStore(at url: URL, key: SymmetricKey, records: [OlderRecord], entries: [OlderEntry]) throws {
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let queue = try DatabaseQueue(path: url.path)
        try LocalStore.migrator.migrate(queue, upTo: "v8-reference-fingerprints")
        #expect(try queue.read { try $0.columns(in: "records").map(\.name) }.contains("scope") == false)
        let sealer = Sealer(key: key)
        try queue.write { db in
            for record in records {
                // The payload's context as it was: "record:<collection>/<record id>".
                let payload = try sealer.seal(
                    try JSONEncoder().encode(["fields": record.fields]), context: "record:\(record.collection)/\(record.recordId)")
                try db.execute(
                    sql: """
                        INSERT INTO records (collection, record_id, payload, deleted, sync_status, last_sync_attempt,
                                             is_offline_entry, created_at, updated_at, version, sealed_detail)
                        VALUES (?, ?, ?, ?, ?, NULL, 0, 1800000000000, 1800000000000, ?, 0)
                        """,
                    arguments: [record.collection, record.recordId, payload, record.deleted, record.status.rawValue, record.version])
            }
            for entry in entries {
                try db.execute(
                    sql: """
                        INSERT INTO outbox (idempotency_key, collection, record_id, op, client_ts, base_version, payload)
                        VALUES (?, ?, ?, ?, ?, NULL, ?)
                        """,
                    arguments: [
                        entry.key, entry.collection, entry.recordId, entry.op.rawValue, entry.time,
                        try sealer.seal(try JSONEncoder().encode(entry.fields), context: "outbox:\(entry.key)"),
                    ])
            }
        }
    }

    @Test("a store from before scopes keeps its records, outbox and statuses, opens them, and moves check-ins into their events")
    func upgradeFromUnscopedStore() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-scopes-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        let key = SymmetricKey(size: .bits256)
        let scan: [String: JSONValue] = ["event_id": "gala", "guest_id": "g1", "scanned_by": "dev-1"]

        // Given a store written before scopes: notes synced and queued; a check-in queued and one synced at the
        // gala; one at the expo deleted after its scan, both still queued; one whose fields name no event
        try Self.makeOlderStore(
            at: url, key: key,
            records: [
                OlderRecord(collection: "notes", recordId: "n1", fields: ["text": "kept"], status: .synced, version: 3),
                OlderRecord(collection: "notes", recordId: "n2", fields: ["text": "queued"], status: .pending),
                OlderRecord(collection: CheckIn.collection, recordId: "g1", fields: scan, status: .pending),
                OlderRecord(collection: CheckIn.collection, recordId: "g2", fields: ["event_id": "gala"], status: .synced, version: 1),
                OlderRecord(collection: CheckIn.collection, recordId: "g3", fields: [:], deleted: true, status: .pending),
                OlderRecord(collection: CheckIn.collection, recordId: "g4", fields: ["note": "no event"], status: .synced, version: 1),
            ],
            entries: [
                OlderEntry(collection: "notes", recordId: "n2", fields: ["text": "queued"], time: 1_800_000_000_001),
                OlderEntry(collection: CheckIn.collection, recordId: "g1", fields: scan, time: 1_800_000_000_002),
                OlderEntry(collection: CheckIn.collection, recordId: "g3", fields: ["event_id": "expo"], time: 1_800_000_000_003),
                OlderEntry(collection: CheckIn.collection, recordId: "g3", op: .delete, time: 1_800_000_000_004),
            ])

        // When this version opens it
        let store = try LocalStore(url: url, keys: StaticKeyProvider(key), schema: .fieldApps)

        // Then every record is kept, opens, and keeps its status and version
        #expect(try await store.records().count == 6)
        let n1 = try #require(try await store.record(collection: "notes", recordId: "n1"))
        #expect(n1.fields == ["text": "kept"])
        #expect(n1.syncStatus == .synced)
        #expect(n1.version == 3)
        #expect(n1.scope == "")
        #expect(try await store.record(collection: "notes", recordId: "n2")?.syncStatus == .pending)
        // And check-ins are in the event their fields, or their queued scans, name
        let g1 = try #require(try await store.record(collection: CheckIn.collection, scope: "gala", recordId: "g1"))
        #expect(g1.fields == scan)
        #expect(g1.syncStatus == .pending)
        #expect(try await store.record(collection: CheckIn.collection, recordId: "g1") == nil)
        let g2 = try #require(try await store.record(collection: CheckIn.collection, scope: "gala", recordId: "g2"))
        #expect(g2.syncStatus == .synced)
        #expect(g2.version == 1)
        let g3 = try #require(try await store.record(collection: CheckIn.collection, scope: "expo", recordId: "g3"))
        #expect(g3.tombstone)
        #expect(try await store.record(collection: CheckIn.collection, recordId: "g4")?.fields == ["note": "no event"])
        #expect(try await store.counts() == RecordCounts(pending: 3))
        // And the outbox is kept in order, each entry opening, the check-ins' naming their events
        let queued = try await store.outbox.nextChunk(limit: 10).map(\.mutation)
        #expect(queued.map(\.recordId) == ["n2", "g1", "g3", "g3"])
        #expect(queued.map(\.scope) == [nil, "gala", "expo", "expo"])
        #expect(queued.map(\.op) == [.upsert, .upsert, .upsert, .delete])
        #expect(queued[1].fields == scan)
        #expect(try await store.read { try LocalStore.scopesFilled($0) })

        // When the outbox is pushed
        let server = InMemoryServer()
        let engine = SyncEngine(
            store: store, transport: InMemoryTransport(server: server), configuration: SyncConfiguration(deviceId: "dev-1", deliversAfterSave: false),
            clock: TestClock<Duration>(), now: ManualNow().closure)
        let summary = try await engine.sync(retrying: false)

        // Then the answers reach the moved records
        #expect(summary.failed == 0)
        #expect(await server.applied.map(\.mutation.scope) == [nil, "gala", "expo", "expo"])
        #expect(try await store.record(collection: CheckIn.collection, scope: "gala", recordId: "g1")?.syncStatus == .synced)
        #expect(try await store.record(collection: CheckIn.collection, scope: "expo", recordId: "g3")?.syncStatus == .synced)
        #expect(try await store.counts() == RecordCounts())
    }

    @Test("a row that does not open is left unscoped, and the next opening tries again")
    func upgradeRetriesRowsThatDoNotOpen() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-scopes-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        let key = SymmetricKey(size: .bits256)
        try Self.makeOlderStore(
            at: url, key: key,
            records: [OlderRecord(collection: CheckIn.collection, recordId: "g1", fields: ["event_id": "gala"], status: .synced, version: 1)],
            entries: [])

        // Given the store opened first with another key
        do {
            let wrongKey = try LocalStore(url: url, keys: StaticKeyProvider(SymmetricKey(size: .bits256)), schema: .fieldApps)
            #expect(try await wrongKey.read { try LocalStore.scopesFilled($0) } == false)
        }

        // When it is opened with its own
        let store = try LocalStore(url: url, keys: StaticKeyProvider(key), schema: .fieldApps)

        // Then the check-in is moved into its event then
        #expect(try await store.record(collection: CheckIn.collection, scope: "gala", recordId: "g1")?.version == 1)
        #expect(try await store.read { try LocalStore.scopesFilled($0) })
    }
}
