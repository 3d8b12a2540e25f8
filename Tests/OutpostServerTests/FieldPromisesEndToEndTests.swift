import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

/// The field apps' promises through the real CLI: a save that does not wait on a server that never answers,
/// a refused scan shown as refused, the 24-hour notice counted from when records were made, and a device
/// clock that jumps (moved with libfaketime; see ``FakeTime``).
@Suite("Field promises end to end")
struct FieldPromisesEndToEndTests {
    @Test(
        "a check-in against a server that accepts and never answers is saved and said at once, stored while the command still waits, which stops before the transport does"
    )
    func saveDoesNotWaitOnSilence() async throws {
        let session = try AppSession()
        let silent = try SilentPort()
        let store = session.root.appendingPathComponent("phone/device.sqlite").path
        let token = try await session.token(user: "ana")
        let initialised = try await OutpostProcess.run(
            ["device", "init", "--server", "http://127.0.0.1:\(silent.port)", "--token", token, "--device-id", "phone", "--store", store])
        #expect(initialised.status == 0, "\(initialised.stderr)")
        // The check-in is on disk while the command still waits on the server: the save went first.
        let running = try await OutpostProcess.start(["attendance", "check-in", "--lat", "51.5", "--lon", "-0.12", "--store", store])
        let url = URL(fileURLWithPath: store)
        let reader = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        var seenWhileRunning = false
        let deadline = ContinuousClock.now.advanced(by: .seconds(120))
        while !seenWhileRunning && running.isRunning && ContinuousClock.now < deadline {
            let stored = try await reader.records(collection: "attendance").contains { $0.syncStatus == .pending }
            seenWhileRunning = stored && running.isRunning
            try await Task.sleep(for: .milliseconds(5))
        }
        let status: Int32
        do {
            status = try await bounded("the check-in against a silent server") { await running.wait() }
        } catch {
            running.signal(SIGKILL)
            throw error
        }
        let checkIn = (status: status, stdout: running.stdout, stderr: running.stderr)
        #expect(seenWhileRunning, "the check-in was not stored before the command ended")
        #expect(checkIn.status == 0, "\(checkIn.stderr)")
        // The first line comes with the save, before the server was heard from; the last one says what the wait
        // found, and a record still pending (not "not synced: …", which marks it failed) means the command
        // stopped waiting for the server before the transport gave up on it.
        let lines = checkIn.stdout.split(separator: "\n")
        #expect(
            lines.first?.hasPrefix("Check-in at") == true && lines.first?.hasSuffix("— saved on this device") == true, "\(checkIn.stdout)")
        #expect(
            lines.last == "not synced yet: the server has not answered within 1 s; it stays queued and goes with the next sync",
            "\(checkIn.stdout)")
        let pending = try await OutpostProcess.run(["device", "records", "--pending", "--store", store])
        #expect(pending.stdout.contains("⏳ pending  attendance/ana."), "\(pending.stdout)")
        // The port stays silent, not closed, until the end.
        withExtendedLifetime(silent) {}
    }

    @Test(
        "a money-field conflict whose answer the link lost is a conflict on the next sync: not waiting, listed as refused, and settled by resolve"
    )
    func conflictThroughLostAnswer() async throws {
        let session = try AppSession()
        try await session.startServer()
        let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
        let phone = try await session.device("phone-mia", user: "mia", through: proxy.port)
        let tablet = try await session.device("tablet-mia", user: "mia")
        let registered = try await phone([
            "activity", "register", "--type", "call", "--date", "2026-11-20", "--duration", "30", "--travel-expense", "10",
        ])
        let id = try #require(registered.stdout.split(separator: "(").last?.split(separator: ")").first.map(String.init), "\(registered.stdout)")
        #expect(try await tablet(["activity", "list"]).stdout.contains(id))

        // The phone, offline, edits the money field; the tablet, online, edits it too.
        proxy.inject(.drop)
        #expect(try await phone(["activity", "edit", id, "--travel-expense", "30"]).stdout.contains("Saved offline"))
        #expect(try await tablet(["activity", "edit", id, "--travel-expense", "20"]).stdout.contains("Activity updated"))
        // The phone's push reaches the server, which records the conflict; its answer is lost on the way back.
        proxy.inject(.cutAnswers(toRequestsStartingWith: "POST /v1/push"))
        let cut = try await phone(["device", "sync"])
        #expect(!cut.stdout.contains("refused"), "\(cut.stdout) \(cut.stderr)")
        #expect(cut.stdout.contains("The connection to the server broke before it answered"), "\(cut.stdout)")
        let recorded = try await session.get("/v1/conflicts?collection=activities", as: ConflictsResponse.self).conflicts
        #expect(recorded.map(\.attemptedFields) == [["travel_expense": "30.00"]], "the push did not reach the server: \(cut.stdout)")
        // The link returns: the push goes again, answered as the conflict it was.
        proxy.inject(nil)
        let sync = try await phone(["device", "sync"])
        #expect(sync.stdout.contains("1 refused: Conflict on a protected field"), "\(sync.stdout) \(sync.stderr)")
        let status = try await phone(["device", "status"]).stdout
        #expect(status.contains("refused:  1") && status.contains("Nothing waiting to sync"), "\(status)")
        let again = try await phone(["device", "sync"]).stdout
        #expect(!again.contains("failed, 1") && !again.contains("1 synced"), "\(again)")
        let refused = try await phone(["device", "records", "--refused"]).stdout
        #expect(refused.contains("yours: travel_expense=30.00   server's: travel_expense=20.00"), "\(refused)")
        let resolved = try await phone(["device", "resolve", id, "--keep-server"])
        #expect(resolved.status == 0, "\(resolved.stdout) \(resolved.stderr)")
        #expect(try await phone(["activity", "list"]).stdout.contains("travel 20.00"))
        #expect(try await phone(["device", "status"]).stdout.contains("refused:  0"))
        try await proxy.stop()
    }

    @Test("a server answering 500, and one that drops uploads while it answers, are told as such: never as the device being offline")
    func serverTroubleIsNotOffline() async throws {
        let session = try AppSession()
        try await session.startServer()
        let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
        let crew = try await session.device("crew-1", user: "cal", through: proxy.port)
        proxy.inject(.answer(status: 500))
        let build = try await crew(["builds", "save", "--name", "Shed"])
        #expect(build.status == 0, "\(build.stderr)")
        #expect(build.stdout.contains("the server is having trouble (Server error (500))"), "\(build.stdout)")
        let activity = try await crew(["activity", "register", "--type", "call", "--date", "2026-11-20", "--duration", "30"])
        #expect(activity.stdout.contains("the server is having trouble (Server error (500))"), "\(activity.stdout)")
        let status = try await crew(["device", "status"]).stdout
        #expect(status.contains("Online — the server is having trouble"), "\(status)")
        // A list screen that could not fetch the server's changes says so, and why, above what the device holds.
        // (A delivery of what waits, retried past the screen's 2 s on the failing server, is said first.)
        let listed = try await crew(["activity", "list"]).stdout
        let lines = listed.split(separator: "\n")
        #expect(
            lines.first?.hasPrefix("not refreshed: the server ") == true
                || (lines.first?.hasPrefix("still sending after 2 s; ") == true
                    && lines.dropFirst().first?.hasPrefix("not refreshed: the server ") == true),
            "\(listed)")
        for said in [build.stdout, activity.stdout, status] {
            #expect(!said.contains("connected") && !said.contains("cannot be reached") && !said.contains("Offline"), "\(said)")
        }

        // The server answers its probe and its uploads are cut before the answer: the connection broke.
        proxy.inject(.cutAnswers(toRequestsStartingWith: "POST /v1/push"))
        let dropped = try await crew(["builds", "save", "--name", "Roof"])
        #expect(!dropped.stdout.contains("connected") && !dropped.stdout.contains("cannot be reached"), "\(dropped.stdout)")
        // The save's own delivery waits for a probe at most a second, which a loaded machine may exceed: a sync
        // pushes whatever the probe says, and each try is told as the connection breaking.
        let cut = try await crew(["device", "sync"])
        #expect(cut.stdout.contains("not sent yet: the connection to the server broke before it answered"), "\(cut.stdout)")
        #expect(!cut.stdout.contains("cannot be reached") && !cut.stdout.contains("could not be reached"), "\(cut.stdout)")

        // The link heals: everything goes, each once.
        proxy.inject(nil)
        let synced = try await crew(["device", "sync"])
        #expect(synced.stdout.contains("3 synced, 0 failed"), "\(synced.stdout) \(synced.stderr)")
        try await proxy.stop()
    }

    @Test(
        "a scan on a server not known to take records is answered at once, then delivered as every save is: a server answering 500, one that never answers, and a refusal that comes after the door's answer"
    )
    func scanOnTroubledServer() async throws {
        let session = try AppSession()
        try await session.startServer()
        let organizer = try await session.importRoster(guests: 20)
        let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
        let door = try await session.device("door-1", user: "sam", through: proxy.port)
        #expect(try await door(["event", "open", "gala"]).stdout.contains("Ready for offline"))

        proxy.inject(.answer(status: 500))
        let failing = try await door(["event", "scan", "g000001"])
        var lines = failing.stdout.split(separator: "\n").map(String.init)
        #expect(failing.status == 0, "\(failing.stderr)")
        #expect(lines.first?.hasPrefix("Checked in: g000001") == true && lines.first?.contains("pending sync") == true, "\(failing.stdout)")
        // The second line says why the scan waits: the server's trouble, once the probe a second allows has
        // answered (on a loaded machine it may not have).
        #expect(lines.count == 2 && lines.last?.hasPrefix("not synced yet: the server ") == true, "\(failing.stdout)")
        #expect(!failing.stdout.contains("cannot be reached") && !failing.stdout.contains("offline"), "\(failing.stdout)")

        proxy.inject(.delay(.seconds(300)))
        let silent = try await door(["event", "scan", "g000002"])
        lines = silent.stdout.split(separator: "\n").map(String.init)
        #expect(silent.status == 0, "\(silent.stderr)")
        #expect(lines.first?.hasPrefix("Checked in: g000002") == true && lines.first?.hasSuffix("(saved on this device, pending sync)") == true)
        #expect(
            lines.last == "not synced yet: the server has not answered within 1 s; it stays queued and goes with the next sync", "\(silent.stdout)")
        // The status screen says so too, within its bound: a server not answering is no device offline.
        let status = try await door(["device", "status"]).stdout
        #expect(status.contains("(not answering: no answer within 1 s)") && !status.contains("Offline"), "\(status)")
        #expect(status.contains("pending:  2"), "\(status)")

        // The guest was cancelled after the door's download, and the server answers too slowly for the lookup:
        // the door decides from the device, then the server's refusal comes, and the command ends refused.
        proxy.inject(nil)
        #expect(try await OutpostProcess.run(["roster", "cancel", "--event", "gala", "g000007"], environment: organizer).status == 0)
        proxy.inject(.delay(.milliseconds(50)))
        let late = try await door(["event", "scan", "g000007", "--lookup-wait", "1ms"])
        #expect(late.status != 0)
        #expect(late.stdout.hasPrefix("Checked in: g000007"), "\(late.stdout)")
        #expect(late.stderr == "outpost: refused by the server after all: Registration cancelled — refer to organizer\n", "\(late.stderr)")
        proxy.inject(nil)
        let after = try await door(["device", "status"]).stdout
        #expect(after.contains("pending:  0") && after.contains("refused:  1"), "\(after)")
        try await proxy.stop()
    }

    @Test(
        "a door on a slow link, deciding before it learnt of another door's scan, is told the guest was already checked in there: never that the server has its own scan"
    )
    func duplicateScanOnSlowLink() async throws {
        let session = try AppSession()
        try await session.startServer()
        try await session.importRoster(guests: 20)
        let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
        let slow = try await session.device("door-slow", user: "sam", through: proxy.port)
        let hall = try await session.device("door-hall", user: "sam")
        #expect(try await slow(["event", "open", "gala"]).stdout.contains("Ready for offline"))
        #expect(try await hall(["event", "open", "gala"]).stdout.contains("Ready for offline"))
        #expect(try await hall(["event", "scan", "g000010", "--lookup-wait", "30s"]).stdout.contains("(synced)"))

        // Each chunk waits 100 ms: the 1 ms lookup cannot learn of the hall's scan before the door decides.
        proxy.inject(.delay(.milliseconds(100)))
        let late = try await slow(["event", "scan", "g000010", "--lookup-wait", "1ms"])
        #expect(late.status == 0, "\(late.stderr)")
        #expect(late.stdout.contains("already checked in at ") && late.stdout.contains(" by door-hall: the server keeps that scan"), "\(late.stdout)")
        #expect(!late.stdout.contains("synced: the server has it"), "\(late.stdout)")
        proxy.inject(nil)
        let stored = try await slow(["device", "records"]).stdout
        #expect(stored.contains("scanned_by=door-hall") && !stored.contains("scanned_by=door-slow"), "\(stored)")
        try await proxy.stop()
    }

    @Test("a status screen whose delivery outlasts its wait says the rest goes with the next sync, never that it is syncing")
    func statusOutlastingItsWait() async throws {
        let session = try AppSession()
        try await session.startServer()
        let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
        let phone = try await session.device("phone", user: "ana", through: proxy.port)
        proxy.inject(.drop)
        #expect(try await phone(["device", "put", "notes", "n1", "text=hi"]).status == 0)
        // The probe is answered; every push's answer is lost, so the delivery tries again past the screen's 2 s.
        proxy.inject(.cutAnswers(toRequestsStartingWith: "POST /v1/push"))
        let status = try await phone(["device", "status"]).stdout
        #expect(status.contains("still sending after 2 s; 1 record goes with the next sync"), "\(status)")
        #expect(!status.contains("syncing"), "\(status)")
        try await proxy.stop()
    }

    @Test(
        "three doors offline scan one guest: each ends showing the scan the server keeps, the first by scan time, whatever order they sync in and whatever answer was lost"
    )
    func doorsOfflineOneGuest() async throws {
        let session = try AppSession()
        try await session.startServer()
        try await session.importRoster(guests: 20)
        var proxies: [String: FaultProxy] = [:]
        var doors: [String: (_ arguments: [String]) async throws -> OutpostProcess.Output] = [:]
        for name in ["door-a", "door-b", "door-c"] {
            let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
            let door = try await session.device(name, user: "sam", through: proxy.port)
            #expect(try await door(["event", "open", "gala"]).stdout.contains("Ready for offline"))
            proxy.inject(.drop)
            (proxies[name], doors[name]) = (proxy, door)
        }
        // Door b scans first, then a, then c, all offline.
        for name in ["door-b", "door-a", "door-c"] {
            #expect(try await doors[name]!(["event", "scan", "g000007"]).status == 0)
        }
        func stored(_ name: String) async throws -> String { try await doors[name]!(["device", "records"]).stdout }

        // a syncs first: its scan is stored. b's earlier scan then takes its place.
        proxies["door-a"]!.inject(nil)
        #expect(try await doors["door-a"]!(["device", "sync"]).stdout.contains("1 synced, 0 failed"))
        proxies["door-b"]!.inject(nil)
        #expect(try await doors["door-b"]!(["device", "sync"]).stdout.contains("1 synced, 0 failed"))
        // c's first answer is lost; sent again, it is told the server keeps b's, and shows it.
        proxies["door-c"]!.inject(.cutAnswers(toRequestsStartingWith: "POST /v1/push"))
        #expect(try await doors["door-c"]!(["device", "sync"]).status != 0)
        proxies["door-c"]!.inject(nil)
        let sync = try await doors["door-c"]!(["device", "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(
            sync.stdout.contains("0 synced, 0 failed; 1 already recorded on another device first: the server keeps that one"),
            "\(sync.stdout)")
        let atC = try await stored("door-c")
        #expect(atC.contains("scanned_by=door-b") && atC.contains("✓ synced"), "\(atC)")
        // a learns of b's with its next refresh.
        let refreshed = try await doors["door-a"]!(["event", "refresh"]).stdout
        #expect(refreshed.contains("gala: 1 check-in fetched from the server"), "\(refreshed)")
        let atA = try await stored("door-a")
        #expect(atA.contains("scanned_by=door-b") && !atA.contains("scanned_by=door-a"), "\(atA)")
        // A scan again says so.
        let again = try await doors["door-c"]!(["event", "scan", "g000007", "--lookup-wait", "30s"]).stdout
        #expect(again.contains("by door-b"), "\(again)")
        for proxy in proxies.values { try await proxy.stop() }
    }

    @Test(
        "a server whose every answer breaks off part-way is reachable: a check-in is made online, told as the connection breaking and never as offline, and goes once the link heals"
    )
    func brokenAnswersAreNotOffline() async throws {
        let session = try AppSession()
        try await session.startServer()
        let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
        let phone = try await session.device("phone", user: "ana", through: proxy.port)
        proxy.inject(.cutAnswersPartway(toRequestsStartingWith: ""))
        let checkIn = try await phone(["attendance", "check-in", "--lat", "51.5", "--lon", "-0.12"])
        #expect(checkIn.status == 0, "\(checkIn.stderr)")
        #expect(checkIn.stdout.lowercased().contains("the connection to the server broke before it answered"), "\(checkIn.stdout)")
        // The server may have taken it: the line does not say it is missing there.
        #expect(checkIn.stdout.contains("not confirmed yet: ") && !checkIn.stdout.contains("not synced yet"), "\(checkIn.stdout)")
        let status = try await phone(["device", "status"]).stdout
        #expect(status.contains("Online — the server is having trouble"), "\(status)")
        for said in [checkIn.stdout, status] {
            #expect(!said.contains("offline") && !said.contains("Offline") && !said.contains("cannot be reached"), "\(said)")
        }
        proxy.inject(nil)
        let history = try await phone(["attendance", "history"]).stdout
        #expect(history.contains("✓ synced") && !history.contains("(offline entry)"), "\(history)")
        try await proxy.stop()
    }

    @Test(
        "a check-in made on two of the person's devices is one record: the first made stands on both, the later device is told so, and neither is refused"
    )
    func checkInOnTwoDevices() async throws {
        let session = try AppSession()
        try await session.startServer()
        let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
        let phone = try await session.device("phone-ana", user: "ana", through: proxy.port)
        let tablet = try await session.device("tablet-ana", user: "ana")
        // The phone checks in first, with no link; then the tablet, online.
        proxy.inject(.drop)
        let first = try await phone(["attendance", "check-in", "--lat", "51.5", "--lon", "-0.12"]).stdout
        let time = try #require(first.firstMatch(of: /^Check-in at (\d\d:\d\d) — saved/).map { String($0.output.1) }, "\(first)")
        let second = try await tablet(["attendance", "check-in", "--lat", "40", "--lon", "-3.7"])
        #expect(second.status == 0 && second.stdout.contains("synced: the server has it"), "\(second.stdout)")

        // The phone's link returns: its check-in, made first, takes the record's place.
        proxy.inject(nil)
        let status = try await phone(["attendance", "status"]).stdout
        let lines = status.split(separator: "\n").map(String.init)
        #expect(lines.first == "sent 1 record that was waiting to sync", "\(status)")
        #expect(lines.dropFirst().first == "Checked In at \(time) · ✓ synced", "\(status)")
        #expect(!status.contains("refused"), "\(status)")
        let history = try await tablet(["attendance", "history"]).stdout
        #expect(history.contains("51.50000,-0.12000  ✓ synced") && !history.contains("40.00000"), "\(history)")

        // A third device checks in later still: told that the first stands, and shown it; not refused.
        let laptop = try await session.device("laptop-ana", user: "ana")
        let third = try await laptop(["attendance", "check-in", "--lat", "48.8", "--lon", "2.35"])
        let said = third.stdout.split(separator: "\n").map(String.init)
        #expect(third.status == 0, "\(third.stderr)")
        #expect(said.dropFirst().first == "already recorded on another device first: the server keeps that one", "\(third.stdout)")
        #expect(said.last == "Checked In at \(time) · ✓ synced", "\(third.stdout)")
        // It shows the kept check-in whole: the phone's place, and that it was made offline.
        let kept = try await laptop(["attendance", "history"]).stdout
        #expect(kept.contains("\(time)  check-in   51.50000,-0.12000  ✓ synced  (offline entry)"), "\(kept)")
        #expect(try await laptop(["device", "records", "--refused"]).stdout.contains("no refused records"))

        // A spare phone, never synced and with no link, checks out: it cannot know of the check-in, so the
        // check-out is saved and the server, which holds the check-in, takes it.
        let spare = try await session.device("spare-ana", user: "ana", through: proxy.port)
        proxy.inject(.drop)
        let checkOut = try await spare(["attendance", "check-out", "--lat", "51.5", "--lon", "-0.12"])
        #expect(checkOut.status == 0, "\(checkOut.stderr)")
        #expect(
            checkOut.stdout.contains(
                "no check-in of today on this device: the server takes this check-out if it holds one from your other devices"),
            "\(checkOut.stdout)")
        proxy.inject(nil)
        let out = try await spare(["attendance", "status"]).stdout
        #expect(out.contains("Checked Out at ") && out.contains("✓ synced"), "\(out)")
        try await proxy.stop()
    }

    @Test("a guest cancelled after the download, scanned online before a refresh, is refused at the door, listed as refused, and can be discarded")
    func refusedScan() async throws {
        let session = try AppSession()
        try await session.startServer()
        let organizer = try await session.importRoster(guests: 20)
        let door = try await session.device("door-1", user: "sam")
        #expect(try await door(["event", "open", "gala"]).stdout.contains("Ready for offline"))
        #expect(try await OutpostProcess.run(["roster", "cancel", "--event", "gala", "g000007"], environment: organizer).status == 0)

        // Each scan is given the time to learn the server answers, on a loaded machine: a door that knows it waits
        // for the verdict.
        let scan = try await door(["event", "scan", "g000007", "--lookup-wait", "30s"])
        #expect(scan.status != 0)
        #expect(scan.stderr == "outpost: Registration cancelled — refer to organizer\n", "\(scan.stdout) \(scan.stderr)")
        #expect(!scan.stdout.contains("Checked in"))
        // Scanned again, the door still says no.
        #expect(
            try await door(["event", "scan", "g000007", "--lookup-wait", "30s"]).stderr == "outpost: Registration cancelled — refer to organizer\n")
        let pending = try await door(["event", "pending"]).stdout
        #expect(pending.contains("0 check-ins pending sync") && pending.contains("1 check-in refused by the server"), "\(pending)")
        #expect(pending.contains("g000007") && pending.contains("Registration cancelled"))
        #expect(try await door(["device", "records", "--refused"]).stdout.contains("⛔ refused  checkins/gala/g000007"))
        // The device reports the refusal as one: a warning of its own on the server, never a 24-hour failure.
        #expect(try await door(["device", "status"]).stdout.contains("refused:  1"))
        let logs = await session.stopServer()
        let rejected = logs.split(separator: "\n").filter { $0.contains("Rejected Record") }
        #expect(rejected.count == 1, "\(logs)")
        let entry = try rejected.first.flatMap { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(entry?["severity"] as? String == "WARNING")
        #expect(!logs.contains("Persistent Sync Failure"), "\(logs)")
        try await session.startServer()
        let discarded = try await door(["device", "discard", "g000007", "--collection", "checkins"])
        #expect(discarded.stdout.contains("discarded checkins/gala/g000007"), "\(discarded.stdout) \(discarded.stderr)")
        #expect(try await door(["device", "records", "--refused"]).stdout.contains("no refused records"))
        // A guest on the roster still checks in, synced.
        #expect(try await door(["event", "scan", "g000008", "--lookup-wait", "30s"]).stdout.contains("(synced)"))
    }

    @Test("a device id another user owns: the writes are set aside as refused with the reason, not retried for ever as failed")
    func deviceOwnedByAnother() async throws {
        let session = try AppSession()
        try await session.startServer()
        // ana's phone-x speaks for ana from its first push.
        let ana = try await session.device("phone-x", user: "ana")
        #expect(try await ana(["device", "put", "notes", "n1", "text=mine"]).stdout.contains("synced"))

        // ben's store, under the same device id.
        let store = ["--store", session.root.appendingPathComponent("ben/device.sqlite").path]
        let ben: ([String]) async throws -> OutpostProcess.Output = { try await OutpostProcess.run($0 + store) }
        #expect(
            try await ben(["device", "init", "--server", session.url, "--token", try await session.token(user: "ben"), "--device-id", "phone-x"])
                .status == 0)
        let put = try await ben(["device", "put", "notes", "n2", "text=his"])
        #expect(put.status == 1 && put.stdout.contains("refused by the server") && put.stdout.contains("belongs to another user"), "\(put.stdout)")
        let status = try await ben(["device", "status"]).stdout
        #expect(status.contains("refused:  1") && status.contains("failed:   0") && status.contains("pending:  0"), "\(status)")
        #expect(try await ben(["device", "sync"]).stdout.contains("0 synced, 0 failed"))
        let refused = try await ben(["device", "records", "--refused"]).stdout
        #expect(refused.contains("notes/n2") && refused.contains("an organizer can release it"), "\(refused)")
    }

    @Test("device run against a reachable server never says offline: before its first probe the connection is being checked")
    func runDoesNotGuessOffline() async throws {
        let session = try AppSession()
        try await session.startServer()
        _ = try await session.device("phone", user: "ana")
        let store = session.root.appendingPathComponent("phone/device.sqlite").path
        let run = try await OutpostProcess.start(["device", "run", "--probe-interval", "1s", "--store", store])
        _ = try await run.waitFor("online: (All records synced)")
        #expect(await run.stop(SIGINT) == 0)
        #expect(!run.stdout.contains("offline"), "\(run.stdout)")
    }

    @Test(
        "records made offline escalate once the device's clock says they are a day old: at the next start, with no sync tried, on every screen; the notice goes when they sync",
        .requires(.faketime, .compiler), .timeLimit(.minutes(5)))
    func offlineRecordsEscalate() async throws {
        let session = try AppSession()
        try await session.startServer()
        try await session.importRoster(guests: 5)
        let door = try await session.clockedDevice("door-1", user: "sam")
        #expect(try await door(["event", "open", "gala"], nil).stdout.contains("Ready for offline"))
        await session.stopServer()

        // Offline, a record from each app; on the true clock none has waited a day.
        #expect(try await door(["event", "scan", "g000001"], nil).stdout.contains("Checked in"))
        #expect(try await door(["attendance", "check-in", "--lat", "51.5", "--lon", "-0.12"], nil).stdout.contains("Check-in at"))
        #expect(try await door(["activity", "register", "--type", "call", "--date", "2026-11-20", "--duration", "30"], nil).status == 0)
        #expect(try await door(["builds", "save", "--name", "Shed"], nil).status == 0)
        #expect(try await door(["device", "notice"], nil).stdout.hasPrefix("no notice"))

        // Two days on by the device's clock, every screen shows the notice with its guidance from the start.
        let notice = "notice: 4 records have not synced for over 24 hours"
        let screens = [
            ["attendance", "status"], ["event", "scan", "g000002"], ["event", "pending"], ["activity", "list"], ["builds", "list"],
            ["device", "status"], ["device", "notice"],
        ]
        for screen in screens {
            let shown = try await door(screen, "+48h")
            #expect(shown.stdout.contains(notice) && shown.stdout.contains("contact your organizer"), "\(screen): \(shown.stdout) \(shown.stderr)")
        }
        // No sync was tried: the four made two days ago each show on their row as not synced for over 24 hours,
        // the scan just made as pending.
        let waiting = try await door(["device", "records"], "+48h").stdout
        #expect(waiting.components(separatedBy: "✗ not synced for over 24 hours").count - 1 == 4, "\(waiting)")
        #expect(waiting.components(separatedBy: "⏳ pending").count - 1 == 1, "\(waiting)")
        let builds = try await door(["builds", "list"], "+48h").stdout
        #expect(builds.contains("  Shed  failed") && builds.contains("    not uploaded for over 24 hours: "), "\(builds)")
        #expect(try await door(["attendance", "history"], "+48h").stdout.contains("✗ not synced for over 24 hours"))

        // Back online, still two days on: the four sync and the notice goes. The scan made on that clock is
        // refused for its time and waits, failed, for the clock to be right; on the true clock it goes too.
        try await session.startServer()
        let retried = try await door(["device", "sync"], "+48h")
        #expect(retried.stdout.contains("4 synced, 1 failed"), "\(retried.stdout) \(retried.stderr)")
        #expect(try await door(["device", "notice"], "+48h").stdout.hasPrefix("no notice"))
        #expect(try await door(["device", "sync"], nil).stdout.contains("1 synced, 0 failed"))
        let synced = try await door(["device", "records"], nil).stdout
        #expect(synced.components(separatedBy: "✓ synced").count - 1 == 5, "\(synced)")
        let scan = try await session.get("/v1/audit?collection=checkins&scope=gala&recordId=g000002", as: AuditResponse.self)
        let entry = try #require(scan.entries.first)
        #expect(entry.clientTimestamp.date <= Date())
        #expect(entry.fields["scanned_at"] == .string(entry.clientTimestamp.iso8601))
    }

    @Test(
        "a device clock that jumped a day ahead, then fell behind: nothing is lost, a record's later write stays the later, and everything syncs",
        .requires(.faketime, .compiler), .timeLimit(.minutes(5)))
    func clockJumpsForwardAndBack() async throws {
        let session = try AppSession()
        try await session.startServer()
        let phone = try await session.clockedDevice("phone", user: "ana")

        // A day and an hour ahead: the server refuses the times, so the writes wait, failed, with the reason.
        let ahead = try await phone(["device", "put", "notes", "n1", "v=during"], "+25h")
        #expect(ahead.status == 0 && ahead.stdout.contains("clock is ahead"), "\(ahead.stdout) \(ahead.stderr)")
        let activity = try await phone(["activity", "register", "--type", "call", "--date", "2026-11-20", "--duration", "30"], "+25h")
        #expect(activity.stdout.contains("clock is ahead"), "\(activity.stdout) \(activity.stderr)")

        // Then three hours behind, offline: the next write is stamped near that clock, not after the jumped ones.
        await session.stopServer()
        let behind = try await phone(["device", "put", "notes", "n1", "v=after"], "-3h")
        #expect(
            behind.stdout.contains("saved notes/n1 on this device") && behind.stdout.contains("the server cannot be reached"),
            "\(behind.stdout) \(behind.stderr)")

        // Back online on the true clock, hours later than that write: all three go, the jumped ones stamped
        // again before it, and the server holds n1's writes in the order they were made.
        try await session.startServer()
        let synced = try await phone(["device", "sync"], nil)
        #expect(synced.stdout.contains("2 synced, 0 failed"), "\(synced.stdout) \(synced.stderr)")
        let records = try await phone(["device", "records"], nil).stdout
        #expect(records.components(separatedBy: "✓ synced").count - 1 == 2 && !records.contains("pending"), "\(records)")
        let audit = try await session.get("/v1/audit?collection=notes&recordId=n1", as: AuditResponse.self)
        #expect(audit.entries.map { $0.fields["v"] } == ["during", "after"], "\(audit.entries.map { ($0.fields, $0.clientTimestamp) })")
        #expect(audit.entries.allSatisfy { $0.clientTimestamp.date < Date() })
    }
}
