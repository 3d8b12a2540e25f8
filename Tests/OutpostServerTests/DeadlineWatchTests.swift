import Foundation
import NIOConcurrencyHelpers
import OutpostConcurrency
import OutpostTesting
import Testing

@testable import OutpostServer

/// The deadlines every PostgreSQL operation runs under: they fire on time on an injected clock, a finished
/// operation leaves nothing pending, and a stuck one is given up on with a clear error.
@Suite("Deadline watch", .timeLimit(.minutes(5)))
struct DeadlineWatchTests {
    /// Counts what fired, and tells each firing as it happens.
    final class Flag: Sendable {
        private let value = NIOLockedValueBox(0)
        let raised: AsyncStream<Void>
        private let raising: AsyncStream<Void>.Continuation

        init() {
            (raised, raising) = AsyncStream.makeStream()
        }

        func raise() {
            value.withLockedValue { $0 += 1 }
            raising.yield()
        }

        var count: Int { value.withLockedValue { $0 } }
    }

    @Test("a deadline fires once its delay has passed, never before; a cancelled one never fires")
    func firesOnTime() async throws {
        let clock = ManualClock()
        var sleeps = clock.sleeps.makeAsyncIterator()
        let watch = DeadlineWatch(clock: clock, tick: .seconds(1))
        let fired = Flag()
        var firings = fired.raised.makeAsyncIterator()
        let cancelled = Flag()
        watch.schedule(after: .seconds(5)) { fired.raise() }
        let entry = watch.schedule(after: .seconds(3)) { cancelled.raise() }
        // Each second, once the watch sleeps: it looks, finds nothing due, and sleeps again.
        #expect(await sleeps.next() == .seconds(1))
        for second in 1...4 {
            clock.advance(by: .seconds(1))
            #expect(await sleeps.next() == .seconds(1))
            #expect(fired.count == 0, "fired after \(second) s")
            if second == 2 { watch.cancel(entry) }
        }
        clock.advance(by: .seconds(1))
        await firings.next()
        #expect(fired.count == 1)
        #expect(cancelled.count == 0)
        #expect(watch.pendingCount == 0)
        // Nothing pending: the watch stops sleeping, and a new deadline starts it again.
        watch.schedule(after: .seconds(1)) { fired.raise() }
        #expect(await sleeps.next() == .seconds(1))
        clock.advance(by: .seconds(1))
        await firings.next()
        #expect(fired.count == 2)
    }

    @Test("an operation that finishes in time returns its value and leaves no deadline pending")
    func boundedInTime() async throws {
        let watch = DeadlineWatch(clock: ManualClock())
        let values = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<100 {
                group.addTask { try await PostgresStorage.bounded(.seconds(20), watch: watch) { index } }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(values.sorted() == Array(0..<100))
        #expect(watch.pendingCount == 0)
        await #expect(throws: StorageError.self) {
            try await PostgresStorage.bounded(.seconds(20), watch: watch) { throw StorageError(.corrupt, "nope") }
        }
        #expect(watch.pendingCount == 0)
    }

    @Test("an operation that never answers is given up on at its deadline, and cancelled")
    func boundedStuck() async throws {
        let clock = ManualClock()
        var sleeps = clock.sleeps.makeAsyncIterator()
        let watch = DeadlineWatch(clock: clock, tick: .seconds(1))
        let sawCancellation = Flag()
        var cancellations = sawCancellation.raised.makeAsyncIterator()
        let waiting = Task {
            try await PostgresStorage.bounded(.seconds(3), watch: watch) {
                // Stuck until cancelled, like a query on a connection that died.
                let (stream, _) = AsyncStream<Void>.makeStream()
                await withTaskCancellationHandler {
                    for await _ in stream {}
                } onCancel: {
                    sawCancellation.raise()
                }
                return 0
            }
        }
        #expect(await sleeps.next() == .seconds(1))
        for _ in 1...2 {
            clock.advance(by: .seconds(1))
            #expect(await sleeps.next() == .seconds(1))
        }
        clock.advance(by: .seconds(1))
        let error = await #expect(throws: StorageError.self) {
            try await waiting.value(within: testWaitLimit, "the stuck operation")
        }
        #expect(error?.code == .unavailable)
        #expect(error?.message == "PostgreSQL did not answer within 3 s")
        await cancellations.next()
        #expect(sawCancellation.count == 1)
        #expect(watch.pendingCount == 0)
    }
}
