import ArgumentParser
import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import OutpostApps
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostRecords
import OutpostServer
import ServiceLifecycle

/// `outpost demo`: a day at the venue, narrated, against a real server and three field devices.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "A day at the venue: a server, 1,000 guests, three devices, a network failure, and the reconciliation.",
        discussion: """
            Starts a server on an embedded SQLite store in a temporary folder and three field devices in this \
            process, talking HTTP over loopback. Then it serves the sync monitor until Ctrl-C.
            """)

    @Flag(help: "Skip the pauses between acts.")
    var fast = false
    @Flag(help: "Keep the server's and devices' data when the demo ends.")
    var keep = false
    @Flag(name: .customLong("no-serve"), help: "End after the reconciliation; exit 0 only if it balanced.")
    var noServe = false
    @Option(help: "Port for the server (0 picks a free one).")
    var port: Int = 0

    static let event = "gala"
    static let tenant = "demo"
    static let guests = 1000

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be from 0 to 65535") }
    }

    func run() async throws {
        // The server logs JSON lines on stderr; only errors, so that the story reads on stdout.
        LoggingSystem.bootstrap { label in JSONLogHandler(label: label, level: .error) }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-demo-\(UUID().uuidString.prefix(8))")
        let narrator = Narrator(pause: fast ? .zero : .milliseconds(1200))
        let storage = try SQLiteStorage(directory: root.appendingPathComponent("server"))
        let (ports, listening) = AsyncStream.makeStream(of: Int.self)
        var configuration = ServerConfiguration(host: "127.0.0.1", port: port)
        configuration.escalationEnabled = true
        let app = try buildApplication(
            configuration: configuration, storage: storage, logger: Logger(label: "outpost-demo"),
            onListening: { listening.yield($0) })
        let group = ServiceGroup(
            configuration: .init(services: [app], gracefulShutdownSignals: [.sigterm, .sigint], logger: Logger(label: "outpost-demo")))
        let server = Task { try await group.run() }
        defer {
            if !keep { try? FileManager.default.removeItem(at: root) }
        }
        var iterator = ports.makeAsyncIterator()
        guard let boundPort = await iterator.next() else { throw CLIError("the demo server did not start") }
        let base = URL(string: "http://127.0.0.1:\(boundPort)")!

        await narrator.act(1, "A server on an embedded SQLite store")
        narrator.line("listening on \(base.absoluteString); data in \(root.path)")

        let authority = try await TokenAuthority(secret: try await storage.signingSecret(creatingWith: { TokenAuthority.generateSecret() }))
        func token(_ user: String, _ name: String, _ role: Role) async throws -> String {
            try await authority.token(
                for: Identity(tenant: Self.tenant, userId: user, role: role, name: name), lifetime: .seconds(12 * 3600),
                now: Date())
        }
        let organizerToken = try await token("olga", "Olga (organizer)", .organizer)

        let (balanced, signIn) = try await withDeviceHTTPClient { client in
            let organizer = HTTPSyncTransport(baseURL: base, token: organizerToken, client: client)
            let story = Story(base: base, client: client, root: root, narrator: narrator, organizer: organizer, storage: storage)
            let balanced = try await story.tell(tokens: [
                try await token("sam", "Sam Door", .staff), try await token("kim", "Kim Hall", .staff),
                try await token("lee", "Lee Terrace", .staff),
            ])
            return (balanced, try await organizer.signInCode())
        }

        say("")
        say("Sync monitor:  \(base.absoluteString)/admin/monitor?event=\(Self.event)")
        say("Sign in:       \(base.absoluteString)\(signIn.path)  (once, within 5 minutes)")
        if keep { say("Data kept in:  \(root.path)") }
        if noServe {
            await group.triggerGracefulShutdown()
            _ = try? await server.value
            say(balanced ? "The day balanced." : "The day did NOT balance.")
            if !balanced { throw ExitCode(1) }
            return
        }
        say("Serving until Ctrl-C.")
        try await server.value
    }
}

/// The acts of the demo, in order.
struct Story {
    let base: URL
    let client: HTTPClient
    let root: URL
    let narrator: Narrator
    let organizer: HTTPSyncTransport
    let storage: SQLiteStorage
    let venue = VenueNetwork()
    /// The devices' clock: the wall clock, until the story moves it a day on to show an escalation.
    let deviceClock = DemoClock()

    /// A field device of the story: its store, engine and apps.
    struct FieldDevice {
        var name: String
        var device: Device
        var desk: CheckInDesk { CheckInDesk(device: device, event: Demo.event) }
    }

