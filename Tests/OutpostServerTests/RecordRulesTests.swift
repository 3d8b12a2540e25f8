import Foundation
import HummingbirdTesting
import OutpostProtocol
import OutpostRecords
import Testing

@testable import OutpostServer

/// The field apps' rules, enforced by the server for every client. Each test runs on SQLite and PostgreSQL,
/// over HTTP through the real router: the rules read stored records that each engine loads.
@Suite("Record rules")
struct RecordRulesTests {
    /// A whole attendance record of `user` on the fixtures' day.
    static func attendance(
        _ action: Attendance.Action, user: String = "ana", at seconds: Double, fields extra: [String: JSONValue] = [:],
        day: String = "2026-11-21"
    ) -> Mutation {
        var fields: [String: JSONValue] = [
            "action": .string(action.rawValue), "day": .string(day), "latitude": 51.5, "longitude": -0.12,
        ]
        fields.merge(extra) { $1 }
        return Fixtures.upsert(
            "\(user).\(day).\(action.idSuffix)", fields, at: seconds, collection: Attendance.collection)
    }

    @Test(
        "attendance: coordinates required, own records only, one check-in a day (the first made), check-out after check-in, never deleted",
        arguments: StorageKind.allCases)
    func attendanceRules(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token(user: "ana")

            // Without coordinates, or outside the Earth, nothing is written.
            let noFix = Self.attendance(.checkIn, at: 1, fields: ["latitude": .null])
            var results = try await client.push([noFix], token: ana).results
            #expect(results[0].error?.code == .invalidFields)
            var missing = Self.attendance(.checkIn, at: 1)
            missing.fields["longitude"] = nil
            results = try await client.push([missing, Self.attendance(.checkIn, at: 1, fields: ["latitude": 91])], token: ana).results
            #expect(results.map(\.error?.code) == [.invalidFields, .invalidFields])

            // A check-out first is refused; someone else's id is refused; a day far from the action is refused.
            results = try await client.push([Self.attendance(.checkOut, at: 2)], token: ana).results
            #expect(results[0].error?.code == .stateConflict)
            results = try await client.push([Self.attendance(.checkIn, user: "ben", at: 2)], token: ana).results
            #expect(results[0].error?.code == .forbidden)
            results = try await client.push([Self.attendance(.checkIn, at: 2, day: "2026-11-25")], token: ana).results
            #expect(results[0].error?.code == .invalidFields)

            // Check in (created offline), then out in a later push: the check-in is read from storage.
            let checkIn = Self.attendance(.checkIn, at: 3, fields: ["isOfflineEntry": true])
            results = try await client.push([checkIn], token: ana).results
            #expect(results[0].status == .applied)
            results = try await client.push([Self.attendance(.checkOut, at: 4)], token: ana).results
            #expect(results[0].status == .applied)

            // A second check-in that day, from another device of hers, is the same record: the first by device
            // time stays, and the later write is answered superseded with the record kept, not refused. The
            // first sent again is a duplicate; nothing is deleted.
            results = try await client.push(
                [
                    Self.attendance(.checkIn, at: 5, fields: ["latitude": 40]), checkIn,
                    Fixtures.delete("ana.2026-11-21.in", at: 6, collection: Attendance.collection),
                ],
                token: ana, device: "tablet-ana"
            ).results
            #expect(results.map(\.status) == [.superseded, .duplicate, .rejected])
            #expect(results[0].serverFields?["latitude"] == 51.5)
            #expect(results[0].serverFields?["isOfflineEntry"] == true)
            #expect(results[0].serverCreatedAt == Fixtures.time(3))
            #expect(results[2].error?.code == .stateConflict)

            // The server keeps the offline flag and reports it, under ids that name no one.
            try await storage.settle()
            var pulled = try await client.pull("collection=attendance", token: ana)
            let key = try await Self.attendanceKey(client, token: ana)
            let day = try #require(CalendarDay("2026-11-21"))
            #expect(
                pulled.changes.map(\.recordId)
                    == [.checkIn, .checkOut].map { Attendance.recordId(key: key, day: day, action: $0) })
            #expect(pulled.changes[0].fields["isOfflineEntry"] == true)
            #expect(pulled.changes[0].createdAt == Fixtures.time(3))

