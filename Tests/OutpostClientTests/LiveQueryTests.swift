import Foundation
import GRDB
import OutpostApps
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// Live queries: a record list, one record and the counts, updated by the store's own commits and by another
/// connection's (another process on the same file).
@Suite("Live queries")
struct LiveQueryTests {
    struct StreamEnded: Error {
        var what: String
    }

    /// The first element of `stream` that `accept` takes, waited for with a bound.
    func first<Value: Sendable>(
        _ stream: AsyncThrowingStream<Value, any Error>, _ what: String,
        where accept: @escaping @Sendable (Value) -> Bool = { _ in true }
    ) async throws -> Value {
        try await bounded(what) {
            for try await value in stream where accept(value) { return value }
            throw StreamEnded(what: what)
        }
    }

    @Test("a record list answers now, then after each of this process's commits that change it, and never twice alike")
    func ownCommits() async throws {
        try await withStore { store, _ in
            let clock = ManualClock()
            let list = store.observeRecords(collection: "notes", clock: clock)
            #expect(try await first(list, "the current list").isEmpty)

            _ = try await store.write(note("a"), deviceId: "d", at: Date(), offline: true)
            let one = try await first(list, "the list with a")
            #expect(one.map(\.recordId) == ["a"])
            #expect(one[0].syncStatus == .pending)

            // A commit that leaves the list as it was (a setting) wakes the query but yields nothing: the next
            // element is the next change.
            try await store.setSetting("theme", "dark")
            _ = try await store.write(note("b"), deviceId: "d", at: Date().addingTimeInterval(1), offline: true)
            #expect(try await first(list, "the list with b").map(\.recordId) == ["b", "a"])
        }
    }

    @Test(
        "after its first answer, a list opens only the records a commit changed: one it already holds is shown as it was opened, unread"
    )
    func opensOnlyChanged() async throws {
        try await withStore { store, url in
            let clock = ManualClock()
            for id in ["a", "b", "c"] {
                _ = try await store.write(note(id), deviceId: "d", at: Date(), offline: true)
            }
            let list = store.observeRecords(collection: "notes", clock: clock)
            #expect(try await first(list, "the three notes").count == 3)

            // Record b's sealed payload is damaged behind the store's back, its tag (and so its stamp) kept: a
            // list that opened b again would fail to.
            try await DatabaseQueue(path: url.path).write { db in
                let key = "collection = 'notes' AND record_id = 'b'"
                var payload = try #require(try Data.fetchOne(db, sql: "SELECT payload FROM records WHERE \(key)"))
                // Nonce (12 bytes) and tag (the last 16) kept, the ciphertext between zeroed.
                payload.replaceSubrange(12..<(payload.count - 16), with: Data(count: payload.count - 28))
                try db.execute(sql: "UPDATE records SET payload = ? WHERE \(key)", arguments: [payload])
            }
            await #expect(throws: ClientError.self) { try await store.records(collection: "notes") }

            // A commit that changes a: the list opens a alone, and shows b as it was opened before.
            var edit = note("a")
            edit.fields["text"] = "edited"
            _ = try await store.write(edit, deviceId: "d", at: Date().addingTimeInterval(5), offline: true)
            let after = try await first(list, "the list with a edited") { $0.first?.fields["text"] == "edited" }
            #expect(after.map(\.recordId) == ["a", "c", "b"])
            #expect(after.first { $0.recordId == "b" }?.fields["n"] == 1)
        }
    }

    @Test("a list of one collection is woken by commits that may change it: its own collection's, or any commit whose collections are not known")
    func wokenByItsCollection() async throws {
        let signal = CommitSignal()
        let notes = AsyncStream.makeStream(of: Void.self)
        let all = AsyncStream.makeStream(of: Void.self)
        _ = signal.add(notes.continuation, collection: "notes")
        _ = signal.add(all.continuation)
        signal.signal(changing: ["checkins"])
        signal.signal(changing: ["notes", "checkins"])
        signal.signal()
        notes.continuation.finish()
        all.continuation.finish()
        var wakes = (notes: 0, all: 0)
        for await _ in notes.stream { wakes.notes += 1 }
        for await _ in all.stream { wakes.all += 1 }
        #expect(wakes.notes == 2)
        #expect(wakes.all == 3)
    }

    @Test("one record and the counts follow its status")
    func recordAndCounts() async throws {
        try await withStore { store, _ in
            let clock = ManualClock()
            let record = store.observeRecord(collection: "notes", recordId: "a", clock: clock)
            let counts = store.observeCounts(clock: clock)
            #expect(try await first(record, "no record yet") == nil)
            #expect(try await first(counts, "no counts yet") == RecordCounts())
            _ = try await store.write(note("a"), deviceId: "d", at: Date(), offline: true)
            #expect(try await first(record, "record a")?.syncStatus == .pending)
            #expect(try await first(counts, "one pending") == RecordCounts(pending: 1))
        }
    }

    @Test("a commit by another connection to the file reaches the query within one check of its clock")
    func otherConnection() async throws {
        try await withStore { store, url in
            let clock = ManualClock()
            var sleeps = clock.sleeps.makeAsyncIterator()
            let list = store.observeRecords(collection: "notes", clock: clock)
            #expect(try await first(list, "the current list").isEmpty)
            // The query's check of other connections waits on the clock.
            _ = await sleeps.next()

            let other = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            _ = try await other.write(note("x"), deviceId: "d", at: Date(), offline: true)
            clock.advance(by: .seconds(1))
            #expect(try await first(list, "the other connection's record").map(\.recordId) == ["x"])
        }
    }

    @Test("a query that throws ends its sequence with the error")
    func queryError() async throws {
        try await withStore { store, _ in
            struct Broken: Error {}
            let failing = store.observe(clock: ManualClock()) { _ -> Int in throw Broken() }
            await #expect(throws: Broken.self) {
                for try await _ in failing {}
            }
        }
    }
}
