import OutpostProtocol
import Testing

@testable import OutpostServer

@Suite("Conflict policy (pure)")
struct RecordMergeTests {
    let notes = CollectionPolicy(name: "notes")
    let activities = CollectionPolicy(name: "activities", protectedFields: ["travel_expense", "amount"])

    func apply(_ mutations: [Mutation], policy: CollectionPolicy, devices: [String]? = nil) -> StoredRecord? {
        var record: StoredRecord?
        for (index, mutation) in mutations.enumerated() {
            let device = devices?[index] ?? "dev-a"
            record = RecordMerge.apply(mutation, deviceId: device, to: record, policy: policy).record
        }
        return record
    }

    @Test("a late mutation never overwrites a newer value of the same field")
    func lateArrival() throws {
        // Given a newer write applied first, when an older write to the same field arrives late,
        let newer = Fixtures.upsert("r1", ["status": "checked_out", "note": "n"], at: 20)
        let older = Fixtures.upsert("r1", ["status": "checked_in", "room": "4"], at: 10)
        let record = try #require(apply([newer, older], policy: notes))
        // then the newer value stays and only the field the newer write did not touch is taken.
        #expect(record.fields["status"] == "checked_out")
        #expect(record.fields["room"] == "4")
        #expect(record.fields["note"] == "n")
    }

    @Test("the outcome does not depend on arrival order, ties included")
    func orderIndependent() throws {
        let a = Fixtures.upsert("r1", ["x": "from-a", "y": "a"], at: 10, device: "dev-a")
        let b = Fixtures.upsert("r1", ["x": "from-b"], at: 10, device: "dev-b")
        let c = Fixtures.upsert("r1", ["y": "c"], at: 5, device: "dev-c")
        let orders: [[Int]] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
        let all = [a, b, c]
        let devices = ["dev-a", "dev-b", "dev-c"]
        var outcomes = Set<[String: JSONValue]>()
        for order in orders {
            let record = try #require(apply(order.map { all[$0] }, policy: notes, devices: order.map { devices[$0] }))
            outcomes.insert(record.fields)
        }
        #expect(outcomes.count == 1)
        // The tie at t=10 goes to the greater device id.
        #expect(outcomes.first?["x"] == "from-b")
        #expect(outcomes.first?["y"] == "a")
    }

    @Test("a protected field changes only on a fresh base, and the rest of the mutation still applies")
    func protectedField() throws {
        let create = Fixtures.upsert("a1", ["travel_expense": 1200, "notes": "bus"], at: 0, collection: "activities")
        var outcome = RecordMerge.apply(create, deviceId: "dev-a", to: nil, policy: activities)
        #expect(outcome.conflict == nil)
        #expect(outcome.record.version == 1)
        // Device B edits from version 1: applied.
        let fresh = Fixtures.upsert(
            "a1", ["travel_expense": 1500], at: 10, collection: "activities", device: "dev-b", base: 1)
        outcome = RecordMerge.apply(fresh, deviceId: "dev-b", to: outcome.record, policy: activities)
        #expect(outcome.conflict == nil)
        #expect(outcome.record.fields["travel_expense"] == 1500)
        #expect(outcome.record.version == 2)
        // Device A, still on version 1 and with a LATER clock, edits both: the money is not applied.
        let stale = Fixtures.upsert(
            "a1", ["travel_expense": 999, "notes": "train"], at: 20, collection: "activities", base: 1)
        outcome = RecordMerge.apply(stale, deviceId: "dev-a", to: outcome.record, policy: activities)
        let conflict = try #require(outcome.conflict)
        #expect(conflict.attempted == ["travel_expense": 999])
        #expect(conflict.serverFields == ["travel_expense": 1500])
        #expect(conflict.serverVersion == 2)
        #expect(outcome.record.fields["travel_expense"] == 1500)
        #expect(outcome.record.fields["notes"] == "train")
    }

    @Test("a protected field with no base version conflicts once it holds a value")
    func protectedWithoutBase() {
        let create = Fixtures.upsert("a1", ["amount": 10], at: 0, collection: "activities")
        let first = RecordMerge.apply(create, deviceId: "dev-a", to: nil, policy: activities)
        let again = Fixtures.upsert("a1", ["amount": 20], at: 5, collection: "activities")
        let second = RecordMerge.apply(again, deviceId: "dev-a", to: first.record, policy: activities)
        #expect(second.conflict != nil)
        #expect(second.record.fields["amount"] == 10)
    }

