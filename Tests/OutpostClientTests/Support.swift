import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting

/// A fresh store in a temporary folder, removed after `body`.
func withStore<T>(durable: Bool = true, _ body: (LocalStore, URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-device-\(UUID())")
    defer { try? FileManager.default.removeItem(at: directory) }
    let url = directory.appendingPathComponent("device.sqlite")
    let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps, durableCommits: durable)
    return try await body(store, url)
}

/// The size of a store's write-ahead log file; throws when there is none.
func logSize(_ url: URL) throws -> Int {
    let attributes = try FileManager.default.attributesOfItem(atPath: url.path + "-wal")
    return (attributes[.size] as? NSNumber)?.intValue ?? 0
}

func note(_ id: String, _ fields: [String: JSONValue] = ["n": 1]) -> LocalStore.Write {
    LocalStore.Write(collection: "notes", recordId: id, fields: fields)
}
