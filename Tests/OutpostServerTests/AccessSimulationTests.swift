import Foundation
import OutpostApps
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@testable import OutpostServer

/// A seeded run of several users' devices against the real server over HTTP: staff at two events and a
/// supervisor write, sync and pull in a random order; no one ever receives a record they may not read, and
/// every write a device confirmed reaches the server exactly once.
///
/// `OUTPOST_ACCESS_SIM_SEEDS` sets how many seeds run on each engine (default 6).
@Suite("Access simulation")
struct AccessSimulationTests {
    struct User {
        var id: String
        var role: Role
        var event: String
    }

    static let users = [
        User(id: "ana", role: .staff, event: "A"), User(id: "ben", role: .staff, event: "B"),
        User(id: "sue", role: .supervisor, event: "A"),
    ]
    static let guests = (0..<4).map { "g\($0)" }

    @Test("several users and two events: each device holds only what its user may read", arguments: StorageKind.allCases)
    func simulate(kind: StorageKind) async throws {
        let count = ProcessInfo.processInfo.environment["OUTPOST_ACCESS_SIM_SEEDS"].flatMap(Int.init) ?? 6
        for seed in 1...UInt64(count) {
            try await withServer(kind, setup: .live) { client, storage in
                let port = try #require(client.port)
                let problem = try await Self.run(seed: seed, base: URL(string: "http://127.0.0.1:\(port)")!, storage: storage)
                #expect(problem == nil, "seed \(seed): \(problem ?? "")")
            }
        }
    }

    /// One run; the problem found, or nil.
    static func run(seed: UInt64, base: URL, storage: any SyncStorage) async throws -> String? {
        var random = SeededGenerator(seed: seed)
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-access-sim-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let organizer = HTTPSyncTransport(baseURL: base, token: try await Fixtures.token(user: "olga", role: .organizer))
        // Both events' rosters share their guest ids.
        for event in ["A", "B"] {
            let roster = guests.map { AccessRulesTests.guest($0, event: event) }
            guard try await organizer.push(PushRequest(deviceId: "admin", mutations: roster)).results.allSatisfy({ $0.status == .applied })
            else { return "the roster of \(event) was not imported" }
        }
        var engines: [SyncEngine] = []
        for user in users {
            let url = root.appendingPathComponent("\(user.id).sqlite")
            let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps, durableCommits: false)
            let transport = HTTPSyncTransport(
                baseURL: base, token: try await Fixtures.token(user: user.id, role: user.role, name: user.id))
            engines.append(
                SyncEngine(
                    store: store, transport: transport, configuration: .init(deviceId: "phone-\(user.id)", chunkSize: 3, deliversAfterSave: false),
                    clock: YieldingClock(), now: { Fixtures.serverNow.date }))
        }
        var confirmed: [String: Set<String>] = [:]
        for step in 0..<Int.random(in: 15...30, using: &random) {
            let u = Int.random(in: 0..<users.count, using: &random)
            let user = users[u]
            let engine = engines[u]
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4:
                let write: LocalStore.Write
                switch Int.random(in: 0..<3, using: &random) {
                case 0:
                    write = LocalStore.Write(
                        collection: Activity.collection, recordId: "\(user.id)-a\(step)",
                        fields: ["type": "Session", "date": "2026-11-21", "duration_minutes": 30])
                case 1:
                    let guest = guests[Int.random(in: 0..<guests.count, using: &random)]
                    write = LocalStore.Write(
                        collection: CheckIn.collection, scope: user.event, recordId: guest,
                        fields: [
                            "event_id": .string(user.event), "guest_id": .string(guest),
                            "scanned_by": .string("phone-\(user.id)"),
                        ],
                        timestampField: CheckIn.Field.scannedAt)
                default:
                    write = LocalStore.Write(collection: "notes", recordId: "n\(step % 3)", fields: ["by": .string(user.id)])
                }
                let saved = try await engine.save(write)
                confirmed[user.id, default: []].insert("\(saved.collection)/\(saved.scope)/\(saved.recordId)")
            case 4..<7:
                _ = try await engine.sync()
            default:
                for collection in [Activity.collection, "notes"] {
                    _ = try await engine.pull(collection: collection)
                }
                _ = try await engine.pull(collection: CheckIn.collection, scope: user.event)
            }
        }
        // Everyone syncs and pulls everything they may.
        for (u, engine) in engines.enumerated() {
            _ = try await engine.sync()
            try await storage.settle()
            _ = try await engine.pull(collection: Activity.collection)
            _ = try await engine.pull(collection: CheckIn.collection, scope: users[u].event)
        }
        try await storage.settle()
        // No one holds another member of staff's activity; a supervisor holds every activity synced.
        var serverActivities = Set<String>()
        for record in try await storage.pullAll(collection: Activity.collection).records {
            serverActivities.insert(record.recordId)
        }
        for (u, engine) in engines.enumerated() {
            let user = users[u]
            let held = try await engine.store.records(collection: Activity.collection)
            for record in held where user.role == .staff && !record.recordId.hasPrefix("\(user.id)-") {
                return "\(user.id) received \(record.recordId)"
            }
            if user.role == .supervisor, !serverActivities.isSubset(of: Set(held.map(\.recordId))) {
                return "the supervisor does not hold every activity"
            }
            for record in try await engine.store.records(collection: CheckIn.collection) where record.scope != user.event {
                return "\(user.id) received a check-in of event \(record.scope)"
            }
            if try await engine.store.counts().pending > 0 { return "\(user.id) could not drain its outbox" }
        }
        // Every activity a device confirmed is on the server once, owned by its writer.
        for user in users {
            for key in confirmed[user.id, default: []] where key.hasPrefix("\(Activity.collection)/") {
                let id = String(key.split(separator: "/").last!)
                let audit = try await storage.audit(tenant: "acme", collection: Activity.collection, recordId: id)
                guard audit.count == 1, audit[0].userId == user.id else { return "\(id) applied \(audit.count) times" }
            }
        }
        return nil
    }
}