    func open(_ name: String, token: String?) async throws -> FieldDevice {
        let url = root.appendingPathComponent(name).appendingPathComponent("device.sqlite")
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        if let token {
            try await Device.initialize(store: store, server: base, token: token, deviceId: name)
            try await store.setSetting(LocalStore.currentEventSetting, Demo.event)
        }
        let http = HTTPSyncTransport(baseURL: base, token: try await store.setting("token") ?? "", client: client)
        let clock = deviceClock
        let device = try await Device.open(
            store: store, transport: venue.link(http),
            configure: { configuration in
                configuration.appVersion = "outpost-demo/\(OutpostVersion.current)"
                configuration.retryDelays = []
            }, now: { clock.now })
        return FieldDevice(name: name, device: device)
    }

    func tell(tokens: [String]) async throws -> Bool {
        await narrator.act(2, "The organizer creates the event and imports \(Demo.guests) guests")
        let rows: [RosterCSV.Row]
        switch RosterCSV.parse(RosterCSV.generate(guests: Demo.guests), event: Demo.event) {
        case .success(let parsed): rows = parsed
        case .failure(let problems): throw CLIError("the demo roster is invalid: \(problems)")
        }
        let now = Timestamp(Date())
        try await pushRoster(
            [
                Mutation(
                    idempotencyKey: "event:\(Demo.event):\(now.iso8601)", collection: EventRecord.collection,
                    recordId: Demo.event, op: .upsert,
                    fields: [EventRecord.Field.name: "Annual Gala", EventRecord.Field.opsContact: "ops@example.org"],
                    clientTimestamp: now)
            ] + rows.map { rosterMutation(event: Demo.event, guestId: $0.guestId, fields: $0.fields, at: now) },
            via: organizer)
        narrator.good("event \(Demo.event) with \(rows.count) guests; ops contact ops@example.org")

        await narrator.act(3, "Three field devices download the roster and staff check in with GPS")
        var devices: [FieldDevice] = []
        for (index, name) in ["door-1", "hall-2", "terrace-3"].enumerated() {
            let field = try await open(name, token: tokens[index])
            let data = ReferenceData(store: field.device.store, transport: field.device.transport)
            let bar = ProgressBar(label: "   \(name) roster")
            _ = try await data.download(collection: Guest.collection, scope: Demo.event) { bar.update($0) }
            bar.finish()
            await field.device.engine.probe()
            let log = try AttendanceLog(
                device: field.device, location: FixedLocation(LocationFix(latitude: 51.5072 + Double(index) / 1000, longitude: -0.1276)))
            let entry = try await log.checkIn()
            narrator.good("\(name): \(entry.action.stateText), \(entry.syncStatus.rawValue)")
            devices.append(field)
        }

        await narrator.act(4, "Doors open: scans sync as they happen")
        for (index, field) in devices.enumerated() {
            for guest in stride(from: 500 + index * 20, to: 520 + index * 20, by: 1) {
                _ = try await field.desk.scan(Self.guest(guest))
            }
            narrator.good("\(field.name): 20 scans, \(await field.device.engine.status.pendingCount) pending")
        }

        await narrator.act(5, "The venue network fails: scans queue on the devices")
        venue.isUp = false
        for field in devices { await field.device.engine.probe() }
        for (index, field) in devices.enumerated() {
            let first = 20 + index * 150
            for guest in first..<(first + 150) {
                _ = try await field.desk.scan(Self.guest(guest))
            }
            narrator.warn("\(field.name): offline, \(await field.device.engine.status.pendingCount) check-ins pending")
        }
        if case .alreadyCheckedIn(let scan) = try await devices[0].desk.scan(Self.guest(20)) {
            narrator.line("door-1 scans \(Self.guest(20)) again: already checked in by \(scan.scannedBy)")
        }
        // Meanwhile, on the organizer's own connection, a registration door-1 just scanned is cancelled.
        try await pushRoster(
            [rosterMutation(event: Demo.event, guestId: Self.guest(25), op: .delete, at: Timestamp(Date()))], via: organizer)
        narrator.line("the organizer cancels \(Self.guest(25)), whom door-1 scanned offline a moment ago")

        await narrator.act(6, "hall-2 is force-quit and relaunched")
        let pendingBefore = await devices[1].device.engine.status.pendingCount
        devices[1] = try await open("hall-2", token: nil)
        let pendingAfter = try await devices[1].device.store.counts().pending
        narrator.good("relaunched from its store on disk: \(pendingAfter) of \(pendingBefore) pending check-ins still there")

        await narrator.act(7, "The network returns: the outboxes drain in chunks of 50")
        venue.isUp = true
        for field in devices {
            // The first push finds the network back; the engine marks itself online.
            let summary = try await field.device.engine.sync { progress in
                guard progress.chunk > 0, progress.retrying == nil else { return }
                narrator.line("\(field.name): chunk \(progress.chunk), \(progress.sent)/\(progress.total) delivered")
            }
            if !summary.isComplete {
                narrator.warn("\(field.name): \(summary)")
            } else {
                narrator.good("\(field.name): \(summary)")
            }
        }

        await narrator.act(8, "A cancelled guest at the door")
        let refreshed = try await ReferenceData(store: devices[2].device.store, transport: devices[2].device.transport)
            .refresh(collection: Guest.collection, scope: Demo.event)
        narrator.line("terrace-3 refreshes its roster: \(refreshed.updated) updated, \(refreshed.removed) removed")
        do {
            _ = try await devices[2].desk.scan(Self.guest(25))
            narrator.bad("terrace-3 let a cancelled guest in")
        } catch let error as ClientError {
            narrator.good("terrace-3 scans \(Self.guest(25)): \(error.message)")
        }

        await narrator.act(9, "A day later: the doors report what has not reached the server")
        // The devices' clocks move a day on (the server's does not): the escalation's real threshold, 24 h.
        deviceClock.advance(by: .seconds(25 * 3600))
        let engine = devices[0].device.engine
        let waiting = try await engine.checkPersistentFailures()
        let status = await engine.status
        if let notice = status.persistentFailureNotice {
            narrator.warn("door-1 shows: \(notice.message) [\(PersistentFailureNotice.actionTitle)]")
        }
        if let refused = status.refusedText { narrator.warn("door-1 shows: \(refused)") }
        let refusedRecords = try await devices[0].device.store.records(.refused)
        let reported =
            waiting.map { "\($0.collection)/\($0.recordId): \($0.lastError)" }
            + refusedRecords.map { "\($0.collection)/\($0.recordId): refused: \($0.syncError ?? "no reason")" }
        narrator.line("reported to the server: \(reported.joined(separator: "; "))")
        if !waiting.isEmpty {
            narrator.line("the server logged an ERROR \"Persistent Sync Failure\" line for each record waiting too long, and pages on them")
        }
        if !refusedRecords.isEmpty {
            narrator.line(
                "the server logged a WARNING \"Rejected Record\" line for each refusal, counted apart: it waits for a person, not for the network")
        }

        await narrator.act(10, "Reconciliation")
        return try await reconcile(devices)
    }

