import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@Suite("Activity registration")
struct ActivityLogTests {
    static let visit = ActivityDraft(
        type: "home-visit", date: CalendarDay("2026-11-20")!, durationMinutes: 90, participants: 3, notes: "garden",
        travelExpense: "12.5")

    func log(_ device: TestDevice) -> ActivityLog { ActivityLog(engine: device.engine) }

    @Test("offline: 'Saved offline — will sync when connected', in the list at once with its pending badge")
    func offline() async throws {
        try await withTestDevice { device in
            let saved = try await log(device).register(Self.visit)
            #expect(saved.confirmation == "Saved offline — will sync when connected")
            #expect(saved.showsOfflineBadge)
            let listed = try await log(device).list()
            #expect(listed.map(\.recordId) == [saved.activity.recordId])
            #expect(listed[0].syncStatus == .pending)
            #expect(listed[0].isOfflineEntry)
            #expect(listed[0].travelExpense == "12.50")
            #expect(listed[0].durationMinutes == 90)
        }
    }

    @Test("online: the save answers at once, then \"Activity registered\" once delivered; an edit says \"Activity updated\"")
    func online() async throws {
        try await withTestDevice(online: true) { device in
            let saving = try await log(device).register(Self.visit)
            #expect(saving.confirmation == "Saved — syncing now")
            #expect(!saving.activity.isOfflineEntry)
            await device.delivered()
            let saved = try await log(device).current(saving)
            #expect(saved.confirmation == "Activity registered")
            #expect(!saved.showsOfflineBadge)
            #expect(try await log(device).list().map(\.syncStatus) == [.synced])
            #expect(await device.server.applied.count == 1)
            let editing = try await log(device).edit(saved.activity.recordId, changes: ["notes": "kitchen"])
            await device.delivered()
            #expect(try await log(device).current(editing).confirmation == "Activity updated")
        }
    }

    @Test("a draft the server would refuse is refused on the device, and nothing is written")
    func invalidDraft() async throws {
        try await withTestDevice { device async throws in
            var draft = Self.visit
            draft.durationMinutes = 0
            await #expect(throws: ClientError.self) { try await log(device).register(draft) }
            draft = Self.visit
            draft.travelExpense = "twelve"
            await #expect(throws: ClientError.self) { try await log(device).register(draft) }
            #expect(try await device.store.records().isEmpty)
        }
    }

    @Test(
        "three pending registrations sync within 60 s of connectivity returning, with no user action",
        .timeLimit(.minutes(5)))
    func threeSyncOnReconnect() async throws {
        try await withTestDevice { device in
            for _ in 0..<3 { _ = try await log(device).register(Self.visit) }
            #expect(await device.engine.status.pendingCount == 3)

            // The device's run loop: a health probe every 5 s drives the engine.
            let clock = ManualClock()
            let monitor = HealthProbeMonitor(transport: device.transport, clock: clock, interval: .seconds(5))
            let scheduler = SyncScheduler(engine: device.engine, monitor: monitor, clock: clock, retryInterval: .seconds(60))
            let run = Task { await scheduler.run() }
            defer { run.cancel() }
            // The probe has found the server away and waits for its next look; the retry timer waits too.
            var sleeps = clock.sleeps.makeAsyncIterator()
            while let sleep = await sleeps.next(), sleep != .seconds(5) {}
            var statuses = await device.engine.statusUpdates().makeAsyncIterator()
            device.transport.isOnline = true
            // The first probe after the network returns (5 s) finds the server, and the engine drains the outbox.
            clock.advance(by: .seconds(5))
            while let status = await statuses.next() {
                if status.pendingCount == 0 { break }
            }
            #expect(try await log(device).list().allSatisfy { $0.syncStatus == .synced })
            #expect(await device.server.applied.count == 3)
        }
    }

    @Test("an edit sends only the changed fields, with the version the device last saw as its base")
    func editCarriesBase() async throws {
        try await withTestDevice(online: true) { device in
            let saved = try await log(device).register(Self.visit)
            await device.delivered()
            await device.setOnline(false)
            _ = try await log(device).edit(saved.activity.recordId, changes: ["travel_expense": "20.00", "notes": "bus"])
            let edit = try #require(try await device.outbox().first)
            #expect(edit.fields.keys.sorted() == ["notes", "travel_expense"])
            #expect(edit.baseVersion == 1)
            let missing = await #expect(throws: ClientError.self) {
                try await log(device).edit("act-404", changes: ["notes": "x"])
            }
            #expect(missing?.code == .notFound)
        }
    }

    @Test("a pull brings another device's changes, and keeps this device's queued edit on top")
    func pullRebases() async throws {
        let server = InMemoryServer()
        try await withTestDevice(id: "dev-a", online: true, server: server) { a in
            let saved = try await log(a).register(Self.visit)
            await a.delivered()
            let id = saved.activity.recordId
            try await withTestDevice(id: "dev-b", online: true, server: server) { b in
                #expect(try await log(b).refresh() == 1)
                #expect(try await log(b).list().first?.fields["notes"] == "garden")
                // dev-b edits offline; meanwhile dev-a changes another field.
                await b.setOnline(false)
                _ = try await log(b).edit(id, changes: ["notes": "kitchen"])
                _ = try await log(a).edit(id, changes: ["participants": 5])
                await a.delivered()
                b.transport.isOnline = true
                #expect(try await log(b).refresh() == 1)
                let merged = try #require(try await log(b).list().first)
                #expect(merged.fields["participants"] == 5)
                #expect(merged.fields["notes"] == "kitchen")
                #expect(merged.syncStatus == .pending)
            }
        }
    }
}
