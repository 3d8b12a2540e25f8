import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

/// Deterministic simulation of the sync engine: a faulty network (dropped requests, responses dropped after
/// the server applied them, delays) and devices that crash and reopen their stores at random points.
///
/// `OUTPOST_SIM_SEEDS` sets how many seeds run (default 1,000); `OUTPOST_SIM_SEED` replays one. A seed that
/// does not finish within ``seedLimit`` fails with its number, and no further seeds run.
@Suite("Sync simulation")
struct SimulationTests {
    /// Far longer than a seed takes on a busy machine (well under a second): only a hang reaches it.
    static let seedLimit = Duration.seconds(120)

    @Test("every locally confirmed write reaches the server exactly once, in each device's order")
    func simulate() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seeds: [UInt64]
        if let one = environment["OUTPOST_SIM_SEED"].flatMap(UInt64.init) {
            seeds = [one]
        } else {
            seeds = Array(1...UInt64(environment["OUTPOST_SIM_SEEDS"].flatMap(Int.init) ?? 1000))
        }
        var failures: [(UInt64, String)] = []
        // A few seeds at a time: each is independent, with its own stores and server.
        for batch in stride(from: 0, to: seeds.count, by: 8) {
            let slice = seeds[batch..<min(batch + 8, seeds.count)]
            let outcomes = try await withThrowingTaskGroup(of: (UInt64, String?).self) { group in
                for seed in slice {
                    group.addTask {
                        do {
                            return (seed, try await bounded("seed \(seed)", within: Self.seedLimit) { try await Self.run(seed: seed) })
                        } catch let hang as StillWaiting {
                            return (seed, "\(hang)")
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            for case let (seed, problem?) in outcomes {
                failures.append((seed, problem))
                print("simulation seed \(seed) failed: \(problem); replay with OUTPOST_SIM_SEED=\(seed)")
            }
            // A hung seed leaves its tasks behind: the run stops there rather than pile up more.
            if outcomes.contains(where: { $0.1?.hasPrefix("still waiting") == true }) { break }
        }
        #expect(failures.isEmpty, "failing seeds: \(failures.map(\.0))")
    }

    /// One simulated run; the problem found, or nil.
    static func run(seed: UInt64) async throws -> String? {
        var random = SeededGenerator(seed: seed)
        let server = InMemoryServer()
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-sim-\(seed)-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }

        struct SimDevice {
            var id: String
            var url: URL
            var network: SimulatedNetwork
            var crashes: CrashPoint
            var engine: SyncEngine
            /// Keys of writes that returned: confirmed to the user.
            var confirmed: [String] = []
        }

        func open(_ id: String, _ url: URL, _ transport: CrashPoint) throws -> SyncEngine {
            let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps, durableCommits: false)
            return SyncEngine(
                store: store, transport: transport, configuration: .init(deviceId: id, chunkSize: 5, deliversAfterSave: false), clock: YieldingClock()
            )
        }

        var devices: [SimDevice] = []
        for index in 0..<2 {
            let id = "dev-\(index)"
            let url = root.appendingPathComponent("\(id).sqlite")
            let faults = SimulatedNetwork.Faults(
                dropRequest: Double.random(in: 0...0.5, using: &random),
                dropResponse: Double.random(in: 0...0.5, using: &random),
                delay: Double.random(in: 0...0.5, using: &random))
            let network = SimulatedNetwork(server: server, seed: random.next(), faults: faults)
            let crashes = CrashPoint(inner: network)
            devices.append(SimDevice(id: id, url: url, network: network, crashes: crashes, engine: try open(id, url, crashes)))
        }

        let steps = Int.random(in: 10...40, using: &random)
        for _ in 0..<steps {
            let d = Int.random(in: 0..<devices.count, using: &random)
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<5:
                let record = "r\(Int.random(in: 0..<6, using: &random))"
                let saved = try await devices[d].engine.save(note(record, ["v": .integer(Int64(random.next() % 1000))]))
                devices[d].confirmed.append("\(devices[d].id):\(record):\(saved.updatedAt.iso8601)")
            case 5..<8:
                _ = try? await devices[d].engine.sync()
            default:
                // Crash mid-replay: stop the sync as it starts, or at one of its first pushes before the request
                // leaves or after the server answered, then relaunch from the file.
                let engine = devices[d].engine
                let push = Int.random(in: 0...3, using: &random)
                let answered = Bool.random(using: &random)
                devices[d].crashes.arm(atPush: push, answered: answered)
                let sync = Task {
                    if push == 0 { withUnsafeCurrentTask { $0?.cancel() } }
                    return try await engine.sync()
                }
                _ = try? await sync.value
                devices[d].crashes.disarm()
                devices[d].engine = try open(devices[d].id, devices[d].url, devices[d].crashes)
            }
        }

        // The network heals; each device relaunches and syncs until its outbox is empty.
        for d in devices.indices {
            devices[d].network.setFaults(.none)
            devices[d].engine = try open(devices[d].id, devices[d].url, devices[d].crashes)
            for _ in 0..<10 where try await devices[d].engine.store.outbox.count() > 0 {
                _ = try await devices[d].engine.sync()
            }
            if try await devices[d].engine.store.outbox.count() > 0 { return "\(devices[d].id) could not drain its outbox" }
        }

        // Each write is known by its device, record and time: its key is random in part.
        let applied = await server.applied
        let writes = applied.map { "\($0.deviceId):\($0.mutation.recordId):\($0.mutation.clientTimestamp.iso8601)" }
        let counts = writes.reduce(into: [String: Int]()) { $0[$1, default: 0] += 1 }
        if Set(applied.map(\.mutation.idempotencyKey)).count != applied.count { return "a key was applied twice" }
        for device in devices {
            for write in device.confirmed where counts[write] != 1 {
                return "\(write) applied \(counts[write] ?? 0) times"
            }
            let order = applied.filter { $0.deviceId == device.id }
                .map { "\($0.deviceId):\($0.mutation.recordId):\($0.mutation.clientTimestamp.iso8601)" }
            if order != device.confirmed { return "\(device.id) applied out of order or with extras" }
        }
        if applied.count != devices.map(\.confirmed.count).reduce(0, +) { return "the server applied writes nobody confirmed" }
        return nil
    }
}