    /// The server's check-ins equal the devices' synced ones, each guest once.
    func reconcile(_ devices: [FieldDevice]) async throws -> Bool {
        var deviceScans: [String: String] = [:]
        var doubled = 0
        for field in devices {
            let synced = try await field.device.store.records(collection: CheckIn.collection)
                .filter { $0.syncStatus == .synced && $0.fields[CheckIn.Field.scannedBy]?.stringValue == field.name }
            for record in synced {
                if deviceScans.updateValue(field.name, forKey: record.recordId) != nil { doubled += 1 }
            }
            let pending = try await field.device.store.counts()
            narrator.line("\(field.name): \(synced.count) check-ins synced, \(pending.pending) pending, \(pending.failed) failed")
        }
        var serverScans: [String: String] = [:]
        var cursor: String?
        var serverDuplicates = 0
        while true {
            let page = try await organizer.pull(collection: CheckIn.collection, scope: Demo.event, cursor: cursor, limit: 1000)
            for change in page.changes where !change.tombstone {
                if serverScans.updateValue(change.fields[CheckIn.Field.scannedBy]?.stringValue ?? "", forKey: change.recordId) != nil {
                    serverDuplicates += 1
                }
            }
            cursor = page.cursor
            if !page.hasMore { break }
        }
        var applied = 0
        for guest in serverScans.keys {
            applied += try await storage.audit(
                tenant: Demo.tenant, collection: CheckIn.collection, recordId: guest, scope: Demo.event
            )
            .filter { $0.status == .applied }.count
        }
        narrator.line("server: \(serverScans.count) check-ins for \(Demo.event), \(applied) applied scans, \(serverDuplicates) duplicates")
        let balanced = serverScans == deviceScans && doubled == 0 && serverDuplicates == 0 && applied == serverScans.count
        if balanced {
            narrator.good("the server's check-ins equal the devices' (\(deviceScans.count)), each guest exactly once")
        } else {
            narrator.bad("the server has \(serverScans.count) check-ins, the devices \(deviceScans.count)")
        }
        return balanced
    }

    static func guest(_ index: Int) -> String { "g\(String(format: "%06d", index))" }
}

/// The wall clock plus an offset the demo can move forward.
final class DemoClock: Sendable {
    private let offset = NIOLockedValueBox<Double>(0)

    var now: Date { Date().addingTimeInterval(offset.withLockedValue { $0 }) }

    func advance(by span: Duration) {
        offset.withLockedValue { $0 += Double(span.components.seconds) }
    }
}
