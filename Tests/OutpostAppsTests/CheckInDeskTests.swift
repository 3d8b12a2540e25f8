import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

/// Guests from a ``ReferenceServer``; everything else from the in-memory server; both behind one network switch.
struct RosterAndServer: SyncTransport {
    let roster: ReferenceServer
    let server: InMemoryTransport

    func push(_ request: PushRequest) async throws -> PushResponse { try await server.push(request) }
    func health() async throws -> HealthResponse { try await server.health() }

    func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        guard collection == Guest.collection else {
            return try await server.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
        }
        guard server.isOnline else { throw TransportError(kind: .network, message: "offline") }
        return try await roster.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
    }

    func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
        guard server.isOnline else { throw TransportError(kind: .network, message: "offline") }
        return try await roster.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
    }
}

@Suite("Event check-in")
struct CheckInDeskTests {
    /// A roster of `count` guests g0…, with g1 cancelled by status and g2 deleted after the download.
    static func roster(count: Int = 5) -> ReferenceServer {
        let roster = ReferenceServer()
        for index in 0..<count {
            roster.put(
                "g\(index)",
                ["name": .string("Guest \(index)"), "event_id": "gala", "status": index == 1 ? "cancelled" : "registered"],
                scope: "gala")
        }
        return roster
    }

    /// A device whose roster for "gala" is downloaded, then offline unless `online`.
    func withDesk<T>(
        id: String = "dev-a", online: Bool = false, server: InMemoryServer = InMemoryServer(),
        roster: ReferenceServer = roster(), _ body: (CheckInDesk, TestDevice) async throws -> T
    ) async throws -> T {
        try await withTestDevice(id: id, online: true, server: server, transport: { RosterAndServer(roster: roster, server: $0) }) { device in
            let data = ReferenceData(store: device.store, transport: RosterAndServer(roster: roster, server: device.transport))
            _ = try await data.download(collection: Guest.collection, scope: "gala")
            await device.setOnline(online)
            return try await body(CheckInDesk(engine: device.engine, roster: data, event: "gala"), device)
        }
    }

    @Test("an offline scan is saved with the device's scan time and a key of device + scan time that names no guest")
    func offlineScan() async throws {
        try await withDesk { desk, device in
            guard case .checkedIn(let scan, let warning) = try await desk.scan("g0") else {
                Issue.record("expected a new check-in")
                return
            }
            #expect(scan.guestName == "Guest 0")
            #expect(scan.syncStatus == .pending)
            #expect(warning == nil)
            let mutation = try #require(try await device.outbox().first)
            let scannedAt = try #require(mutation.fields["scanned_at"]?.stringValue.flatMap(Timestamp.init(iso8601:)))
            #expect(scannedAt == mutation.clientTimestamp)
            #expect(mutation.idempotencyKey.hasPrefix("dev-a:\(scannedAt.iso8601):"))
            #expect(!mutation.idempotencyKey.contains("g0"))
            #expect(mutation.fields["scanned_by"] == "dev-a")
            #expect(mutation.fields["event_id"] == "gala")
            #expect(try await desk.pending().map(\.guestId) == ["g0"])
        }
    }

    @Test("cancelled, deleted and unknown guests get the roster's messages, and nothing is written")
    func refusals() async throws {
        let roster = Self.roster()
        try await withDesk(roster: roster) { desk, device in
            var error = await #expect(throws: ClientError.self) { try await desk.scan("g1") }
            #expect(error?.code == .guestCancelled)
            #expect(error?.message == ReferenceMessages.cancelled)
            error = await #expect(throws: ClientError.self) { try await desk.scan("nobody") }
            #expect(error?.code == .unknownGuest)
            #expect(error?.message == ReferenceMessages.notFound)
            #expect(try await device.outbox().isEmpty)

            // A registration deleted on the server arrives as a tombstone at the next refresh.
            roster.cancel("g2")
            await device.setOnline(true)
            _ = try await desk.roster.refresh(collection: Guest.collection, scope: "gala")
            error = await #expect(throws: ClientError.self) { try await desk.scan("g2") }
            #expect(error?.code == .guestCancelled)
        }
    }

    @Test("an incomplete roster refuses scans")
    func incompleteRoster() async throws {
        try await withTestDevice { device in
            let data = ReferenceData(store: device.store, transport: device.transport)
            let desk = CheckInDesk(engine: device.engine, roster: data, event: "gala")
            let error = await #expect(throws: ClientError.self) { try await desk.scan("g0") }
            #expect(error?.code == .rosterIncomplete)
            #expect(error?.message == ReferenceMessages.incomplete)
        }
    }