            // A check-in made earlier that arrives later takes the record's place whole: the day's check-in is
            // the first one made.
            results = try await client.push([Self.attendance(.checkIn, at: 2.5, fields: ["latitude": 45])], token: ana).results
            #expect(results.map(\.status) == [.applied])
            try await storage.settle()
            pulled = try await client.pull("collection=attendance", token: ana)
            let kept = try #require(pulled.changes.first { $0.recordId == Attendance.recordId(key: key, day: day, action: .checkIn) })
            #expect(kept.createdAt == Fixtures.time(2.5) && kept.fields["latitude"] == 45 && kept.fields["isOfflineEntry"] == nil)
        }
    }

    /// The key `GET /v1/record-id-key` gives the bearer of `token`.
    static func attendanceKey(_ client: some TestClientProtocol, token: String) async throws -> Attendance.IdKey {
        let response = try await client.send(.get, "/v1/record-id-key", token: token)
        #expect(response.status == .ok)
        #expect(response.headers[.cacheControl] == "no-store")
        let keys = try JSONDecoder().decode(RecordIdKeyResponse.self, from: response.body)
        return try #require(Attendance.IdKey(hex: keys.attendance))
    }

    @Test(
        "attendance ids name no one: each user has a key of their own; a provisional id is stored as the derived one, either form sent again is a duplicate, a derived id under another key is refused",
        arguments: StorageKind.allCases)
    func attendanceIds(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token(user: "ana")
            let ben = try await Fixtures.token(user: "ben")
            let anaKey = try await Self.attendanceKey(client, token: ana)
            let benKey = try await Self.attendanceKey(client, token: ben)
            #expect(anaKey != benKey)
            #expect(try await Self.attendanceKey(client, token: try await Fixtures.token(user: "ana", name: "Ana B")) == anaKey)
            #expect(try await Self.attendanceKey(client, token: try await Fixtures.token(tenant: "globex", user: "ana")) != anaKey)
            #expect(try await client.send(.get, "/v1/record-id-key", token: nil).status == .unauthorized)

            let day = try #require(CalendarDay("2026-11-21"))
            // A device without its key sends the provisional id; one holding it, the derived id.
            let provisional = Self.attendance(.checkIn, at: 1)
            var derived = Self.attendance(.checkOut, at: 2)
            derived.recordId = Attendance.recordId(key: anaKey, day: day, action: .checkOut)
            var results = try await client.push([provisional, derived], token: ana).results
            #expect(results.map(\.status) == [.applied, .applied])

            // The provisional one renamed by its device and sent again, and the derived one sent as provisional
            // (a device whose store predates the key), are duplicates, not reused keys.
            var renamed = provisional
            renamed.recordId = Attendance.recordId(key: anaKey, day: day, action: .checkIn)
            var unrenamed = derived
            unrenamed.recordId = "ana.2026-11-21.out"
            results = try await client.push([renamed, unrenamed, provisional, derived], token: ana).results
            #expect(results.map(\.status) == [.duplicate, .duplicate, .duplicate, .duplicate])

            // Another user's key, or another day's id, is not hers to write: refused, nothing stored.
            var foreign = Self.attendance(.checkIn, at: 3, day: "2026-11-22")
            foreign.recordId = Attendance.recordId(key: benKey, day: try #require(CalendarDay("2026-11-22")), action: .checkIn)
            var shifted = Self.attendance(.checkIn, at: 4, day: "2026-11-22")
            shifted.recordId = Attendance.recordId(key: anaKey, day: day, action: .checkIn)
            var malformed = Self.attendance(.checkIn, at: 5, day: "2026-11-22")
            malformed.recordId = "att-XYZ"
            var forged = Self.attendance(.checkIn, at: 6, fields: ["user_id": "ben"], day: "2026-11-22")
            forged.recordId = Attendance.recordId(key: anaKey, day: try #require(CalendarDay("2026-11-22")), action: .checkIn)
            results = try await client.push([foreign, shifted, malformed, forged], token: ana).results
            #expect(results.map(\.error?.code) == [.invalidRecordId, .invalidRecordId, .invalidFields, .forbidden])

            // An edit of a stored record's fields is told that attendance is written once, whoever sends it.
            var edit = Fixtures.upsert(
                Attendance.recordId(key: anaKey, day: day, action: .checkIn), ["latitude": 1.5], at: 7,
                collection: Attendance.collection)
            edit.baseVersion = 1
            for (token, device) in [(ana, "phone-ana"), (ben, "phone-ben")] {
                edit.idempotencyKey += "-again"
                let refused = try await client.push([edit], token: token, device: device).results
                #expect(refused.map(\.error?.code) == [.invalidFields])
                #expect(refused.first?.error?.message.hasPrefix("attendance records are written once") == true)
            }

            // Another user writing to her stored record is answered as for an id that names nothing stored: the
            // answer does not tell whether the id exists.
            var intruding = Self.attendance(.checkIn, user: "ben", at: 8)
            intruding.recordId = Attendance.recordId(key: anaKey, day: day, action: .checkIn)
            var madeUp = Self.attendance(.checkIn, user: "ben", at: 9)
            madeUp.recordId = "att-" + String(repeating: "0", count: 32)
            let intrusions = try await client.push([intruding, madeUp], token: ben, device: "phone-ben").results
            #expect(intrusions.map(\.error?.code) == [.invalidRecordId, .invalidRecordId])
            #expect(intrusions[0].error?.message == intrusions[1].error?.message)

            // A refused record its device still knows by the provisional id is reported under the derived one.
            let refusal = SyncFailure(
                collection: Attendance.collection, recordId: "ana.2026-11-22.in", firstAttempt: Fixtures.time(-60),
                lastError: "Refused: not checked in", kind: .rejected)
            let report = SyncFailureReport(deviceId: "phone-1", failures: [refusal])
            #expect(try await client.post("/v1/sync-failures", report, token: ana).status == .ok)
            #expect(
                try await storage.syncFailures(tenant: "acme").map(\.recordId)
                    == [Attendance.recordId(key: anaKey, day: try #require(CalendarDay("2026-11-22")), action: .checkIn)])

            try await storage.settle()
            let stored = try await client.pull("collection=attendance", token: try await Fixtures.token(user: "olga", role: .organizer))
            #expect(
                Set(stored.changes.map(\.recordId))
                    == Set([.checkIn, .checkOut].map { Attendance.recordId(key: anaKey, day: day, action: $0) }))
            #expect(stored.changes.allSatisfy { !$0.recordId.contains("ana") })
            // The record says whose it is, filled in for a device that left it out.
            #expect(stored.changes.allSatisfy { $0.fields["user_id"] == "ana" })
        }
    }

    @Test("attendance records stored under provisional ids still count: no second check-in, and the check-out finds its check-in")
    func provisionallyStored() throws {
        let key = try #require(Attendance.IdKey(bytes: Array(repeating: 7, count: 32)))
        var context = Fixtures.context()
        context.attendanceKey = key
        let stored = StoredRecord(
            collection: Attendance.collection, recordId: "ana.2026-11-21.in", scope: "", owner: "ana", version: 1,
            tombstone: false, fields: Self.attendance(.checkIn, at: 1).fields, meta: .init(), createdAt: 1000,
            updatedAt: 1000)
        let day = try #require(CalendarDay("2026-11-21"))
        // Items as validation leaves them: under derived ids, naming their user.
        var checkIn = Self.attendance(.checkIn, at: 2, fields: ["user_id": "ana"])
        checkIn.recordId = Attendance.recordId(key: key, day: day, action: .checkIn)
        var checkOut = Self.attendance(.checkOut, at: 3, fields: ["user_id": "ana"])
        checkOut.recordId = Attendance.recordId(key: key, day: day, action: .checkOut)
        let items = Fixtures.items([checkIn, checkOut])
        let keys = PushPlanner.recordKeys(of: items, context: context)
        #expect(keys.contains(RecordKey(collection: Attendance.collection, recordId: "ana.2026-11-21.in")))
        let plan = PushPlanner.plan(
            items, context: context, processed: [:], records: [stored.key: stored], collections: .standard)
        #expect(plan.results.map(\.status) == [.rejected, .applied])
        #expect(plan.results[0].error?.message == "already checked in on 2026-11-21")
        // Without the stored one, the check-out alone has no check-in to follow.
        let alone = PushPlanner.plan(
            Fixtures.items([checkOut]), context: context, processed: [:], records: [:], collections: .standard)
        #expect(alone.results[0].error?.code == .stateConflict)
    }

    @Test("attendance: a check-in and its check-out in one push both apply", arguments: StorageKind.allCases)
    func attendanceInOnePush(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let results = try await client.push(
                [Self.attendance(.checkIn, at: 1), Self.attendance(.checkOut, at: 2)], token: try await Fixtures.token()
            )
            .results
            #expect(results.map(\.status) == [.applied, .applied])
        }
    }

    static func scan(_ guest: String, event: String = "gala", device: String = "dev-a", at seconds: Double) -> Mutation {
        let time = Fixtures.time(seconds)
        return Fixtures.upsert(
            guest,
            [
                "event_id": .string(event), "guest_id": .string(guest), "scanned_by": .string(device),
                "scanned_at": .string(time.iso8601),
            ],
            at: seconds, collection: CheckIn.collection, device: device)
    }

    @Test(
        "check-ins: the guest must be on the event's roster and not cancelled; the first scan by device time wins; the audit keeps scan times",
        arguments: StorageKind.allCases)
    func checkInRules(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let staff = try await Fixtures.token()
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let roster = ["g1", "g2", "g3"].map { id in
                Fixtures.upsert(
                    id, ["name": .string("Guest \(id)"), "event_id": "gala", "status": "registered"],
                    collection: Guest.collection, device: "admin")
            }
            _ = try await client.push(
                roster + [Fixtures.delete("g3", at: 1, collection: Guest.collection, device: "admin", scope: "gala")],
                token: organizer, device: "admin")

            var results = try await client.push(
                [Self.scan("g9", at: 10), Self.scan("g3", at: 10), Self.scan("g1", event: "other", at: 10)], token: staff
            ).results
            #expect(results.map(\.error?.code) == [.unknownGuest, .guestCancelled, .unknownGuest])

            // A scan must say which device scanned, and when.
            var forged = Self.scan("g1", device: "dev-z", at: 10)
            results = try await client.push([forged], token: staff).results
            #expect(results[0].error?.code == .invalidFields)
            forged = Self.scan("g1", at: 10)
            forged.fields["scanned_at"] = .string(Fixtures.time(99).iso8601)
            results = try await client.push([forged], token: staff).results
            #expect(results[0].error?.code == .invalidFields)

            // dev-b scans g1 at 30 and pushes first; dev-a scanned it at 20 offline and replays later: dev-a's
            // scan is the first. A third scan at 40 changes nothing: its answer says so, with the scan kept.
            _ = try await client.push([Self.scan("g1", device: "dev-b", at: 30)], token: staff, device: "dev-b")
            #expect(try await client.push([Self.scan("g1", at: 20)], token: staff).results[0].status == .applied)
            let late = Self.scan("g1", device: "dev-c", at: 40)
            results = try await client.push([late], token: staff, device: "dev-c").results
            #expect(results[0].status == .superseded)
            #expect(results[0].version == 2)
            #expect(results[0].serverFields?["scanned_by"] == "dev-a")
            #expect(results[0].serverFields?["scanned_at"] == .string(Fixtures.time(20).iso8601))
            // Sent again (its answer lost), it is a duplicate of that, with the record the server keeps.
            let again = try await client.push([late], token: staff, device: "dev-c").results
            #expect(again[0].status == .duplicate && again[0].originalStatus == .superseded && again[0].version == 2)
            #expect(again[0].serverFields?["scanned_by"] == "dev-a")
            // A device of a build before the status reads both answers as it did then: applied, no fields.
            let older = try await client.push([late], token: staff, device: "dev-c", features: nil).results
            #expect(older[0].status == .duplicate && older[0].originalStatus == .applied && older[0].serverFields == nil)
            // Feature names are read in any case, parameters passed over.
            let named = try await client.push([late], token: staff, device: "dev-c", features: "Superseded;q=1").results
            #expect(named[0].originalStatus == .superseded)
            let olderScan = try await client.push([Self.scan("g1", device: "dev-d", at: 50)], token: staff, device: "dev-d", features: nil)
            #expect(olderScan.results[0].status == .applied && olderScan.results[0].version == 2)
            #expect(olderScan.results[0].serverFields == nil)
            try await storage.settle()
            let pulled = try await client.pull("collection=checkins&scope=gala", token: staff)
            #expect(pulled.changes.count == 1)
            #expect(pulled.changes[0].fields["scanned_by"] == "dev-a")
            #expect(pulled.changes[0].createdAt == Fixtures.time(20))

            // The audit lists every scan at the device's scan time, never the time of replay.
            let response = try await client.send(.get, "/v1/audit?collection=checkins&recordId=g1", token: organizer)
            let entries = try JSONDecoder().decode(AuditResponse.self, from: response.body).entries
            #expect(
                Set(entries.map(\.clientTimestamp)) == [Fixtures.time(20), Fixtures.time(30), Fixtures.time(40), Fixtures.time(50)])
            #expect(entries.allSatisfy { $0.receivedAt == Fixtures.serverNow })
        }
    }

    @Test(
        "activities and builds: a new record needs its required fields; money is a decimal string; edits are partial",
        arguments: StorageKind.allCases)
    func activityAndBuildRules(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let staff = try await Fixtures.token()
            let activity: [String: JSONValue] = ["type": "visit", "date": "2026-11-20", "duration_minutes": 90]
            let results = try await client.push(
                [
                    Fixtures.upsert("a1", ["type": "visit"], at: 1, collection: Activity.collection),
                    Fixtures.upsert("a2", activity.merging(["travel_expense": 12.5]) { $1 }, at: 1, collection: Activity.collection),
                    Fixtures.upsert("a3", activity.merging(["duration_minutes": 0]) { $1 }, at: 1, collection: Activity.collection),
                    Fixtures.upsert("a4", activity.merging(["date": "2026-02-30"]) { $1 }, at: 1, collection: Activity.collection),
                    Fixtures.upsert("a5", activity.merging(["travel_expense": "12.50"]) { $1 }, at: 1, collection: Activity.collection),
                    Fixtures.upsert("a5", ["notes": "edited"], at: 2, collection: Activity.collection),
                    Fixtures.upsert("b1", ["floor": 2], at: 1, collection: Build.collection),
                    Fixtures.upsert("b2", ["name": " "], at: 1, collection: Build.collection),
                    Fixtures.upsert("b3", ["name": "Shed", "floor": 2], at: 1, collection: Build.collection),
                ], token: staff
            ).results
            #expect(results.map(\.status) == [.rejected, .rejected, .rejected, .rejected, .applied, .applied, .rejected, .rejected, .applied])
            #expect(results.compactMap(\.error?.code).allSatisfy { $0 == .invalidFields })
        }
    }
}
