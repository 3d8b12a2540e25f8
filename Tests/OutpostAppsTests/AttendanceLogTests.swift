import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@Suite("Attendance")
struct AttendanceLogTests {
    static let office = FixedLocation(LocationFix(latitude: 51.5072, longitude: -0.1276, accuracy: 8))
    static let utc = TimeZone(identifier: "UTC")!

    func makeLog(_ device: TestDevice, location: any LocationProvider = office) -> AttendanceLog {
        AttendanceLog(engine: device.engine, userId: "ana", location: location, timeZone: Self.utc)
    }

    @Test(
        "without a GPS fix, check-in and check-out are refused with the message, online or offline, and nothing is written",
        arguments: [false, true])
    func noFix(online: Bool) async throws {
        try await withTestDevice(online: online) { device async throws in
            let log = makeLog(device, location: FixedLocation(nil))
            let error = await #expect(throws: ClientError.self) { try await log.checkIn() }
            #expect(error?.code == .noLocationFix)
            #expect(error?.message == "GPS signal required. Please move to an open area.")
            await #expect(throws: ClientError.self) { try await log.checkOut() }
            #expect(try await device.store.records().isEmpty)
            #expect(try await device.outbox().isEmpty)
            #expect(await device.server.applied.isEmpty)
        }
    }

    @Test("a check-in with a photo saves the photo with it; the photo goes up before the check-in, which is synced only then")
    func checkInWithPhoto() async throws {
        try await withTestDevice { device async throws in
            let log = makeLog(device)
            let sheet = Data((0..<700_000).map { UInt8(truncatingIfNeeded: $0 &* 5) })
            let entry = try await log.checkIn(photo: Attachment(data: sheet, type: "image/jpeg", name: "sheet.jpg"))
            let record = try #require(try await device.store.record(collection: Attendance.collection, recordId: entry.recordId))
            let photo = try #require(FileReference.references(in: record.fields)[Attendance.Field.photo])
            #expect(photo.size == 700_000 && photo.name == "sheet.jpg")
            #expect(try await device.engine.fileState(photo).storedBytes == 700_000)
            // Offline, the check-in waits with its photo.
            #expect(record.syncStatus == .pending)
            #expect(await device.server.completeFileCount == 0)
            await device.setOnline(true)
            _ = try await device.engine.sync()
            #expect(await device.server.completeFileCount == 1)
            #expect(await device.server.applied.map(\.mutation.collection) == [Attendance.collection])
            #expect(try await log.state().latest?.syncStatus == .synced)
        }
    }

    @Test("a fix outside the Earth's coordinates is refused, and nothing is written")
    func badCoordinates() async throws {
        try await withTestDevice { device async throws in
            let log = makeLog(device, location: FixedLocation(LocationFix(latitude: 95, longitude: 0)))
            let error = await #expect(throws: ClientError.self) { try await log.checkIn() }
            #expect(error?.code == .invalidInput)
            #expect(try await device.store.records().isEmpty)
        }
    }

    @Test("offline: the state changes at once with a pending indicator; the records carry isOfflineEntry and sync on reconnect")
    func offlineDay() async throws {
        try await withTestDevice { device in
            let log = makeLog(device)
            #expect(try await log.state().text == "Not checked in")

            let checkIn = try await log.checkIn()
            #expect(checkIn.action == .checkIn)
            #expect(checkIn.isOfflineEntry)
            #expect(checkIn.syncStatus == .pending)
            var state = try await log.state()
            #expect(state.text == "Checked In")
            #expect(state.isPendingSync)

            device.now.advance(seconds: 8 * 3600)
            try await log.checkOut()
            state = try await log.state()
            #expect(state.text == "Checked Out")
            #expect(state.isPendingSync)

            // The history lists both, newest first, each with its pending badge.
            let history = try await log.history()
            #expect(history.map(\.action) == [.checkOut, .checkIn])
            #expect(history.allSatisfy { $0.badge.accessibilityLabel == "Record pending synchronization" })

            // What goes to the server: the whole record, with its coordinates and the offline flag.
            let outbox = try await device.outbox()
            #expect(outbox.map(\.recordId) == ["ana.2026-11-21.in", "ana.2026-11-21.out"])
            #expect(FieldRules.number(outbox[0].fields["latitude"]) == 51.5072)
            #expect(FieldRules.number(outbox[0].fields["accuracy_m"]) == 8)
            #expect(outbox.allSatisfy { $0.fields[LocalRecord.offlineEntryField] == true })

            await device.setOnline(true)
            #expect(await device.server.applied.count == 2)
            #expect(try await log.state().isPendingSync == false)
            #expect(try await log.history().allSatisfy { $0.syncStatus == .synced })
        }
    }

