import Foundation
import NIOConcurrencyHelpers
import OutpostTesting
import Testing

@testable import OutpostClient

/// Turns per key: one body of a key at a time, and no caller left waiting for a turn nobody holds.
@Suite("Turn queue", .timeLimit(.minutes(5)))
struct TurnQueueTests {
    /// A queue whose callers that find their key taken stop before joining its queue, until let go.
    struct HeldBeforeJoining {
        let queue = TurnQueue()
        /// One element each time a caller stops.
        let stopped: AsyncStream<Void>
        private let go: AsyncStream<Void>.Continuation

        init() {
            let (stopped, stopping) = AsyncStream<Void>.makeStream()
            let (goes, go) = AsyncStream<Void>.makeStream()
            self.stopped = stopped
            self.go = go
            queue.seams.withLockedValue {
                $0.beforeJoining = {
                    stopping.yield()
                    for await _ in goes { break }
                }
            }
        }

        /// Lets one stopped caller go on.
        func letGo() { go.yield() }
    }

    @Test("a caller that finds its key taken gets the turn when it is given back before the caller joins the queue")
    func givenBackBeforeJoining() async throws {
        let held = HeldBeforeJoining()
        let queue = held.queue
        let (started, starting) = AsyncStream<Void>.makeStream()
        let (gate, open) = AsyncStream<Void>.makeStream()
        // Given a first caller in its turn,
        let first = Task {
            try await queue.run("k") {
                starting.yield()
                for await _ in gate { break }
            }
        }
        var starts = started.makeAsyncIterator()
        await starts.next()
        // and a second that found the key taken and has not joined its queue yet,
        let second = Task { try await queue.run("k") { "the second's turn" } }
        var stops = held.stopped.makeAsyncIterator()
        await stops.next()
        // when the first gives the turn back meanwhile,
        open.yield()
        try await first.value(within: testWaitLimit, "the first caller's turn")
        held.letGo()
        // then the second takes the turn, which nobody holds.
        #expect(try await second.value(within: testWaitLimit, "the second caller's turn") == "the second's turn")
        #expect(queue.waiting == 0)
    }

    @Test("a caller cancelled before it joins the queue throws and never joins; the turn goes on to the next")
    func cancelledBeforeJoining() async throws {
        let held = HeldBeforeJoining()
        let queue = held.queue
        let (started, starting) = AsyncStream<Void>.makeStream()
        let (gate, open) = AsyncStream<Void>.makeStream()
        let first = Task {
            try await queue.run("k") {
                starting.yield()
                for await _ in gate { break }
            }
        }
        var starts = started.makeAsyncIterator()
        await starts.next()
        let second = Task { try await queue.run("k") { "the second's turn" } }
        var stops = held.stopped.makeAsyncIterator()
        await stops.next()
        second.cancel()
        held.letGo()
        await #expect(throws: CancellationError.self) {
            try await second.value(within: testWaitLimit, "the cancelled caller")
        }
        #expect(queue.waiting == 0)
        // The key is still the first's; once given back, another caller has it at once.
        open.yield()
        try await first.value(within: testWaitLimit, "the first caller's turn")
        let third = Task { try await queue.run("k") { 3 } }
        #expect(try await third.value(within: testWaitLimit, "a later caller's turn") == 3)
    }

    @Test("many callers on a few keys: one body of a key at a time, and every caller has its turn")
    func contention() async throws {
        let queue = TurnQueue()
        let inTurn = NIOLockedValueBox([String: Int]())
        let overlaps = NIOLockedValueBox(0)
        let keys = ["a", "b", "c"]
        let turns = try await bounded("every caller's turn") {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for n in 0..<300 {
                    let key = keys[n % keys.count]
                    group.addTask {
                        try await queue.run(key) {
                            let others = inTurn.withLockedValue { state -> Int in
                                defer { state[key, default: 0] += 1 }
                                return state[key, default: 0]
                            }
                            if others > 0 { overlaps.withLockedValue { $0 += 1 } }
                            await Task.yield()
                            inTurn.withLockedValue { $0[key, default: 0] -= 1 }
                            return 1
                        }
                    }
                }
                return try await group.reduce(0, +)
            }
        }
        #expect(turns == 300)
        #expect(overlaps.withLockedValue { $0 } == 0)
        #expect(queue.waiting == 0)
    }
}