    @Test("a delete tombstones the record, and older writes cannot resurrect it")
    func deleteFloor() throws {
        let record = try #require(
            apply(
                [
                    Fixtures.upsert("r1", ["a": 1], at: 0),
                    Fixtures.delete("r1", at: 10),
                    Fixtures.upsert("r1", ["a": 2], at: 5),
                ], policy: notes))
        #expect(record.tombstone)
        #expect(record.fields.isEmpty)
        #expect(record.change.tombstone)
    }

    @Test("a write after a delete brings the record back")
    func resurrect() throws {
        let record = try #require(
            apply(
                [
                    Fixtures.upsert("r1", ["a": 1, "b": 1], at: 0),
                    Fixtures.delete("r1", at: 10),
                    Fixtures.upsert("r1", ["a": 3], at: 20),
                ], policy: notes))
        #expect(!record.tombstone)
        #expect(record.fields == ["a": 3])
        #expect(record.version == 3)
    }

    @Test("a late delete removes only the fields older than it")
    func lateDelete() throws {
        let record = try #require(
            apply(
                [
                    Fixtures.upsert("r1", ["a": 1], at: 0),
                    Fixtures.upsert("r1", ["b": 2], at: 20),
                    Fixtures.delete("r1", at: 10),
                ], policy: notes))
        #expect(!record.tombstone)
        #expect(record.fields == ["b": 2])
    }

    @Test("a write that changes nothing leaves the version alone")
    func noChange() throws {
        let created = RecordMerge.apply(Fixtures.upsert("r1", ["b": 1], at: 0), deviceId: "dev-a", to: nil, policy: notes)
        let first = RecordMerge.apply(
            Fixtures.upsert("r1", ["a": 1], at: 10), deviceId: "dev-a", to: created.record, policy: notes)
        let second = RecordMerge.apply(
            Fixtures.upsert("r1", ["a": 0], at: 5), deviceId: "dev-a", to: first.record, policy: notes)
        #expect(!second.changed)
        #expect(second.record.version == 2)
    }

    @Test("a new record takes the mutation's scope and its writer as owner; a change keeps both")
    func scopeAndOwner() {
        let guests = CollectionPolicy(name: "guests", kind: .reference, scopeField: "event_id")
        // Given a mutation whose scope the server resolved from its scope field
        let created = RecordMerge.apply(
            Fixtures.upsert("g1", ["event_id": "ev-1", "name": "A"], collection: "guests", scope: "ev-1"),
            deviceId: "d", owner: "olga", to: nil, policy: guests)
        #expect(created.record.scope == "ev-1" && created.record.owner == "olga")
        // When another user changes it, it stays in its scope and keeps its owner
        let changed = RecordMerge.apply(
            Fixtures.upsert("g1", ["name": "B"], at: 5, collection: "guests", scope: "ev-1"),
            deviceId: "d2", owner: "otto", to: created.record, policy: guests)
        #expect(changed.record.scope == "ev-1" && changed.record.owner == "olga" && changed.changed)
    }

    @Test("a mutation's scope is its scope member or its scope field; a mismatch, or none, is refused")
    func scopeResolution() throws {
        let guests = CollectionPolicy(name: "guests", kind: .reference, scopeField: "event_id")
        let notes = CollectionPolicy(name: "notes")
        func scope(_ mutation: Mutation, _ policy: CollectionPolicy) -> String? { try? policy.scope(of: mutation).get() }
        #expect(scope(Fixtures.upsert("g1", ["event_id": "A"], collection: "guests"), guests) == "A")
        #expect(scope(Fixtures.upsert("g1", ["name": "x"], collection: "guests", scope: "A"), guests) == "A")
        #expect(scope(Fixtures.delete("g1", collection: "guests", scope: "B"), guests) == "B")
        #expect(scope(Fixtures.upsert("g1", ["event_id": "A"], collection: "guests", scope: "B"), guests) == nil)
        #expect(scope(Fixtures.delete("g1", collection: "guests"), guests) == nil)
        #expect(scope(Fixtures.upsert("g1", ["event_id": "a b"], collection: "guests"), guests) == nil)
        #expect(scope(Fixtures.upsert("n1", ["t": "x"]), notes) == "")
        #expect(scope(Fixtures.upsert("n1", ["t": "x"], scope: "A"), notes) == nil)
    }

    @Test("a record a relay withdrew is written afresh: its first write's time, not the withdrawn one's; a deleted one is not")
    func withdrawnIsNew() throws {
        let checkIns = CollectionPolicy(name: "checkins", merge: .firstWriteWins)
        let first = RecordMerge.apply(Fixtures.upsert("g1", ["by": "door-1"], at: 10), deviceId: "door-1", to: nil, policy: checkIns)
        var withdrawn = first.record
        withdrawn.version = 2
        withdrawn.tombstone = true
        withdrawn.fields = [:]
        withdrawn.meta = StoredRecord.Meta()
        let again = RecordMerge.apply(
            Fixtures.upsert("g1", ["by": "door-2"], at: 20, device: "door-2"), deviceId: "door-2", to: withdrawn, policy: checkIns)
        #expect(again.changed && !again.superseded && !again.record.tombstone)
        #expect(again.record.fields == ["by": "door-2"] && again.record.version == 3)
        #expect(again.record.createdAt == Fixtures.time(20).millisecondsSince1970)
        // A record deleted by a write keeps its history: a later write does not move its creation time.
        let deleted = RecordMerge.apply(Fixtures.delete("g1", at: 15), deviceId: "door-1", to: first.record, policy: notes)
        #expect(deleted.record.tombstone && deleted.record.meta.deletion != nil)
        let revived = RecordMerge.apply(
            Fixtures.upsert("g1", ["by": "door-2"], at: 20, device: "door-2"), deviceId: "door-2", to: deleted.record, policy: notes)
        #expect(revived.record.createdAt == Fixtures.time(10).millisecondsSince1970)
    }
}
