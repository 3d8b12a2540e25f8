import Foundation
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// The runtime an app makes at launch: sign-in as a state, the work a running device repeats, sign-out.
@Suite("Runtime", .timeLimit(.minutes(5)))
struct RuntimeTests {
    /// A connectivity monitor the test drives.
    final class Switch: ConnectivityMonitor, Sendable {
        let (stream, continuation) = AsyncStream.makeStream(of: Bool.self)
        func changes() -> AsyncStream<Bool> { stream }
        func set(_ online: Bool) { continuation.yield(online) }
    }

    /// One app's world: a folder for its stores, a server, and the clocks the runtime runs on.
    struct App {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-runtime-\(UUID())")
        let server = InMemoryServer()
        let transport: InMemoryTransport
        let clock = ManualClock()
        let now = ManualNow()
        let network = Switch()
        /// The tokens the server takes; nil takes every one.
        let accepted = Accepted()

        init() {
            transport = InMemoryTransport(server: server)
        }

        func configuration(_ location: Outpost.StoreLocation? = nil) -> Outpost.Configuration {
            let (inner, accepted, now) = (transport, accepted, now)
            var configuration = Outpost.Configuration(
                location: location ?? .file(directory.appendingPathComponent("device.sqlite")),
                server: URL(string: "https://sync.example.org")!,
                transport: Outpost.Transport { _, token, credentials in
                    AcceptingTransport(memory: inner, accepted: accepted, bearer: BearerToken(token, credentials: credentials, now: now.closure))
                })
            configuration.deviceId = "phone-1"
            let network = network
            configuration.connectivity = Outpost.Connectivity { _, _ in network }
            configuration.clock = clock
            configuration.now = now.closure
            return configuration
        }

        func remove() { try? FileManager.default.removeItem(at: directory) }
    }

    /// The tokens a test server takes.
    final class Accepted: @unchecked Sendable {
        private let lock = NSLock()
        private var tokens: Set<String>?
        var all: Set<String>? {
            get { lock.withLock { tokens } }
            set { lock.withLock { tokens = newValue } }
        }
    }

    /// The in-memory server behind a bearer token, refusing (401) what `accepted` does not hold.
    struct AcceptingTransport: ForwardingTransport, DeliveryStatusTransport, RecordIdKeyTransport {
        let memory: InMemoryTransport
        let accepted: Accepted
        let bearer: BearerToken
        var inner: any SyncTransport { memory }

        private func authorized<T>(_ call: () async throws -> T) async throws -> T {
            try await bearer.authorizing { token in
                if let tokens = accepted.all, !tokens.contains(token) {
                    let wire = WireError(code: .invalidToken, message: "the token is invalid or expired")
                    throw TransportError(kind: .server, status: 401, wire: wire, message: wire.message)
                }
                return try await call()
            }
        }

