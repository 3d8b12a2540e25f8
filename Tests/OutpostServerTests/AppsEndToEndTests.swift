import Foundation
import OutpostProtocol
import OutpostRecords
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One field app session: a real `outpost serve` process on a fixed port, stopped and started again to cut
/// the network, and devices that are real `outpost` processes over loopback, each with its own store.
final class AppSession: @unchecked Sendable {
    let root: URL
    let data: String
    let port: String
    var url: String { "http://127.0.0.1:\(port)" }
    /// The server's PostgreSQL database, or nil for its embedded store in ``data``.
    let databaseURL: String?
    private var server: RunningChild?

    /// The folder of the server's file bytes, when named (`--file-directory`).
    let fileDirectory: String?

    init(databaseURL: String? = nil, namesFileDirectory: Bool = false) throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-apps-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        data = root.appendingPathComponent("server").path
        port = String(try TestPostgres.freePort())
        self.databaseURL = databaseURL
        fileDirectory = namesFileDirectory ? root.appendingPathComponent("uploaded-files").path : nil
    }

    /// A session whose server stores in `kind`: a fresh PostgreSQL database, or the embedded store.
    static func on(_ kind: StorageKind) async throws -> AppSession {
        try AppSession(
            databaseURL: kind == .sqlite ? nil : try await TestPostgres.shared.makeDatabase(),
            namesFileDirectory: kind == .postgresFileDirectory)
    }

    /// Where the server and the token command keep their data.
    private var storage: [String] {
        ["--data-dir", data] + (databaseURL.map { ["--database-url", $0] } ?? [])
            + (fileDirectory.map { ["--file-directory", $0] } ?? [])
    }

    deinit {
        // A failed test's server: killed without waiting (a deinit cannot).
        server?.signal(SIGKILL)
        try? FileManager.default.removeItem(at: root)
    }

    func startServer() async throws {
        let server = try await OutpostProcess.start(["serve", "--port", port] + storage)
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        self.server = server
    }

    /// Stops the server: the network is down for every device. Returns what it logged.
    @discardableResult
    func stopServer() async -> String {
        #expect(await server?.stop() == 0)
        let logs = server?.stderr ?? ""
        server = nil
        return logs
    }

    func token(user: String, role: String = "staff") async throws -> String {
        try await OutpostProcess.run(["token", "--tenant", "acme", "--user", user, "--role", role, "--name", user.capitalized] + storage)
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Generates a roster of `guests` and imports it into `event` as organizer olga; returns olga's environment
    /// for further organizer commands.
    @discardableResult
    func importRoster(event: String = "gala", guests: Int) async throws -> [String: String] {
        let organizer = ["OUTPOST_SERVER": url, "OUTPOST_TOKEN": try await token(user: "olga", role: "organizer")]
        let csv = root.appendingPathComponent("roster.csv").path
        #expect(try await OutpostProcess.run(["roster", "generate", "--guests", String(guests), "--output", csv]).status == 0)
        #expect(try await OutpostProcess.run(["roster", "import", "--event", event, csv], environment: organizer).status == 0)
        return organizer
    }

    /// Sets up a device store for `user` and returns a runner of `outpost` commands as that device; it reaches
    /// the server through `port` when given (a ``FaultProxy``'s).
    func device(
        _ id: String, user: String, through port: Int? = nil
    ) async throws -> (_ arguments: [String]) async throws -> OutpostProcess.Output {
        let run = try await clockedDevice(id, user: user, through: port)
        return { arguments in try await run(arguments, nil) }
    }

    /// Sets up a device store for `user` and returns a runner of `outpost` commands as that device, each with
    /// its wall clock moved by an offset such as `+48h` (see ``FakeTime``), or true when nil.
    func clockedDevice(
        _ id: String, user: String, through port: Int? = nil
    ) async throws
        -> (_ arguments: [String], _ clock: String?) async throws -> OutpostProcess.Output
    {
        let store = ["--store", root.appendingPathComponent("\(id)/device.sqlite").path]
        let initialised = try await OutpostProcess.run(
            ["device", "init", "--server", port.map { "http://127.0.0.1:\($0)" } ?? url, "--token", try token(user: user), "--device-id", id]
                + store)
        #expect(initialised.status == 0, "\(initialised.stderr)")
        return { arguments, offset in try await OutpostProcess.run(arguments + store, environment: ["TZ": "UTC"], clock: offset) }
    }

    /// GET `path` with an organizer's token, decoded.
    func get<T: Decodable>(_ path: String, as type: T.Type) async throws -> T {
        try JSONDecoder().decode(T.self, from: try await data(path))
    }

    /// The id of `user`'s attendance record of `action` on `day`, under the key the server gives that user.
    func attendanceId(user: String, day: String, action: Attendance.Action) async throws -> String {
        var request = URLRequest(url: URL(string: url + "/v1/record-id-key")!)
        request.setValue("Bearer \(try await token(user: user))", forHTTPHeaderField: "Authorization")
        let keys = try JSONDecoder().decode(RecordIdKeyResponse.self, from: try await URLSession.shared.data(for: request).0)
        let key = try #require(Attendance.IdKey(hex: keys.attendance))
        return Attendance.recordId(key: key, day: try #require(CalendarDay(day)), action: action)
    }

    /// GET `path` with an organizer's token, as text.
    func text(_ path: String) async throws -> String {
        String(decoding: try await data(path), as: UTF8.self)
    }

    /// POSTs `body` as JSON to `path` with `token`; the status.
    func post<T: Encodable>(_ path: String, _ body: T, token: String) async throws -> Int {
        var request = URLRequest(url: URL(string: url + path)!)
        request.httpMethod = "POST"
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONEncoder().encode(body)
        return (try await URLSession.shared.data(for: request).1 as? HTTPURLResponse)?.statusCode ?? 0
    }

    private func data(_ path: String) async throws -> Data {
        var request = URLRequest(url: URL(string: url + path)!)
        request.setValue("Bearer \(try await token(user: "olga", role: "organizer"))", forHTTPHeaderField: "Authorization")
        return try await URLSession.shared.data(for: request).0
    }
}

@Suite("Field apps end to end")
struct AppsEndToEndTests {
    @Test("attendance: GPS required, offline check-out flagged and replayed, the server refuses a second check-in")
    func attendance() async throws {
        let today = try await settledToday()
        let session = try AppSession()
        try await session.startServer()
        let ana = try await session.device("phone-ana", user: "ana")

        let noFix = try await ana(["attendance", "check-in", "--no-fix"])
        #expect(noFix.status != 0)
        #expect(noFix.stderr == "outpost: GPS signal required. Please move to an open area.\n")
        #expect(try await ana(["attendance", "history"]).stdout.contains("no attendance records"))
        let early = try await ana(["attendance", "check-out", "--lat", "51.5", "--lon", "-0.12"])
        #expect(early.status != 0)
        #expect(early.stderr.contains("check in first"))

        let checkIn = try await ana(["attendance", "check-in", "--lat", "51.5", "--lon", "-0.12"])
        #expect(checkIn.status == 0, "\(checkIn.stderr)")
        #expect(checkIn.stdout.contains("Check-in at") && checkIn.stdout.contains("synced: the server has it"))
        #expect(try await ana(["attendance", "check-in", "--lat", "51.5", "--lon", "-0.12"]).stderr.contains("Already checked in today"))

        // The network drops: the check-out is saved offline, the state changes at once, pending.
        await session.stopServer()
        let checkOut = try await ana(["attendance", "check-out", "--lat", "51.6", "--lon", "-0.1"])
        #expect(checkOut.status == 0, "\(checkOut.stderr)")
        #expect(
            checkOut.stdout.contains("Check-out at") && checkOut.stdout.contains("not synced yet: the server cannot be reached"),
            "\(checkOut.stdout)")
        #expect(try await ana(["attendance", "status"]).stdout.contains("Checked Out at"))
        #expect(try await ana(["attendance", "status"]).stdout.contains("pending"))
        let history = try await ana(["attendance", "history"]).stdout
        #expect(history.contains("check-out") && history.contains("⏳ pending") && history.contains("(offline entry)"))
        #expect(history.contains("check-in ") && history.contains("✓ synced"))

        // Back online: opening the app sends what waits, with no save and no sync command; the server keeps the
        // offline flag.
        try await session.startServer()
        let reopened = try await ana(["attendance", "status"]).stdout
        #expect(reopened.contains("✓ synced") && reopened.contains("Online · nothing waiting to sync"), "\(reopened)")
        #expect(try await ana(["device", "sync"]).stdout.contains("0 synced, 0 failed"))
        // The server holds it under an id that names no one, never under the one that names her and the day.
        let checkOutId = try await session.attendanceId(user: "ana", day: today, action: .checkOut)
        let audit = try await session.get("/v1/audit?collection=attendance&recordId=\(checkOutId)", as: AuditResponse.self)
        #expect(audit.entries.count == 1)
        #expect(audit.entries.first?.fields["isOfflineEntry"] == true)
        let named = try await session.get("/v1/audit?collection=attendance&recordId=ana.\(today).out", as: AuditResponse.self)
        #expect(named.entries.isEmpty)
        // Nor does the device, once it synced: every attendance id it lists is derived.
        let records = try await ana(["device", "records"]).stdout
        #expect(records.contains(checkOutId) && !records.contains("ana."), "\(records)")

        // Another client, without the app's checks: refused without coordinates; a second check-in is the same
        // record, and the server keeps the first.
        let other = try await session.device("script-ana", user: "ana")
        let raw = try await other(["device", "put", "attendance", "ana.\(today).in", "action=check_in", "day=\(today)"])
        #expect(raw.stdout.contains("refused by the server: a GPS location (latitude and longitude) is required"), "\(raw.stdout)")
        // The sync that sent it, the device's first, brought her key and renamed the record under the
        // provisional id it was written with, with no attendance screen read: no id on the device names her.
        let renamed = try await other(["device", "records"]).stdout
        #expect(renamed.contains("attendance/att-") && !renamed.contains("ana."), "\(renamed)")
        let again = try await other([
            "device", "put", "attendance", "ana.\(today).in", "action=check_in", "day=\(today)", "latitude=1",
            "longitude=2",
        ])
        #expect(again.stdout.contains("already recorded on another device first: the server keeps that one"), "\(again.stdout)")
        #expect(raw.status == 1, "a refused save ends with a failure")
        #expect(again.status == 0, "\(again.stderr)")

        // An edit of a synced record is refused as such; discarded, the server's version takes its place at once.
        let checkInId = try await session.attendanceId(user: "ana", day: today, action: .checkIn)
        let edited = try await ana(["device", "put", "attendance", checkInId, "latitude=5"])
        #expect(edited.status == 1 && edited.stdout.contains("refused by the server: attendance records are written once"), "\(edited.stdout)")
        let refused = try await ana(["device", "records", "--refused"]).stdout
        #expect(refused.contains("discard it") && !refused.contains("edit it"), "\(refused)")
        let discarded = try await ana(["device", "discard", checkInId, "--collection", "attendance"]).stdout
        #expect(
            discarded
                == "discarded attendance/\(checkInId); a sealed copy stays on this device\nthe server's version: ✓ synced  attendance/\(checkInId)  action=check_in day=\(today) latitude=51.5 longitude=-0.12 user_id=ana\n",
            "\(discarded)")
    }

    @Test("event check-in: offline scans queue and replay with their scan times; repeats, cancelled and unknown guests are told apart")
    func eventCheckIn() async throws {
        let session = try AppSession()
        try await session.startServer()
        let organizer = try await session.importRoster(guests: 20)

        let door = try await session.device("door-1", user: "sam")
        let hall = try await session.device("hall-2", user: "kim")
        #expect(try await door(["event", "open", "gala"]).stdout.contains("Ready for offline"))
        #expect(try await hall(["event", "open", "gala"]).stdout.contains("Ready for offline"))
        // A registration cancelled after the download reaches the door device with its refresh.
        #expect(try await OutpostProcess.run(["roster", "cancel", "--event", "gala", "g000005"], environment: organizer).status == 0)
        #expect(try await door(["event", "refresh"]).stdout.contains("1 removed"))

        // The venue network fails: scans queue on the door device.
        await session.stopServer()
        for guest in ["g000001", "g000002", "g000003"] {
            let scan = try await door(["event", "scan", guest])
            #expect(scan.status == 0, "\(scan.stderr)")
            #expect(scan.stdout.contains("Checked in: \(guest)") && scan.stdout.contains("pending sync"))
        }
        let repeated = try await door(["event", "scan", "g000002"])
        #expect(repeated.stdout.contains("Already checked in at") && repeated.stdout.contains("by door-1"))
        let cancelled = try await door(["event", "scan", "g000005"])
        #expect(cancelled.status != 0)
        #expect(cancelled.stderr == "outpost: Registration cancelled — refer to organizer\n")
        let unknown = try await door(["event", "scan", "nobody"])
        #expect(unknown.stderr == "outpost: Guest not in roster — refresh and try again (`outpost event refresh` fetches walk-ins)\n")
        let pending = try await door(["event", "pending"]).stdout
        #expect(pending.contains("3 check-ins pending sync"))
        let scanTimes = try await door(["device", "records", "--pending"]).stdout

        // The network returns: the replay goes in order, and the server keeps the device's scan times.
        try await session.startServer()
        #expect(try await door(["device", "sync"]).stdout.contains("3 synced, 0 failed"))
        #expect(try await door(["event", "pending"]).stdout.contains("0 check-ins pending sync"))
        let audit = try await session.get("/v1/audit?collection=checkins&recordId=g000002", as: AuditResponse.self)
        let entry = try #require(audit.entries.first)
        #expect(entry.deviceId == "door-1")
        #expect(scanTimes.contains("scanned_at=\(entry.clientTimestamp.iso8601)"))
        #expect(entry.receivedAt > entry.clientTimestamp)

        // Another device, online, is told who scanned first (given the time to ask on a loaded machine).
        let elsewhere = try await hall(["event", "scan", "g000001", "--lookup-wait", "30s"])
        #expect(elsewhere.stdout.contains("Already checked in at") && elsewhere.stdout.contains("by door-1"), "\(elsewhere.stdout)")
        #expect(try await hall(["event", "scan", "g000009", "--lookup-wait", "30s"]).stdout.contains("(synced)"))
    }

    @Test("activities: offline confirmation, all sync after reconnect in `device run`, two devices merge fields, money conflicts for review")
    func activities() async throws {
        let session = try AppSession()
        try await session.startServer()
        let phone = try await session.device("phone-mia", user: "mia")
        let tablet = try await session.device("tablet-mia", user: "mia")
        let online = try await phone([
            "activity", "register", "--type", "home-visit", "--date", "2026-11-20", "--duration", "1h30m", "--travel-expense", "12.5",
        ])
        // The first line comes with the save, before or after the server was first heard from; the second once it answered.
        #expect(
            (online.stdout.hasPrefix("Saved on this device (") || online.stdout.hasPrefix("Saved — syncing now ("))
                && online.stdout.hasSuffix(")\nActivity registered\n"), "\(online.stdout) \(online.stderr)"
        )
        let id = try #require(online.stdout.split(separator: "(").last?.split(separator: ")").first.map(String.init))
        #expect(try await phone(["activity", "list"]).stdout.contains("\(id)  2026-11-20  home-visit  90 min  travel 12.50  ✓ synced"))

        await session.stopServer()
        for day in ["2026-11-18", "2026-11-19", "2026-11-21"] {
            let saved = try await phone(["activity", "register", "--type", "call", "--date", day, "--duration", "30"])
            #expect(
                saved.stdout.hasPrefix("Saved offline — will sync when connected (")
                    || saved.stdout.hasPrefix("Saved on this device (") && saved.stdout.hasSuffix("\nSaved offline — will sync when connected\n"),
                "\(saved.stdout) \(saved.stderr)")
        }
        #expect(try await phone(["activity", "list"]).stdout.components(separatedBy: "(saved offline)").count == 4)
        let refused = try await phone(["activity", "register", "--type", "call", "--date", "2026-13-01", "--duration", "30"])
        #expect(refused.status != 0)

        // Connectivity returns while the device runs: the three sync without a command (the wait fails after 60 s).
        let store = session.root.appendingPathComponent("phone-mia/device.sqlite").path
        let run = try await OutpostProcess.start(["device", "run", "--probe-interval", "1s", "--store", store])
        _ = try await run.waitFor("offline: (3 records waiting to sync)")
        try await session.startServer()
        _ = try await run.waitFor("online: (All records synced)", timeout: .seconds(60))
        #expect(await run.stop(SIGINT) == 0)

        // Two devices edit one activity: other fields merge, the money field conflicts for review.
        #expect(try await tablet(["activity", "list"]).stdout.contains(id))
        #expect(try await tablet(["activity", "edit", id, "--notes", "garden", "--travel-expense", "20"]).stdout.contains("Activity updated"))
        await session.stopServer()
        #expect(try await phone(["activity", "edit", id, "--duration", "120", "--travel-expense", "30"]).stdout.contains("Saved offline"))
        try await session.startServer()
        let sync = try await phone(["device", "sync"])
        #expect(sync.stdout.contains("0 synced, 0 failed, 1 refused: Conflict on a protected field"), "\(sync.stdout)")
        // The list pulls the server's record; the conflict stays, with the device's value, refused and not waiting.
        let listed = try await phone(["activity", "list"]).stdout
        #expect(listed.contains("120 min") && listed.contains("travel 30.00"), "\(listed)")
        #expect(listed.contains("Conflict: travel_expense changed on the server"))
        let status = try await phone(["device", "status"]).stdout
        #expect(status.contains("refused:  1") && status.contains("status:   Nothing waiting to sync"), "\(status)")
        let refusedRecords = try await phone(["device", "records", "--refused"]).stdout
        #expect(refusedRecords.contains("yours: travel_expense=30.00   server's: travel_expense=20.00"), "\(refusedRecords)")
        // Keeping the server's value settles it: the record is synced with the server's value.
        let resolved = try await phone(["device", "resolve", id, "--keep-server"])
        #expect(resolved.status == 0, "\(resolved.stdout) \(resolved.stderr)")
        let settled = try await phone(["activity", "list"]).stdout
        #expect(settled.contains("travel 20.00") && !settled.contains("Conflict"), "\(settled)")
        #expect(try await phone(["device", "status"]).stdout.contains("refused:  0"))
        let conflicts = try await session.get("/v1/conflicts?collection=activities", as: ConflictsResponse.self).conflicts
        #expect(conflicts.count == 1)
        #expect(conflicts.first?.attemptedFields == ["travel_expense": "30.00"])
        #expect(conflicts.first?.serverFields == ["travel_expense": "20.00"])
    }

    @Test("build archive: always saved locally; failed uploads listed with their error; retry and sync-all summarise")
    func builds() async throws {
        let session = try AppSession()
        try await session.startServer()
        let crew = try await session.device("crew-1", user: "cal")
        let first = try await crew(["builds", "save", "--name", "Shed", "floor=2"])
        #expect(first.stdout.contains("saved and uploaded"), "\(first.stdout) \(first.stderr)")

        await session.stopServer()
        for name in ["Roof", "Deck"] {
            #expect(try await crew(["builds", "save", "--name", name]).stdout.contains("saved on this device; it will upload when connected"))
        }
        let failed = try await crew(["builds", "sync-all"])
        #expect(failed.status != 0)
        #expect(failed.stdout.contains("0 synced, 2 failed: The server could not be reached"))
        let listed = try await crew(["builds", "list"]).stdout
        #expect(listed.components(separatedBy: "\n    The server could not be reached").count == 3, "\(listed)")
        #expect(listed.components(separatedBy: "  failed  (last tried ").count == 3, "\(listed)")
        // Offline, the archive says what it last knew: the server had Shed, and builds went to no sheet.
        #expect(listed.contains("Shed  synced\n"), "\(listed)")

        try await session.startServer()
        let roofId = try #require(listed.split(separator: "\n").first { $0.contains("Roof") }?.split(separator: " ").first.map(String.init))
        // Retry sends that build alone; sync-all the rest, with its progress.
        #expect(try await crew(["builds", "retry", roofId]).stdout.contains("\(roofId) alone: 1 synced, 0 failed"))
        let all = try await crew(["builds", "sync-all"]).stdout
        #expect(all.contains("uploading: 1/1") && all.contains("1 synced, 0 failed"), "\(all)")
        await #expect(!(try crew(["builds", "list"]).stdout.contains("failed")))
        #expect(try await crew(["builds", "retry", roofId]).stdout.contains("\(roofId) is already uploaded: nothing to send"))
        #expect(try await crew(["builds", "retry", "build-404"]).stderr == "outpost: no build build-404 in this archive\n")
        #expect(try await crew(["builds", "list"]).stdout.contains("Shed  synced\n"))

        // The crew's sheet is at an address that does not resolve: a build is uploaded, never synced, and says why.
        let organizer = try await session.token(user: "olga", role: "organizer")
        let sheet = ["collection": "builds", "url": "https://sheets.invalid/macros/s/AKfy/exec"]
        #expect(try await session.post("/v1/connectors", sheet, token: organizer) == 201)
        let barn = try await crew(["builds", "save", "--name", "Barn"])
        #expect(!barn.stdout.contains("saved and uploaded"), "\(barn.stdout)")
        #expect(barn.stdout.contains("Build \"Barn\" uploaded"), "\(barn.stdout)")
        let barnId = try #require(barn.stdout.firstMatch(of: /build-[0-9a-f-]+/).map { String($0.output) }, "\(barn.stdout)")
        var sheetList = ""
        let deadline = ContinuousClock.now.advanced(by: .seconds(60))
        while !sheetList.contains("\(barnId)  Barn  failed"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
            sheetList = try await crew(["builds", "list"]).stdout
        }
        #expect(sheetList.contains("\(barnId)  Barn  failed  the crew's sheet has not taken it\n"), "\(sheetList)")
        #expect(sheetList.contains("    the crew's sheet has not taken it: the receiver could not be reached\n"), "\(sheetList)")
        // A time still to come, or, once it has passed, that the server is trying now: never a time gone by.
        #expect(
            sheetList.contains("    the server tries the sheet again at ")
                || sheetList.contains("    the server is trying the sheet again now\n"), "\(sheetList)")
        let resent = try await crew(["builds", "retry", barnId])
        #expect(resent.status != 0)
        #expect(
            resent.stdout
                == "\(barnId): the server sends it to the crew's sheet again; the sheet has not taken it yet: the receiver could not be reached\n",
            "\(resent.stdout) \(resent.stderr)")
        // Sync All sends to the sheet again too, and says the sheet has not taken them: never "0 synced, 0 failed"
        // alone while the archive shows them failed.
        let sheetAll = try await crew(["builds", "sync-all"])
        #expect(sheetAll.status != 0)
        #expect(
            sheetAll.stdout.contains("0 synced, 0 failed; ")
                && sheetAll.stdout.contains(" sent to the crew's sheet again; the sheet has not taken ")
                && sheetAll.stdout.hasSuffix(" yet: the receiver could not be reached\n"), "\(sheetAll.stdout) \(sheetAll.stderr)")
        // With the server down, Sync All cannot ask the sheet, and says so rather than "complete".
        await session.stopServer()
        let unasked = try await crew(["builds", "sync-all"])
        #expect(unasked.status != 0)
        #expect(unasked.stdout.contains("is not known: the server could not be asked"), "\(unasked.stdout)")
    }
}

/// Today in UTC, as the devices (run with TZ=UTC) write it. Within five minutes of midnight it first waits for
/// the next day: every record a test makes must be filed under the one day it then checks.
func settledToday() async throws -> String {
    let left = 86_400 - Int(Date().timeIntervalSince1970) % 86_400
    if left < 300 { try await Task.sleep(for: .seconds(left + 1)) }
    return CalendarDay(Date(), timeZone: TimeZone(identifier: "UTC")!).description
}