    @Test("online: a check-in returns once saved, syncs right after without waiting on the caller, and is not an offline entry")
    func onlineCheckIn() async throws {
        try await withTestDevice(online: true) { device in
            let log = makeLog(device)
            let entry = try await log.checkIn()
            #expect(entry.syncStatus == .pending)
            #expect(!entry.isOfflineEntry)
            await device.delivered()
            #expect(try await log.state().latest?.syncStatus == .synced)
            #expect(await device.server.applied.first?.mutation.fields[LocalRecord.offlineEntryField] == nil)
        }
    }

    @Test("one check-in a day; a check-out needs a check-in; one check-out; the next day starts afresh")
    func oneCheckInPerDay() async throws {
        try await withTestDevice { device in
            let log = makeLog(device)
            // Heard from the server today, the device knows there is no check-in.
            await device.setOnline(true)
            try await log.refresh()
            await device.setOnline(false)
            var error = await #expect(throws: ClientError.self) { try await log.checkOut() }
            #expect(error?.code == .notCheckedIn)
            try await log.checkIn()
            error = await #expect(throws: ClientError.self) { try await log.checkIn() }
            #expect(error?.code == .alreadyCheckedIn)
            #expect(error?.message == "Already checked in today at 09:00.")
            try await log.checkOut()
            error = await #expect(throws: ClientError.self) { try await log.checkOut() }
            #expect(error?.code == .alreadyCheckedOut)
            error = await #expect(throws: ClientError.self) { try await log.checkIn() }
            #expect(error?.code == .alreadyCheckedIn)
            #expect(try await device.outbox().count == 2)

            device.now.advance(seconds: 24 * 3600)
            #expect(try await log.state().text == "Not checked in")
            let next = try await log.checkIn()
            #expect(next.recordId == "ana.2026-11-22.in")
        }
    }

    @Test(
        "a refused change to a synced check-in leaves the check-in standing; discarded offline, the server's record comes back at once and the day goes on"
    )
    func refusedChangeDiscardedOffline() async throws {
        let server = InMemoryServer(rejecting: { mutation in
            mutation.fields["latitude"] == 7 ? .init(code: .invalidFields, message: "attendance records are written once") : nil
        })
        try await withTestDevice(online: true, server: server) { device in
            let log = makeLog(device)
            let checkIn = try await log.checkIn()
            await device.delivered()
            let id = try #require(try await device.store.records(collection: Attendance.collection).first?.recordId)
            #expect(try await device.store.record(collection: Attendance.collection, recordId: id)?.syncStatus == .synced)

            try await device.engine.save(LocalStore.Write(collection: Attendance.collection, recordId: id, fields: ["latitude": 7]))
            await device.delivered()
            let refused = try await log.state()
            #expect(refused.isRefused && refused.latest?.isRefusedChange == true)
            #expect(refused.line(clock: log.clock) == "Checked In at 09:00; a change to it was refused: attendance records are written once")

            // Offline, the discard gives the check-in back as the server has it, synced; the day goes on.
            await device.setOnline(false)
            try await device.engine.discard(collection: Attendance.collection, recordId: id)
            let restored = try #require(try await device.store.record(collection: Attendance.collection, recordId: id))
            #expect(restored.syncStatus == .synced && restored.fields["latitude"] == .number(checkIn.latitude))
            #expect(restored.serverCopy == nil)
            #expect(try await log.state().line(clock: log.clock) == "Checked In at 09:00")
            let error = await #expect(throws: ClientError.self) { try await log.checkIn() }
            #expect(error?.code == .alreadyCheckedIn)
            #expect(try await log.checkOut().awaitsCheckIn == false)
        }
    }

    @Test(
        "a device that has not heard from the server today saves a check-out with no check-in of its own, marked as awaiting one; the server decides"
    )
    func checkOutAwaitingCheckIn() async throws {
        let server = InMemoryServer(rejecting: { mutation in
            mutation.fields["action"] == "check_out" ? .init(code: .stateConflict, message: "a check-out needs a check-in on the same day") : nil
        })
        try await withTestDevice(server: server) { device in
            let log = makeLog(device)
            let checkOut = try await log.checkOut()
            #expect(checkOut.awaitsCheckIn && checkOut.syncStatus == .pending)
            #expect(try await log.state().text == "Checked Out")
            // With no check-in on the server either, it is refused, and the state says so.
            await device.setOnline(true)
            await device.delivered()
            let state = try await log.state()
            #expect(state.isRefused)
            #expect(state.line(clock: log.clock) == "Check-out at 09:00 refused: a check-out needs a check-in on the same day")
        }
    }

