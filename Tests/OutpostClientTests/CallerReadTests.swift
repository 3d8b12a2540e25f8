import Dispatch
import Foundation
import GRDB
import Synchronization
import Testing

@testable import OutpostClient

@Suite("Reads on the caller's thread")
struct CallerReadTests {
    /// A read on the caller's thread waits for a free reader. Were a reader freed only once its async read's task
    /// resumed, every cooperative thread could wait in such a read for a reader that only a cooperative thread can
    /// free: the whole process would stop. Twice as many searches as threads run beside more async reads than the
    /// pool has readers.
    @Test("searches on every cooperative thread beside many async reads all end: a reader is freed on its own queue")
    func noStarvation() async throws {
        try await withStore { store, _ in
            let threads = ProcessInfo.processInfo.activeProcessorCount
            let done = ManagedAtomicFlag()
            // A stopped cooperative pool cannot run a timeout task: a dispatch timer names the failure instead of
            // leaving the test process waiting for CI's limit.
            DispatchQueue.global().asyncAfter(deadline: .now() + 120) {
                guard !done.isSet else { return }
                FileHandle.standardError.write(Data("CallerReadTests: reads stopped every cooperative thread\n".utf8))
                exit(1)
            }
            defer { done.set() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<(threads * 2) {
                    group.addTask {
                        for _ in 0..<100 {
                            _ = try store.readOnCaller { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") }
                            await Task.yield()
                        }
                    }
                }
                for _ in 0..<16 {
                    group.addTask {
                        for _ in 0..<100 {
                            _ = try await store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
    }
}

/// A flag set once, read from any thread.
private final class ManagedAtomicFlag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    func set() { value.store(true, ordering: .releasing) }
}
