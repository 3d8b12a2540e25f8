import OutpostTesting
import Testing

/// The tests' clock: a sleep is reported once it waits, so that an advance by exactly what was reported wakes it.
@Suite("Manual clock", .timeLimit(.minutes(5)))
struct ManualClockTests {
    @Test("a sleep is reported once it waits: an advance by exactly its duration wakes it")
    func reportedOnceWaiting() async throws {
        let clock = ManualClock()
        var sleeps = clock.sleeps.makeAsyncIterator()
        let sleeper = Task { try await clock.sleep(for: .seconds(5)) }
        #expect(await sleeps.next() == .seconds(5))
        // Reported, so already waiting: the advance cannot slip in before it.
        #expect(clock.sleeping == 1)
        clock.advance(by: .seconds(5))
        try await sleeper.value(within: testWaitLimit, "the sleeper")
        #expect(clock.sleeping == 0)
        #expect(clock.now == ManualClock.Instant(offset: .seconds(5)))
    }

    @Test("an advance wakes the sleeps due by then, and leaves the others waiting")
    func wakesOnlyWhatIsDue() async throws {
        let clock = ManualClock()
        var sleeps = clock.sleeps.makeAsyncIterator()
        let (woken, wake) = AsyncStream<Int>.makeStream()
        let short = Task {
            try await clock.sleep(for: .seconds(1))
            wake.yield(1)
        }
        #expect(await sleeps.next() == .seconds(1))
        let long = Task {
            try await clock.sleep(for: .seconds(3))
            wake.yield(3)
        }
        #expect(await sleeps.next() == .seconds(3))
        var wakes = woken.makeAsyncIterator()
        clock.advance(by: .seconds(2))
        #expect(await wakes.next() == 1)
        #expect(clock.sleeping == 1)
        clock.advance(by: .seconds(1))
        #expect(await wakes.next() == 3)
        try await short.value(within: testWaitLimit, "the short sleep")
        try await long.value(within: testWaitLimit, "the long sleep")
    }

    @Test("a sleep already due returns at once; a cancelled one throws and stops waiting")
    func dueAndCancelled() async throws {
        let clock = ManualClock()
        var sleeps = clock.sleeps.makeAsyncIterator()
        try await clock.sleep(until: clock.now)
        #expect(await sleeps.next() == .zero)
        let sleeper = Task { try await clock.sleep(for: .seconds(60)) }
        #expect(await sleeps.next() == .seconds(60))
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value(within: testWaitLimit, "the sleeper") }
        #expect(clock.sleeping == 0)
        // Cancelled before it sleeps: it never waits.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await clock.sleep(for: .seconds(60))
        }
        await #expect(throws: CancellationError.self) { try await early.value(within: testWaitLimit, "the early sleeper") }
        #expect(clock.sleeping == 0)
    }
}