    @Test(
        "once the device holds its key, the ids it keeps and writes name no one: provisional records and discarded copies are renamed, sealed, and still read"
    )
    func idsNameNoOne() async throws {
        let server = InMemoryServer(rejecting: { mutation in
            FieldRules.number(mutation.fields["latitude"]) == 1 ? .init(code: .invalidFields, message: "not at the site") : nil
        })
        let key = try #require(Attendance.IdKey(bytes: Array(repeating: 9, count: 32)))
        try await withTestDevice(server: server) { device in
            let day = try #require(CalendarDay("2026-11-21"))
            // Yesterday's check-in, refused and discarded before the server gave keys (as one older than the
            // route), leaves a sealed copy under its provisional id.
            device.now.advance(seconds: -24 * 3600)
            try await makeLog(device, location: FixedLocation(LocationFix(latitude: 1, longitude: 1))).checkIn()
            await device.setOnline(true)
            await device.delivered()
            try await device.engine.discard(collection: Attendance.collection, recordId: "ana.2026-11-20.in")
            await device.setOnline(false)
            #expect(try await device.engine.recordIdKeys() == nil)
            await server.setRecordIdKeys(RecordIdKeyResponse(attendance: key.hex, userId: "ana"))

            // Before the device reaches the server it has no key: today's check-in takes the provisional id.
            device.now.advance(seconds: 24 * 3600)
            let log = makeLog(device)
            #expect(try await log.checkIn().recordId == "ana.2026-11-21.in")
            // Keys of another user rename none of hers.
            #expect(RecordIdSettlement.attendance.settledId("ana.2026-11-21.in", RecordIdKeyResponse(attendance: key.hex, userId: "ben")) == nil)
            await device.setOnline(true)
            await device.delivered()
            #expect(try await device.engine.recordIdKeys()?.attendance == key.hex)

            // The sync that brought the key settled the ids, before anything was read: the record moved to its
            // derived id, synced, fields intact.
            let checkInId = Attendance.recordId(key: key, day: day, action: .checkIn)
            #expect(try await device.store.recordIds(collection: Attendance.collection, containing: ".").isEmpty)
            #expect(try await device.store.record(collection: Attendance.collection, recordId: checkInId)?.syncStatus == .synced)
            // The key was fetched before the push, so the id that left the device was the settled one.
            #expect(await device.server.applied.last?.mutation.recordId == checkInId)
            let state = try await log.state()
            #expect(state.latest?.recordId == checkInId)
            #expect(state.latest?.syncStatus == .synced)
            #expect(state.latest?.latitude == 51.5072)
            #expect(try await device.store.recordIds(collection: Attendance.collection, containing: ".").isEmpty)
            #expect(try await device.store.outbox.discardedCount() == 1)

            // A check-out now takes its derived id at once, and carries its user.
            await device.setOnline(false)
            let checkOut = try await log.checkOut()
            #expect(checkOut.recordId == Attendance.recordId(key: key, day: day, action: .checkOut))
            let outbox = try await device.outbox()
            #expect(outbox.map(\.recordId) == [checkOut.recordId])
            #expect(outbox.first?.fields["user_id"] == "ana")
            #expect(try await log.history().map(\.recordId) == [checkOut.recordId, checkInId])
            #expect(try await device.store.records().allSatisfy { !$0.recordId.contains("ana") })

        }
    }

    @Test("the device user comes from the token's claims")
    func userFromToken() throws {
        func part(_ json: String) -> String {
            Data(json.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let token = "\(part(#"{"alg":"HS256"}"#)).\(part(#"{"tenant":"acme","sub":"ana","role":"staff","name":"Ana Staff","exp":1}"#)).sig"
        #expect(DeviceUser(token: token) == DeviceUser(tenant: "acme", userId: "ana", name: "Ana Staff", role: .staff))
        #expect(DeviceUser(token: "not-a-jwt") == nil)
        #expect(DeviceUser(token: "a.\(part(#"{"tenant":"acme","sub":"../x","role":"staff"}"#)).c") == nil)
    }
}
