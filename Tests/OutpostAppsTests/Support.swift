import Clocks
import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting

/// One device for an app test: its own store in a temporary folder, an in-memory server behind a switchable
/// network, a test clock for waits and a manual clock for "now".
struct TestDevice {
    let store: LocalStore
    let engine: SyncEngine
    let server: InMemoryServer
    let transport: InMemoryTransport
    let now: ManualNow

    /// Turns the network on or off, and lets the engine notice (as its connectivity monitor would).
    func setOnline(_ online: Bool) async {
        transport.isOnline = online
        await engine.probe()
    }

    /// Waits for the delivery the last save started to end (the test clock never passes the bound).
    func delivered() async {
        await engine.awaitDelivery(upTo: .seconds(3600))
    }

    /// The mutations waiting in the outbox, oldest first.
    func outbox() async throws -> [Mutation] {
        try await store.outbox.nextChunk(limit: 10_000).map(\.mutation)
    }
}

/// Runs `body` with a fresh device (offline unless `online`), sharing `server` when given; removes the store after.
/// A test device's configuration: no retry waits, and the field apps' renaming of provisional ids.
private func configuration(id: String, chunkSize: Int) -> SyncConfiguration {
    var configuration = SyncConfiguration(deviceId: id, chunkSize: chunkSize, retryDelays: [])
    configuration.recordIdSettlements = [.attendance]
    return configuration
}

func withTestDevice<T>(
    id: String = "dev-a", online: Bool = false, server: InMemoryServer = InMemoryServer(),
    transport: ((InMemoryTransport) -> any SyncTransport)? = nil, now: ManualNow = ManualNow(), chunkSize: Int = 50,
    isolation: isolated (any Actor)? = #isolation, _ body: (TestDevice) async throws -> T
) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-apps-\(UUID())")
    defer { try? FileManager.default.removeItem(at: directory) }
    let url = directory.appendingPathComponent("device.sqlite")
    let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
    let memory = InMemoryTransport(server: server)
    memory.isOnline = online
    let engine = SyncEngine(
        store: store, transport: transport?(memory) ?? memory,
        configuration: configuration(id: id, chunkSize: chunkSize), clock: TestClock<Duration>(), now: now.closure)
    let device = TestDevice(store: store, engine: engine, server: server, transport: memory, now: now)
    await engine.probe()
    return try await body(device)
}
