import Dispatch
import Foundation
import GRDB
import Synchronization
import Testing

@testable import OutpostClient

@Suite("Closing stores")
struct StoreCloseTests {
    /// A close waits for every read under way, and the pool takes back the reader of an async read only once that
    /// read's task resumes on a cooperative thread. Closes that waited on cooperative threads, one per thread,
    /// would stop the process. Twice as many stores as threads are closed at once, each while async reads run.
    @Test("closing more stores than there are cooperative threads, each in the middle of async reads, ends")
    func closesBesideReads() async throws {
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-close-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let stores = try (0..<(threads * 2)).map { n in
            let url = directory.appendingPathComponent("device-\(n).sqlite")
            return try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        }
        let done = Atomic<Bool>(false)
        // A stopped cooperative pool cannot run a timeout task: a dispatch timer names the failure instead of
        // leaving the test process waiting for CI's limit.
        DispatchQueue.global().asyncAfter(deadline: .now() + 120) {
            guard !done.load(ordering: .acquiring) else { return }
            FileHandle.standardError.write(Data("StoreCloseTests: closing stores stopped every cooperative thread\n".utf8))
            exit(1)
        }
        defer { done.store(true, ordering: .releasing) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for store in stores {
                for _ in 0..<8 {
                    group.addTask {
                        // A read after the close fails: what matters here is that the close ends.
                        for _ in 0..<50 {
                            _ = try? await store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") }
                        }
                    }
                }
                group.addTask {
                    await Task.yield()
                    try await store.close()
                }
            }
            try await group.waitForAll()
        }
        for store in stores {
            await #expect(throws: ClientError.self) { try await store.counts() }
        }
    }
}
