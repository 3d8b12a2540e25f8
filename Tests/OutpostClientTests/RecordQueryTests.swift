import Clocks
import Foundation
import OutpostApps
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@testable import OutpostClient

/// Typed queries: a collection's records decoded as its `Codable` type, narrowed by sync state and scope, in
/// order, limited, and kept current.
@Suite("Record queries")
struct RecordQueryTests {
    static func activity(_ id: String, day: Int, notes: String? = nil) -> LocalStore.Write {
        var fields: [String: JSONValue] = ["type": "visit", "date": .string("2026-11-\(day)"), "duration_minutes": 30]
        if let notes { fields["notes"] = .string(notes) }
        return LocalStore.Write(collection: Activity.collection, recordId: id, fields: fields)
    }

    @Test("a typed query decodes each record as the collection's type, filtered by sync state, in order, limited; deleted records are left out")
    func typedQuery() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer(rejecting: {
                $0.fields["notes"] == "refuse" ? .init(code: .invalidFields, message: "not today") : nil
            })
            let transport = InMemoryTransport(server: server)
            let now = ManualNow()
            let engine = SyncEngine(
                store: store, transport: transport,
                configuration: .init(deviceId: "d", retryDelays: [], deliversAfterSave: false), clock: TestClock<Duration>(),
                now: now.closure)
            for (id, day, notes) in [("a1", 20, nil), ("a2", 21, nil), ("a3", 22, "refuse")] as [(String, Int, String?)] {
                try await engine.save(Self.activity(id, day: day, notes: notes))
                now.advance(seconds: 60)
            }
            _ = try await engine.sync()
            transport.isOnline = false
            try await engine.save(Self.activity("a4", day: 23))
            now.advance(seconds: 60)
            try await engine.save(Self.activity("a5", day: 24))
            now.advance(seconds: 60)
            try await engine.save(LocalStore.Write(collection: Activity.collection, recordId: "a5", op: .delete, fields: [:]))

            let all = try await store.records(RecordQuery.activities.order(.oldestFirst))
            #expect(all.map(\.recordId) == ["a1", "a2", "a3", "a4"])
            #expect(all.map(\.syncStatus) == [.synced, .synced, .refused, .pending])
            #expect(all[0].fields == Activity.Record(type: "visit", date: CalendarDay("2026-11-20")!, durationMinutes: 30))
            #expect(all[2].fields.notes == "refuse" && all[2].badge.symbol == "⛔ refused")

            let waiting = try await store.records(RecordQuery.activities.filter(.pending, .refused).order(.newestFirst))
            #expect(waiting.map(\.recordId) == ["a4", "a3"])
            #expect(try await store.records(RecordQuery.activities.order(.newestFirst).limit(2)).map(\.recordId) == ["a4", "a3"])
            #expect(try await store.records(RecordQuery.activities.filter(.failed)).isEmpty)

            // An untyped collection reads as JSON; a record that does not decode is named.
            _ = try await store.write(note("n1", ["title": "hello"]), deviceId: "d", at: Date(), offline: false)
            let notes = try await store.records(RecordQuery<[String: JSONValue]>(collection: "notes"))
            #expect(notes.map(\.fields) == [["title": "hello"]])
            let wrong = await #expect(throws: ClientError.self) {
                try await store.records(RecordQuery<Activity.Record>(collection: "notes"))
            }
            #expect(wrong?.message.hasPrefix("notes/n1 does not decode as Record") == true, "\(String(describing: wrong))")
        }
    }

    /// A note's fields, counting every decoding.
    struct Counted: Decodable, Sendable, Equatable {
        nonisolated(unsafe) static var decodings = 0
        static let lock = NSLock()
        var n: Int

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            n = try container.decode(Int.self, forKey: .n)
            Self.lock.withLock { Self.decodings += 1 }
        }

        static var count: Int { lock.withLock { decodings } }
        enum CodingKeys: String, CodingKey { case n }
    }

    @Test("a live typed list answers at once, decodes only the records a commit changed, and ignores commits elsewhere")
    func liveTypedList() async throws {
        try await withStore { store, _ in
            let start = Date()
            for i in 0..<5 {
                _ = try await store.write(note("n\(i)", ["n": .integer(Int64(i))]), deviceId: "d", at: start, offline: true)
            }
            let list = store.observe(
                RecordQuery<Counted>(collection: "notes").order(.oldestFirst), clock: TestClock<Duration>())
            let first = try await LiveQueryTests().first(list, "the first list")
            #expect(first.map(\.fields.n) == [0, 1, 2, 3, 4])
            let decoded = Counted.count

            // A commit elsewhere, then one that changes n2: the next list comes with n2 alone decoded again.
            _ = try await store.write(
                LocalStore.Write(collection: Activity.collection, recordId: "a", fields: ["type": "call"]), deviceId: "d",
                at: start, offline: true)
            _ = try await store.write(note("n2", ["n": 20]), deviceId: "d", at: start.addingTimeInterval(1), offline: true)
            let next = try await LiveQueryTests().first(list, "the next list")
            #expect(next.map(\.fields.n) == [0, 1, 20, 3, 4])
            #expect(Counted.count - decoded == 1)
        }
    }

    @Test("a live query's first list is read before it returns: it is there even when the store closes at once")
    func firstListAtOnce() async throws {
        try await withStore { store, _ in
            for id in ["a1", "a2"] {
                try await store.write(Self.activity(id, day: 20), deviceId: "d", at: Date(), offline: false)
            }
            let query = RecordQuery<Activity.Record>(collection: Activity.collection).order(.oldestFirst)
            // Many lists, so that a first read left to a task after the return would meet the closed store.
            let typed = (0..<10).map { _ in store.observe(query) }
            let records = store.observeRecords(collection: Activity.collection)
            try await store.close()
            for list in typed {
                var lists = list.makeAsyncIterator()
                #expect(try await lists.next()?.map(\.recordId) == ["a1", "a2"])
            }
            var recordLists = records.makeAsyncIterator()
            #expect(try await recordLists.next()?.map(\.recordId).sorted() == ["a1", "a2"])
        }
    }
}