    @Test("a repeat scan says so with the first scan's time and device, and writes nothing")
    func repeatScan() async throws {
        try await withDesk { desk, device in
            guard case .checkedIn(let first, _) = try await desk.scan("g0") else { Issue.record("no check-in"); return }
            device.now.advance(seconds: 60)
            guard case .alreadyCheckedIn(let again) = try await desk.scan("g0") else { Issue.record("not a repeat"); return }
            #expect(again.scannedAt == first.scannedAt)
            #expect(again.scannedBy == "dev-a")
            #expect(try await device.outbox().count == 1)
        }
    }

    @Test("the same guest scanned at two events on one device is two check-ins, and the second scan is no repeat")
    func sameGuestAtTwoEvents() async throws {
        let roster = Self.roster()
        roster.put("g0", ["name": "Guest 0", "event_id": "expo", "status": "registered"], scope: "expo")
        try await withDesk(roster: roster) { gala, device in
            // Given a device holding the gala's roster and the expo's, offline
            await device.setOnline(true)
            _ = try await gala.roster.download(collection: Guest.collection, scope: "expo")
            await device.setOnline(false)
            let expo = CheckInDesk(engine: device.engine, roster: gala.roster, event: "expo")

            // When g0 is scanned at the gala, then a minute later at the expo
            guard case .checkedIn = try await gala.scan("g0") else { Issue.record("no check-in at the gala"); return }
            device.now.advance(seconds: 60)
            let second = try await expo.scan("g0")

            // Then the expo's scan is a check-in of its own, and each event holds its own
            guard case .checkedIn(let atExpo, _) = second else { Issue.record("the expo's scan was taken as a repeat"); return }
            #expect(atExpo.event == "expo")
            #expect(try await gala.checkIn(of: "g0")?.event == "gala")
            #expect(try await expo.checkIn(of: "g0")?.event == "expo")
            #expect(try await gala.pending().map(\.event) == ["gala"])
            #expect(try await expo.pending().map(\.event) == ["expo"])
            let queued = try await device.outbox()
            #expect(queued.map(\.scope) == ["gala", "expo"])
            #expect(queued.map(\.recordId) == ["g0", "g0"])
            // And a scan again at either event is a repeat of that event's check-in
            guard case .alreadyCheckedIn(let again) = try await gala.scan("g0") else { Issue.record("not a repeat"); return }
            #expect(again.event == "gala")
            #expect(try await device.outbox().count == 2)

            // When the device comes online, Then both reach the server as two check-ins, and both are synced
            await device.setOnline(true)
            #expect(await device.server.applied.map(\.mutation.scope) == ["gala", "expo"])
            #expect(try await gala.checkIn(of: "g0")?.syncStatus == .synced)
            #expect(try await expo.checkIn(of: "g0")?.syncStatus == .synced)
        }
    }

    @Test("a guest another device checked in is recognised once this device has pulled, online")
    func otherDevicesScan() async throws {
        let server = InMemoryServer()
        let roster = Self.roster()
        try await withDesk(id: "dev-b", online: true, server: server, roster: roster) { deskB, _ in
            guard case .checkedIn = try await deskB.scan("g3") else { Issue.record("no check-in"); return }
        }
        try await withDesk(id: "dev-a", online: true, server: server, roster: roster) { deskA, device in
            guard case .alreadyCheckedIn(let first) = try await deskA.scan("g3") else { Issue.record("not a repeat"); return }
            #expect(first.scannedBy == "dev-b")
            #expect(try await device.outbox().isEmpty)
        }
    }

    @Test("offline scans replay in the order they happened, in chunks of 50")
    func replayOrder() async throws {
        let server = InMemoryServer()
        try await withDesk(server: server, roster: Self.roster(count: 130)) { desk, device in
            var generator = SeededGenerator(seed: 7)
            let order = (0..<130).filter { $0 != 1 }.shuffled(using: &generator).map { "g\($0)" }
            for guest in order {
                _ = try await desk.scan(guest)
                device.now.advance(seconds: 1)
            }
            #expect(try await desk.pending().count == order.count)
            await device.setOnline(true)
            let applied = await server.applied.map(\.mutation)
            #expect(applied.map(\.recordId) == order)
            #expect(applied.map(\.clientTimestamp) == applied.map(\.clientTimestamp).sorted())
            #expect(device.transport.pushCount == 3)
            #expect(try await desk.pending().isEmpty)
        }
    }

    @Test("from 500 pending scans the device warns that reconnection will be slow")
    func largeQueue() async throws {
        try await withDesk(roster: Self.roster(count: 502)) { desk, device in
            for index in 2..<501 {
                _ = try await desk.scan("g\(index)")
            }
            #expect(try await desk.pendingCount() == 499)
            #expect(try await desk.largeQueueWarning() == nil)
            guard case .checkedIn(_, let warning) = try await desk.scan("g501") else { Issue.record("no check-in"); return }
            #expect(warning == "500 check-ins pending sync. The longer you stay offline, the slower reconnection will be.")
            #expect(AppText.largeQueueWarning(pending: 499) == nil)
        }
    }
}
