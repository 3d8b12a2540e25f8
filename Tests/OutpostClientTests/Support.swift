import Foundation
import OutpostClient
import OutpostProtocol
import OutpostTesting

/// A fresh store in a temporary folder, removed after `body`.
func withStore<T>(durable: Bool = true, _ body: (LocalStore, URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-device-\(UUID())")
    defer { try? FileManager.default.removeItem(at: directory) }
    let url = directory.appendingPathComponent("device.sqlite")
    let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), durableCommits: durable)
    return try await body(store, url)
}

/// A settable clock value for `now`.
final class ManualNow: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Date

    init(_ start: Date = Date(timeIntervalSince1970: 1_795_251_600)) {
        self.value = start
    }

    var date: Date { lock.withLock { value } }

    func advance(seconds: Double) {
        lock.withLock { value = value.addingTimeInterval(seconds) }
    }

    var closure: @Sendable () -> Date { { self.advanceAndRead() } }

    /// Each read moves a millisecond on, like a real clock between two actions.
    private func advanceAndRead() -> Date {
        lock.withLock {
            value = value.addingTimeInterval(0.001)
            return value
        }
    }
}

func note(_ id: String, _ fields: [String: JSONValue] = ["n": 1]) -> LocalStore.Write {
    LocalStore.Write(collection: "notes", recordId: id, fields: fields)
}
