import Foundation
import GRDB
import OutpostApps
import OutpostClient
import Testing

/// A device store's files are its owner's alone: the database, its write-ahead log, its shared memory and the key.
@Suite("Store file modes")
struct StoreFileModeTests {
    func mode(_ path: String) throws -> Int {
        try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber).intValue & 0o777
    }

    @Test("a new store, its log and its key are created 0600 in a 0700 folder")
    func newStore() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-modes-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("device.sqlite")
        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        _ = try await store.write(note("a"), deviceId: "d", at: Date(), offline: true)
        #expect(try mode(directory.path) == 0o700)
        for path in [url.path, url.path + "-wal", url.path + "-shm", LocalStore.defaultKeys(for: url).url.path] {
            #expect(try mode(path) == 0o600, "\(path)")
        }
    }

    @Test("a store left readable by others is made its owner's alone when opened")
    func existingStore() async throws {
        try await withStore { store, url in
            _ = try await store.write(note("a"), deviceId: "d", at: Date(), offline: true)
            for path in [url.path, url.path + "-wal"] { #expect(chmod(path, 0o644) == 0) }
            _ = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            #expect(try mode(url.path) == 0o600)
            #expect(try mode(url.path + "-wal") == 0o600)
        }
    }
}

/// A store failure keeps its cause for diagnosis, out of the words the user reads.
@Suite("Store errors")
struct StoreErrorTests {
    @Test("a file that is not a store fails to open with the database's error kept as the cause")
    func notAStore() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-errors-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let url = directory.appendingPathComponent("device.sqlite")
        try Data(repeating: 0x41, count: 8192).write(to: url)
        do {
            _ = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
            Issue.record("a file that is not a store opened")
        } catch let error as ClientError {
            #expect(error.code == .storeUnavailable)
            #expect(error.message == "cannot open the device store at \(url.path)")
            let cause = error.underlying as? DatabaseError
            #expect(cause?.resultCode == .SQLITE_NOTADB, "\(String(describing: error.underlying))")
        }
    }
}
