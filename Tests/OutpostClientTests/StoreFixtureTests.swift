import Foundation
import OutpostApps
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// Device stores written by a released build, opened by this one.
///
/// `Fixtures/StoreV11` is the store (schema `v11-record-tombstones`) and its key file that the release build of
/// 200a2bb wrote through the CLI, as a door device of user `sam` at event `gala` (a roster of 20 generated
/// guests):
/// `event open gala`; `event scan g000001` online; `g000002` cancelled upstream, scanned, refused and
/// discarded; the server stopped; `event scan g000003`; `attendance check-in`; `activity register` with a
/// travel expense; `device put notes n1 title=hello`; then `PRAGMA wal_checkpoint(TRUNCATE)`. A change to
/// the store's schema or sealing must keep it readable, and keep its queue going out as it was.
@Suite("Stores of released builds")
struct StoreFixtureTests {
    /// A copy of a fixture's store in a folder of its own, removed after `body`.
    func withFixture<T>(_ name: String, _ body: (URL) async throws -> T) async throws -> T {
        let source = try #require(Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-fixture-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.copyItem(at: source, to: directory)
        return try await body(directory.appendingPathComponent("device.sqlite"))
    }

    @Test(
        "a store the previous release wrote opens with its records, queue, discarded copy, settings and roster, and delivers its queue in order under its keys"
    )
    func previousRelease() async throws {
        try await withFixture("StoreV11") { url in
            let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            #expect(try await store.setting(Device.SettingName.deviceId) == "door-fixture")
            #expect(try await store.outbox.discardedCount() == 1)

            // Every record unseals, in its scope, with its state.
            let records = try await store.records()
            #expect(records.count == 5)
            let byPath = Dictionary(uniqueKeysWithValues: records.map { ("\($0.collection)/\($0.scope)/\($0.recordId)", $0) })
            #expect(byPath["checkins/gala/g000001"]?.syncStatus == .synced)
            #expect(byPath["checkins/gala/g000001"]?.fields["scanned_by"] == "door-fixture")
            #expect(byPath["checkins/gala/g000003"]?.syncStatus == .pending)
            #expect(byPath["checkins/gala/g000003"]?.isOfflineEntry == true)
            #expect(byPath["checkins/gala/g000002"] == nil)
            #expect(byPath["notes//n1"]?.fields["title"] == "hello")
            let activity = try #require(records.first { $0.collection == "activities" })
            #expect(activity.fields["notes"] == "Visited Mrs Okafor" && activity.fields["duration_minutes"] == 30)
            let attendance = try #require(records.first { $0.collection == "attendance" })
            #expect(attendance.recordId.hasPrefix("att-") && attendance.fields["user_id"] == "sam")
            #expect(try await store.counts() == RecordCounts(pending: 4, failed: 0, refused: 0))

            // The roster is searched offline as before.
            let reference = ReferenceData(store: store, transport: InMemoryTransport(server: InMemoryServer()))
            let found = try await reference.search(collection: "guests", scope: "gala", query: "Dmitri")
            #expect(found.map(\.recordId) == ["g000003"])
            #expect(try await reference.search(collection: "guests", scope: "gala", query: "ben.1@example.org").map(\.recordId) == ["g000001"])

            // The queue goes out in the order it was written, each mutation under the key it was written
            // with, so that a resend of one the server already took is a duplicate.
            let queued = try await store.outbox.nextChunk(limit: 50).map(\.mutation)
            #expect(queued.map(\.collection) == ["checkins", "attendance", "activities", "notes"])
            #expect(queued.allSatisfy { $0.idempotencyKey.hasPrefix("door-fixture:") })
            let server = InMemoryServer()
            let engine = SyncEngine(
                store: store, transport: InMemoryTransport(server: server),
                configuration: SyncConfiguration(deviceId: "door-fixture", retryDelays: []))
            let summary = try await engine.sync()
            #expect(summary.synced == 4 && summary.isComplete, "\(summary)")
            #expect(await server.applied.map(\.mutation.idempotencyKey) == queued.map(\.idempotencyKey))
            #expect(try await store.counts() == RecordCounts(pending: 0, failed: 0, refused: 0))
        }
    }
}
