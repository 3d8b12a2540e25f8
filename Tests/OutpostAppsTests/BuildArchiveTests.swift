import Foundation
import GRDB
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

@Suite("Build archive")
struct BuildArchiveTests {
    @Test("saving always succeeds locally first; offline it says the build will upload when connected")
    func offlineSave() async throws {
        try await withTestDevice { device in
            let saved = try await BuildArchive(engine: device.engine).save(name: "Shed", fields: ["floor": 2])
            #expect(saved.build.syncStatus == .pending)
            #expect(saved.message.contains("saved on this device"))
            let listed = try await BuildArchive(engine: device.engine).list()
            #expect(listed.map(\.name) == ["Shed"])
            #expect(listed[0].fields["floor"] == 2)
        }
    }

    @Test("a build waiting to upload for over 24 hours shows as failing on its own row, with why; the others stay pending")
    func overdueBuild() async throws {
        let now = ManualNow()
        try await withTestDevice(now: now) { device in
            let archive = BuildArchive(engine: device.engine)
            _ = try await archive.save(name: "Shed")
            now.advance(seconds: 25 * 3600)
            _ = try await archive.save(name: "Roof")
            let listed = Dictionary(uniqueKeysWithValues: try await archive.list().map { ($0.name, $0) })
            let shed = try #require(listed["Shed"])
            #expect(shed.status == .failed && shed.badge.symbol == "✗ not synced for over 24 hours")
            #expect(shed.badge.systemImage == "exclamationmark.icloud")
            #expect(shed.problem?.hasPrefix("not uploaded for over 24 hours: ") == true)
            #expect(BuildRow(shed).statusText == "Upload failed" && BuildRow(shed).canRetry)
            let roof = try #require(listed["Roof"])
            #expect(roof.status == .pending && roof.badge.symbol == "⏳ pending" && roof.problem == nil)
        }
    }

    @Test(
        "a build the crew's sheet has not taken is failed with the sheet's reason, not synced; Retry asks the server to send it again; then it is synced"
    )
    func sheetFailed() async throws {
        let server = InMemoryServer()
        try await withTestDevice(online: true, server: server) { device in
            let archive = BuildArchive(engine: device.engine)
            await server.connect("builds")
            let shed = try await archive.save(name: "Shed")
            await device.delivered()
            var now = try await archive.current(shed)
            #expect(now.build.status == .uploaded)
            #expect(now.message == "Build \"Shed\" uploaded; the crew's sheet does not have it yet.")

            await server.failConnected("builds", reason: "the receiver could not be reached")
            now = try await archive.current(shed)
            #expect(now.build.syncStatus == .synced && now.build.status == .failed && now.build.sheet == .failed)
            #expect(now.build.problem == "the crew's sheet has not taken it: the receiver could not be reached")
            #expect(now.message.hasPrefix("Build \"Shed\" uploaded, but the crew's sheet has not taken it (the receiver could not be reached)"))
            let row = BuildRow(try await archive.listWithSheets()[0])
            #expect(row.statusText == "Not in the crew's sheet" && row.canRetry)
            #expect(row.errorText == "the crew's sheet has not taken it: the receiver could not be reached")

            guard case .sentToSheet(let resent) = try await archive.retry(shed.build.buildId) else {
                Issue.record("a retry of a build the sheet has not taken asks the server")
                return
            }
            #expect(resent.sheet == .failed)
            #expect(await server.deliveryRetries["builds"] == 1)
            await server.deliverConnected("builds")
            #expect(try await archive.listWithSheets().map(\.status) == [.synced])
            #expect(try await archive.retry(shed.build.buildId) == .alreadySynced)
        }
    }

    @Test("the archive screen asks the server about the sheet once per newly uploaded build, never on every commit or status")
    @MainActor
    func screenAsksOncePerBuild() async throws {
        let server = InMemoryServer()
        try await withTestDevice(online: true, server: server) { device in
            await server.connect("builds")
            let screen = BuildArchiveScreen(archive: BuildArchive(engine: device.engine))
            for name in ["A", "B", "C"] {
                await screen.save(name: name)
                await device.delivered()
                await screen.reload()
                await screen.reload()
            }
            try await eventually("the sheet of every build") { screen.rows.count == 3 && screen.rows.allSatisfy { $0.build.sheet == .waiting } }
            #expect(await server.deliveryQueries <= 3)
            let asked = await server.deliveryQueries
            for _ in 0..<5 { await screen.reload() }
            #expect(await server.deliveryQueries == asked)
        }
    }