/// Cancels the task that makes a given push, before its request leaves or once the server has answered it: a crash
/// at a point of a sync's own progress, the same in every replay of a seed.
final class CrashPoint: ForwardingTransport, @unchecked Sendable {
    let inner: any SyncTransport
    private let lock = NSLock()
    private var pushesLeft: Int?
    private var answered = false

    init(inner: any SyncTransport) {
        self.inner = inner
    }

    /// Cancels the task that makes the `push`-th push from now (none when `push` is 0): before the request leaves,
    /// or once the server `answered` it.
    func arm(atPush push: Int, answered: Bool) {
        lock.withLock {
            pushesLeft = push > 0 ? push : nil
            self.answered = answered
        }
    }

    /// Crashes nothing more.
    func disarm() {
        lock.withLock { pushesLeft = nil }
    }

    func push(_ request: PushRequest) async throws -> PushResponse {
        let (crash, answered) = lock.withLock { () -> (Bool, Bool) in
            guard let left = pushesLeft else { return (false, false) }
            pushesLeft = left > 1 ? left - 1 : nil
            return (left == 1, self.answered)
        }
        guard crash else { return try await inner.push(request) }
        // The push runs in the sync's task: the crash lands in that sync, at this point of it.
        guard answered else {
            withUnsafeCurrentTask { $0?.cancel() }
            throw CancellationError()
        }
        let response = try await inner.push(request)
        withUnsafeCurrentTask { $0?.cancel() }
        return response
    }
}