        func push(_ request: PushRequest) async throws -> PushResponse { try await authorized { try await inner.push(request) } }
        func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
            try await authorized { try await inner.monitorHeartbeat(heartbeat) }
        }
        func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
            try await authorized { try await memory.reportFailures(report) }
        }
        func deliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
            try await authorized { try await memory.deliveries(collection: collection, scope: scope, recordIds: recordIds) }
        }
        func retryDeliveries(collection: String, scope: String?, recordIds: [String]) async throws -> RecordDeliveries {
            try await authorized { try await memory.retryDeliveries(collection: collection, scope: scope, recordIds: recordIds) }
        }
        func recordIdKey() async throws -> RecordIdKeyResponse { try await authorized { try await memory.recordIdKey() } }
    }

    /// An app's identity provider: it gives `fresh` (nil: the person must sign in), once `gate` lets it answer.
    final class Provider: CredentialsProvider, @unchecked Sendable {
        private let lock = NSLock()
        private var token: String?
        private var askedFor: [String] = []
        let (asked, askedContinuation) = AsyncStream.makeStream(of: String.self)
        let (gate, opening) = AsyncStream.makeStream(of: Void.self)
        let waits: Bool

        init(fresh: String?, waits: Bool = false) {
            token = fresh
            self.waits = waits
        }

        var requests: [String] { lock.withLock { askedFor } }

        func refreshedToken(after rejected: String) async throws -> String? {
            lock.withLock { askedFor.append(rejected) }
            askedContinuation.yield(rejected)
            if waits {
                var iterator = gate.makeAsyncIterator()
                _ = await iterator.next()
            }
            return lock.withLock { token }
        }
    }

    /// A JWT with Outpost's claims (unsigned: the device never checks signatures), expiring `expiresIn` after `now`.
    static func token(
        _ user: String, tenant: String = "acme", now: Date? = nil, expiresIn: TimeInterval? = nil, salt: String = ""
    )
        -> String
    {
        var claims = #"{"tenant":"\#(tenant)","sub":"\#(user)","role":"staff","name":"\#(user)""#
        if let now, let expiresIn { claims += #","exp":\#(Int(now.timeIntervalSince1970 + expiresIn))"# }
        claims += "}"
        return "e30." + Base64URL.encode(Array(claims.utf8)) + ".sig" + salt
    }

    /// The runtime's statuses until one satisfies `condition`, bounded.
    @discardableResult
    static func status(
        of outpost: Outpost, _ what: String, where condition: @escaping @Sendable (SyncStatus) -> Bool
    ) async throws -> SyncStatus {
        try await bounded(what) {
            for await status in await outpost.statusUpdates() where condition(status) { return status }
            throw CancellationError()
        }
    }

    @Test("signed out until a first sign-in, which sets the store up; nothing is made by a sign-in without a server")
    func firstSignIn() async throws {
        let app = App()
        defer { app.remove() }
        var noServer = app.configuration()
        noServer.server = nil
        let bare = try await Outpost(noServer)
        #expect(await bare.status.signIn == .signedOut)
        await #expect(throws: ClientError.self) { try await bare.openDevice }
        let refused = await #expect(throws: ClientError.self) { try await bare.signIn(token: Self.token("ana")) }
        #expect(refused?.code == .notConfigured)
        await #expect(throws: ClientError.self) { try await bare.signIn(token: "") }
        await bare.close()

        let outpost = try await Outpost(app.configuration())
        let tokens = await outpost.tokenUpdates()
        let user = try await outpost.signIn(token: Self.token("ana"))
        #expect(user?.userId == "ana")
        #expect(await outpost.status.signIn == .signedIn)
        let device = try await outpost.openDevice
        #expect(device.deviceId == "phone-1" && device.serverURL.absoluteString == "https://sync.example.org")
        var iterator = tokens.makeAsyncIterator()
        #expect(await iterator.next() == Self.token("ana"))
        await outpost.close()
    }

    @Test("relaunched online, a started runtime sends what an earlier run left queued, and the monitor hears of the device with its event")
    func relaunchSends() async throws {
        let app = App()
        defer { app.remove() }
        app.transport.isOnline = false
        let first = try await Outpost(app.configuration())
        try await first.signIn(token: Self.token("ana"))
        try await first.setCurrentEvent("gala")
        let engine = try await first.openDevice.engine
        for id in ["a", "b"] { try await engine.save(note(id)) }
        await first.close()

        // The app is killed and opens again, with the network back.
        app.transport.isOnline = true
        let outpost = try await Outpost(app.configuration())
        #expect(await outpost.status.signIn == .signedIn)
        #expect(await outpost.status.pendingCount == 2)
        await outpost.start()
        try await Self.status(of: outpost, "both records synced") { $0.pendingCount == 0 && $0.isOnline }
        #expect(await app.server.applied.map(\.mutation.recordId) == ["a", "b"])
        try await bounded("the heartbeat") {
            while await app.server.heartbeats.isEmpty { await Task.yield() }
        }
        #expect(await app.server.heartbeats.last?.event == "gala")
        #expect(await app.server.heartbeats.last?.deviceId == "phone-1")
        await outpost.close()
    }

    @Test("started offline, the device syncs when connectivity returns, and its timers end when it stops")
    func runsTheSchedule() async throws {
        let app = App()
        defer { app.remove() }
        app.transport.isOnline = false
        let outpost = try await Outpost(app.configuration())
        try await outpost.signIn(token: Self.token("ana"))
        await outpost.start()
        app.network.set(false)
        let engine = try await outpost.openDevice.engine
        try await engine.save(note("a"))
        try await Self.status(of: outpost, "offline with one waiting") { $0.connection == .offline && $0.pendingCount == 1 }

        app.transport.isOnline = true
        app.network.set(true)
        try await Self.status(of: outpost, "synced on reconnect") { $0.pendingCount == 0 && $0.failedCount == 0 }
        #expect(await app.server.applied.count == 1)

        // Stopped, nothing of it waits on its timers any more.
        #expect(app.clock.sleeping > 0)
        await outpost.stop()
        #expect(app.clock.sleeping == 0)
        await outpost.close()
    }

    @Test("on the escalation timer, records failing too long raise the notice, with no sync tried")
    func escalatesHourly() async throws {
        let app = App()
        defer { app.remove() }
        var configuration = app.configuration()
        configuration.escalation.threshold = .seconds(3600)
        configuration.retryInterval = .seconds(36_000)
        let outpost = try await Outpost(configuration)
        try await outpost.signIn(token: Self.token("ana"))
        app.transport.isOnline = false
        try await outpost.openDevice.engine.save(note("a"))
        await outpost.start()
        app.network.set(false)
        try await Self.status(of: outpost, "offline") { $0.connection == .offline }
        #expect(await outpost.status.persistentFailureNotice == nil)

        // Two hours on, the hourly check finds the record and raises the notice: the retry timer, which would
        // too, waits ten hours.
        try await bounded("the scheduler's timers") {
            while app.clock.sleeping < 4 { await Task.yield() }
        }
        app.now.advance(seconds: 7200)
        app.clock.advance(by: configuration.escalationInterval)
        let status = try await Self.status(of: outpost, "the notice") { $0.persistentFailureNotice != nil }
        #expect(status.persistentFailureNotice?.count == 1)
        await outpost.close()
    }

    @Test("a token about to expire is renewed through the app's provider before a request sends it: renewing meanwhile, the app told")
    func renewsBeforeExpiry() async throws {
        let app = App()
        defer { app.remove() }
        let expiring = Self.token("ana", now: app.now.date, expiresIn: 120)
        let fresh = Self.token("ana", now: app.now.date, expiresIn: 3600)
        let provider = Provider(fresh: fresh, waits: true)
        app.accepted.all = [fresh]
        let outpost = try await Outpost(app.configuration(), credentials: provider)
        try await outpost.signIn(token: expiring)
        let tokens = await outpost.tokenUpdates()
        let engine = try await outpost.openDevice.engine
        try await engine.save(note("a"))
        let sync = Task { try await engine.sync() }

        var asked = provider.asked.makeAsyncIterator()
        #expect(await asked.next() == expiring)
        try await Self.status(of: outpost, "renewing") { $0.signIn == .renewing }
        provider.opening.yield()
        #expect(try await sync.value(within: testWaitLimit, "the sync").synced == 1)
        #expect(await outpost.status.signIn == .signedIn)
        var told = tokens.makeAsyncIterator()
        #expect(await told.next() == fresh)
        #expect(try await outpost.openDevice.store.setting(Device.SettingName.token) == fresh)
        await outpost.close()
    }

    @Test(
        "a token renewed before it expires keeps the user's keys for record ids; one taken after a refusal forgets them, for the next sync to fetch"
    )
    func renewalKeepsKeys() async throws {
        try await withStore { store, _ in
            let tokens = (0..<3).map { Self.token("ana", salt: "\($0)") }
            try await Device.initialize(store: store, server: URL(string: "https://sync.example.org")!, token: tokens[0], deviceId: "d")
            try await store.setSetting(Device.SettingName.recordIdKeys, #"{"keys":"held"}"#)
            let renewing = StoredCredentials(store: store, app: Provider(fresh: tokens[1]))
            #expect(try await renewing.renewedToken(before: tokens[0]) == tokens[1])
            #expect(try await store.setting(Device.SettingName.recordIdKeys) != nil)
            let refreshing = StoredCredentials(store: store, app: Provider(fresh: tokens[2]))
            #expect(try await refreshing.refreshedToken(after: tokens[1]) == tokens[2])
            #expect(try await store.setting(Device.SettingName.token) == tokens[2])
            #expect(try await store.setting(Device.SettingName.recordIdKeys) == nil)
        }
    }

    @Test("a refused token with no fresh one: the person must sign in; their sign-in clears it and sends what waited")
    func signInAgain() async throws {
        let app = App()
        defer { app.remove() }
        let old = Self.token("ana", salt: "1")
        let new = Self.token("ana", salt: "2")
        app.accepted.all = [new]
        let outpost = try await Outpost(app.configuration(), credentials: Provider(fresh: nil))
        try await outpost.signIn(token: old)
        let engine = try await outpost.openDevice.engine
        try await engine.save(note("a"))
        #expect(try await engine.sync().requiresSignIn)
        #expect(await outpost.status.signIn == .needsSignIn)
        #expect(await app.server.applied.isEmpty)

        // Relaunched, the device still knows.
        await outpost.close()
        let relaunched = try await Outpost(app.configuration(), credentials: Provider(fresh: nil))
        #expect(await relaunched.status.signIn == .needsSignIn)
        await relaunched.start()
        try await relaunched.signIn(token: new)
        #expect(await relaunched.status.signIn == .signedIn)
        app.network.set(true)
        try await Self.status(of: relaunched, "the record synced") { $0.pendingCount + $0.failedCount == 0 }
        #expect(await app.server.applied.map(\.mutation.recordId) == ["a"])
        await relaunched.close()
    }

    @Test("one store: another person is refused while it holds someone's work, even signed out, until a wipe")
    func oneStoreOnePerson() async throws {
        let app = App()
        defer { app.remove() }
        app.transport.isOnline = false
        let outpost = try await Outpost(app.configuration())
        try await outpost.signIn(token: Self.token("ana"))
        try await outpost.openDevice.engine.save(note("a"))

        let other = await #expect(throws: ClientError.self) { try await outpost.signIn(token: Self.token("ben")) }
        #expect(other?.code == .otherUser)
        #expect(try await outpost.openDevice.user?.userId == "ana")

        // Signed out without a wipe: Ana's record stays for her alone.
        try await outpost.signOut()
        #expect(await outpost.status.signIn == .signedOut)
        let stillOther = await #expect(throws: ClientError.self) { try await outpost.signIn(token: Self.token("ben")) }
        #expect(stillOther?.code == .otherUser)
        try await outpost.signIn(token: Self.token("ana"))
        #expect(await outpost.status.pendingCount == 1)

        // A wipe that would lose the record is refused, with nothing changed; discarding it deletes everything.
        let unsynced = await #expect(throws: ClientError.self) { try await outpost.signOut(wipe: true) }
        #expect(unsynced?.code == .unsyncedRecords)
        #expect(await outpost.status.signIn == .signedIn)
        try await outpost.signOut(wipe: true, discardingUnsynced: true)
        let left = try FileManager.default.contentsOfDirectory(atPath: app.directory.path)
        #expect(left.isEmpty, "\(left)")
        try await outpost.signIn(token: Self.token("ben"))
        #expect(await outpost.status.pendingCount == 0)
        await outpost.close()
    }

    @Test("a shared device: each person gets a store of their own, their records wait for them, and a wipe deletes theirs alone")
    func perUserStores() async throws {
        let app = App()
        defer { app.remove() }
        app.transport.isOnline = false
        let location = Outpost.StoreLocation.perUser(directory: app.directory)
        let outpost = try await Outpost(app.configuration(location))
        try await outpost.signIn(token: Self.token("ana"))
        try await outpost.openDevice.engine.save(note("ana-1"))
        let anaDevice = try await outpost.openDevice.deviceId

        try await outpost.signIn(token: Self.token("ben"))
        #expect(try await outpost.openDevice.user?.userId == "ben")
        #expect(await outpost.status.pendingCount == 0)
        let benDevice = try await outpost.openDevice.deviceId
        #expect(anaDevice != benDevice && anaDevice.hasPrefix("phone-1-") && benDevice.hasPrefix("phone-1-"))
        try await outpost.openDevice.engine.save(note("ben-1"))

        // Relaunched, Ben is still the one signed in.
        await outpost.close()
        let relaunched = try await Outpost(app.configuration(location))
        #expect(try await relaunched.openDevice.user?.userId == "ben")
        try await relaunched.signOut(wipe: true, discardingUnsynced: true)
        #expect(await relaunched.status.signIn == .signedOut)

        // Ana's record waited for her, sealed in her store.
        try await relaunched.signIn(token: Self.token("ana"))
        #expect(await relaunched.status.pendingCount == 1)
        let folders = try FileManager.default.contentsOfDirectory(atPath: app.directory.path).filter { $0.hasPrefix("user-") }
        #expect(folders.count == 1, "\(folders)")
        await relaunched.close()
    }

    @Test("reference data kept current: the open event's roster, once downloaded, is refreshed by delta on demand")
    func refreshesTheEventRoster() async throws {
        let app = App()
        defer { app.remove() }
        let roster = ReferenceServer()
        roster.put("g1", ["event_id": "gala", "name": "Ana Lima"], scope: "gala")
        var configuration = app.configuration()
        configuration.eventReferenceCollections = ["guests"]
        configuration.transport = Outpost.Transport { _, _, _ in roster }
        let outpost = try await Outpost(configuration)
        try await outpost.signIn(token: Self.token("sam"))
        #expect(try await outpost.refreshReferenceData().isEmpty)
        try await outpost.setCurrentEvent("gala")
        #expect(try await outpost.keptReferenceSets() == [ReferenceSet(collection: "guests", scope: "gala")])
        let data = try await outpost.referenceData()
        _ = try await data.download(collection: "guests", scope: "gala")
        roster.put("g2", ["event_id": "gala", "name": "Ben Okafor"], scope: "gala")
        let summaries = try await outpost.refreshReferenceData()
        #expect(summaries[ReferenceSet(collection: "guests", scope: "gala")]?.updated == 1)
        guard case .found = try await data.lookup(collection: "guests", scope: "gala", recordId: "g2") else {
            Issue.record("the refreshed guest is not on the device")
            return
        }
        await outpost.close()
    }
}
