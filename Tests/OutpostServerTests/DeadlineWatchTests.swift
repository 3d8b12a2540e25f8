import Clocks
import Foundation
import OutpostTesting
import Testing

@testable import OutpostServer

/// The deadlines every PostgreSQL operation runs under: they fire on time on an injected clock, a finished
/// operation leaves nothing pending, and a stuck one is given up on with a clear error.
@Suite("Deadline watch")
struct DeadlineWatchTests {
    /// A test clock whose sleeps are counted as they begin, so that a test advances it only while the
    /// watch sleeps.
    final class Ticks: Sendable {
        let clock = ObservedClock(TestClock<Duration>())
        private let begun = LockedValue(0)
        private let reader: Task<Void, Never>

        init() {
            let clock = self.clock
            let begun = self.begun
            reader = Task { for await _ in clock.sleeps { begun.withLock { $0 += 1 } } }
        }

        deinit { reader.cancel() }

        var sleepsBegun: Int { begun.withLock { $0 } }

        /// Yields until `condition` holds; the tasks it waits for need only to be scheduled. Each pass also
        /// wakes any sleep already due: one that registered with the test clock just after an advance went by.
        func until(_ what: String, _ condition: () -> Bool) async throws {
            for _ in 0..<100_000 {
                if condition() { return }
                await clock.base.advance(by: .zero)
                await Task.yield()
            }
            Issue.record("never reached: \(what)")
            throw CancellationError()
        }

        /// Advances one tick once the watch sleeps, and waits for it to sleep again or to stop.
        func tick(_ watch: DeadlineWatch, by step: Duration) async throws {
            let before = sleepsBegun
            await clock.base.advance(by: step)
            try await until("the watch slept again or stopped") { sleepsBegun > before || watch.pendingCount == 0 }
        }
    }

    final class Flag: Sendable {
        private let value = LockedValue(0)
        func raise() { value.withLock { $0 += 1 } }
        var count: Int { value.withLock { $0 } }
    }

    @Test("a deadline fires once its delay has passed, never before; a cancelled one never fires")
    func firesOnTime() async throws {
        let ticks = Ticks()
        let watch = DeadlineWatch(clock: ticks.clock, tick: .seconds(1))
        let fired = Flag()
        let cancelled = Flag()
        watch.schedule(after: .seconds(5)) { fired.raise() }
        let entry = watch.schedule(after: .seconds(3)) { cancelled.raise() }
        try await ticks.until("the watch sleeps") { ticks.sleepsBegun == 1 }
        for second in 1...4 {
            try await ticks.tick(watch, by: .seconds(1))
            #expect(fired.count == 0, "fired after \(second) s")
            if second == 2 { watch.cancel(entry) }
        }
        try await ticks.tick(watch, by: .seconds(1))
        try await ticks.until("the deadline fired") { fired.count == 1 }
        #expect(cancelled.count == 0)
        #expect(watch.pendingCount == 0)
        // Nothing pending: the watch stops sleeping, and a new deadline starts it again.
        let sleeps = ticks.sleepsBegun
        watch.schedule(after: .seconds(1)) { fired.raise() }
        try await ticks.until("the watch sleeps again") { ticks.sleepsBegun == sleeps + 1 }
        try await ticks.tick(watch, by: .seconds(1))
        try await ticks.until("the second deadline fired") { fired.count == 2 }
    }

    @Test("an operation that finishes in time returns its value and leaves no deadline pending")
    func boundedInTime() async throws {
        let watch = DeadlineWatch(clock: TestClock<Duration>())
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
        let ticks = Ticks()
        let watch = DeadlineWatch(clock: ticks.clock, tick: .seconds(1))
        let sawCancellation = Flag()
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
        try await ticks.until("the watch sleeps") { ticks.sleepsBegun == 1 }
        for _ in 1...3 { try await ticks.tick(watch, by: .seconds(1)) }
        let error = await #expect(throws: StorageError.self) { try await waiting.value }
        #expect(error?.code == .unavailable)
        #expect(error?.message == "PostgreSQL did not answer within 3 s")
        try await ticks.until("the operation was cancelled") { sawCancellation.count == 1 }
        #expect(watch.pendingCount == 0)
    }
}