    @Test(
        "an uploaded build says whether the crew's sheet has it: waiting, then received, again waiting after an edit; nothing without a sheet or offline"
    )
    func sheetState() async throws {
        let server = InMemoryServer()
        try await withTestDevice(online: true, server: server) { device in
            let archive = BuildArchive(engine: device.engine)
            let shed = try await archive.save(name: "Shed")
            await device.delivered()
            // Builds go to no sheet: uploaded is all there is to say.
            #expect(try await archive.listWithSheets().map(\.sheet) == [.noSheet])
            #expect(BuildRow(try await archive.listWithSheets()[0]).sheetText == nil)

            await server.connect("builds")
            var listed = try await archive.listWithSheets()
            #expect(listed.map(\.sheet) == [.waiting])
            #expect(BuildRow(listed[0]).sheetText == "Not in the crew's sheet yet")
            await server.deliverConnected("builds")
            listed = try await archive.listWithSheets()
            #expect(listed.map(\.sheet) == [.received])
            #expect(BuildRow(listed[0]).sheetText == "In the crew's sheet")
            // Offline, the archive says what it last knew of that version: the sheet has it.
            await device.setOnline(false)
            #expect(try await archive.list().map(\.status) == [.synced])
            await device.setOnline(true)

            // A newer version the sheet has not had; a build not uploaded yet is not asked about.
            _ = try await device.engine.save(LocalStore.Write(collection: "builds", recordId: shed.build.buildId, fields: ["floor": 3]))
            await device.delivered()
            await device.setOnline(false)
            _ = try await archive.save(name: "Roof")
            #expect(try await archive.listWithSheets().map(\.sheet) == [.unknown, .unknown])
            await device.setOnline(true)
            _ = try await device.engine.sync()
            await server.deliverConnected("builds")
            _ = try await device.engine.save(LocalStore.Write(collection: "builds", recordId: shed.build.buildId, fields: ["floor": 4]))
            await device.delivered()
            listed = try await archive.listWithSheets()
            #expect(Dictionary(uniqueKeysWithValues: listed.map { ($0.name, $0.sheet) }) == ["Shed": .waiting, "Roof": .received])
        }
    }

    @Test("a failed upload says the build was saved and can be retried; the list shows the error; retry and sync-all summarise")
    func failedUpload() async throws {
        let refusing = InMemoryServer(rejecting: { mutation in
            mutation.fields["name"] == "Bad" ? .init(code: .invalidFields, message: "no permit attached") : nil
        })
        try await withTestDevice(online: true, server: refusing) { device in
            let archive = BuildArchive(engine: device.engine)
            let saving = try await archive.save(name: "Bad")
            // The save answers at once; the upload runs after it.
            #expect(saving.build.syncStatus == .pending)
            #expect(saving.message == "Build \"Bad\" saved; uploading shortly.")
            await device.delivered()
            let bad = try await archive.current(saving)
            #expect(bad.build.syncStatus == .refused)
            #expect(bad.message == "Build \"Bad\" saved on this device; the server refused it: no permit attached")
            let good = try await archive.current(try await archive.save(name: "Roof"))
            await device.delivered()
            #expect(try await archive.current(good).build.syncStatus == .synced)

            // Offline, three more queue; sync-all reports each outcome.
            await device.setOnline(false)
            for name in ["A", "B", "C"] { _ = try await archive.save(name: name) }
            let listed = try await archive.list()
            #expect(listed.first { $0.name == "Bad" }?.syncError == "no permit attached")
            // The network returns; the user presses "sync all" before the device noticed.
            device.transport.isOnline = true
            let summary = try await archive.syncAll()
            // The refused build waits for the user: sync-all does not send it again.
            #expect(summary.description == "3 synced, 0 failed")
            // Retry sends that build alone, as it is: refused again.
            let retried = try await archive.retry(bad.build.buildId)
            #expect(
                retried == .finished(SyncSummary(synced: 0, failed: 0, refused: 1, reasons: ["no permit attached"], chunks: 1)),
                "\(retried)")
            #expect(try await archive.retry(good.build.buildId) == .alreadySynced)
            await #expect(throws: ClientError.self) { try await archive.retry("build-404") }

            // Offline, a retry of one build counts that build alone, whatever else waits.
            await device.setOnline(false)
            device.transport.isOnline = false
            let waiting = try await archive.save(name: "Fence")
            _ = try await archive.save(name: "Gate")
            guard case .finished(let alone) = try await archive.retry(waiting.build.buildId) else {
                Issue.record("the retry of a build not uploaded did not send it")
                return
            }
            #expect(alone.failed == 1 && alone.synced == 0, "\(alone)")
        }
    }

    @Test("builds with no status, left by an older version, read as synced")
    func legacyBuilds() async throws {
        try await withTestDevice { device in
            let archive = BuildArchive(engine: device.engine)
            let saved = try await archive.save(name: "Old shed")
            // An older version wrote no status column value.
            let queue = try DatabaseQueue(path: device.store.url.path)
            try await queue.write { db in
                try db.execute(sql: "UPDATE records SET sync_status = NULL WHERE record_id = ?", arguments: [saved.build.buildId])
                try db.execute(sql: "DELETE FROM outbox")
            }
            #expect(try await archive.list().map(\.syncStatus) == [.synced])
        }
    }
}
