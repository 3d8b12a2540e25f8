import Foundation
import OutpostApps
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// Signing out of a shared device: the store and its key deleted, never while records would be lost.
@Suite("Wipe")
struct WipeTests {
    @Test("a wipe is refused while records wait to sync; once they synced, or discarding them, it deletes the store and its key")
    func wipe() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-wipe-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        let keys = LocalStore.defaultKeys(for: url)
        let store = try LocalStore(url: url, keys: keys, schema: .fieldApps)
        try await Device.initialize(store: store, server: URL(string: "http://127.0.0.1:9")!, token: "t", deviceId: "shared-1")
        let transport = InMemoryTransport(server: InMemoryServer())
        transport.isOnline = false
        let device = try await Device.open(store: store, transport: transport) { $0.deliversAfterSave = false }
        _ = try await device.engine.save(LocalStore.Write(collection: "notes", recordId: "a", fields: ["n": 1]))

        // One record has not reached the server: nothing is deleted.
        let refused = await #expect(throws: ClientError.self) { try await device.wipe() }
        #expect(refused?.code == .unsyncedRecords)
        #expect(refused?.message == "1 record has not reached the server: sync it first, or discard it with the device's data")
        #expect(try await store.records().count == 1)

        // Discarding it, the store and its key go; whatever the store sealed cannot be opened again.
        try await device.wipe(discardingUnsynced: true)
        for path in [url.path, url.path + "-wal", url.path + "-shm", keys.url.path] {
            #expect(!FileManager.default.fileExists(atPath: path), "\(path)")
        }
        await #expect(throws: ClientError.self) { try await store.records() }

        // The next person's store at the same place starts empty, under a new key.
        let next = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        #expect(try await next.records().isEmpty)
        #expect(try await next.setting(Device.SettingName.deviceId) == nil)
    }
}
