import Foundation
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// A stream of pages read ahead of its consumer holds a bounded number of them: the producer waits, element in hand,
/// until the consumer takes one, and a wait for the consumer is not the server's silence.
@Suite("Read-ahead of streamed pages", .timeLimit(.minutes(5)))
struct HandoffTests {
    typealias Party = Handoff<Int>.Party

    /// Counts what a producer has handed over.
    final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        var value: Int { lock.withLock { count } }
        func add() { lock.withLock { count += 1 } }
    }

    /// A handoff that tells each wait, once the giver or the consumer waits.
    static func observed(capacity: Int) -> (Handoff<Int>, AsyncStream<Party>.AsyncIterator) {
        let (waits, wait) = AsyncStream<Party>.makeStream()
        return (Handoff<Int>(capacity: capacity, onWait: { wait.yield($0) }), waits.makeAsyncIterator())
    }

    @Test("a giver waits while the room is full, and goes on one element for each the consumer takes")
    func giverWaitsForRoom() async throws {
        var (handoff, waits) = Self.observed(capacity: 2)
        let given = Counter()
        let producer = Task {
            for n in 0..<5 {
                try await handoff.give(n)
                given.add()
            }
            handoff.finish()
        }
        // Two in the room, the third in the giver's hand.
        #expect(await waits.next() == .giver)
        #expect(handoff.state.waiting == 2)
        #expect(given.value == 2)
        #expect(try await handoff.take() == 0)
        // The waiting element moved into the room; the next giver waits in turn.
        #expect(await waits.next() == .giver)
        #expect(given.value == 3)
        #expect(handoff.state.waiting == 2)
        var rest: [Int] = []
        while let n = try await handoff.take() { rest.append(n) }
        #expect(rest == [1, 2, 3, 4])
        try await producer.value(within: testWaitLimit, "the producer")
        #expect(try await handoff.take() == nil)
    }

    @Test("the producer's error comes after the elements given before it, once; then the end")
    func errorAfterElements() async throws {
        struct Broke: Error {}
        let handoff = Handoff<Int>(capacity: 2)
        try await handoff.give(1)
        handoff.finish(throwing: Broke())
        #expect(try await handoff.take() == 1)
        await #expect(throws: Broke.self) { _ = try await handoff.take() }
        #expect(try await handoff.take() == nil)
    }

    @Test("an error that ends the elements while the consumer waits is told it once; then the end")
    func errorToWaitingConsumer() async throws {
        struct Broke: Error {}
        var (handoff, waits) = Self.observed(capacity: 2)
        let taking = Task { try await handoff.take() }
        #expect(await waits.next() == .taker)
        handoff.finish(throwing: Broke())
        await #expect(throws: Broke.self) { _ = try await taking.value(within: testWaitLimit, "the consumer") }
        #expect(try await handoff.take() == nil)
    }

    @Test("a consumer that waits gets the element given next at once, with no room at all")
    func directHandover() async throws {
        var (handoff, waits) = Self.observed(capacity: 0)
        let taking = Task { try await handoff.take() }
        #expect(await waits.next() == .taker)
        try await handoff.give(7)
        #expect(try await taking.value(within: testWaitLimit, "the consumer") == 7)
        // With no room, a giver waits until the consumer takes.
        let giving = Task { try await handoff.give(8) }
        #expect(await waits.next() == .giver)
        #expect(try await handoff.take() == 8)
        try await giving.value(within: testWaitLimit, "the giver")
    }

    /// A producer that gives 0, 1, 2, … for ever, and says how it ended.
    private func endless(
        _ ended: AsyncStream<Bool>.Continuation, given: Counter, onWait: @escaping @Sendable (Party) -> Void
    ) -> AsyncThrowingStream<Int, any Error> {
        AsyncThrowingStream<Int, any Error>.produced(readAhead: 2, onWait: onWait) { deliver in
            do {
                for n in 0... {
                    try await deliver(n)
                    given.add()
                }
            } catch {
                ended.yield(error is CancellationError)
                throw error
            }
        }
    }

    @Test("a stream reads at most its read-ahead beyond what its consumer took; letting it go cancels its producer")
    func streamReadsAhead() async throws {
        let (ended, end) = AsyncStream<Bool>.makeStream()
        // Each wait of the giver, with how many it had given as it began to wait.
        let (giverWaits, giverWait) = AsyncStream<Int>.makeStream()
        let given = Counter()
        do {
            let stream = endless(end, given: given) { party in
                if party == .giver { giverWait.yield(given.value) }
            }
            var iterator = stream.makeAsyncIterator()
            #expect(try await iterator.next() == 0)
            #expect(try await iterator.next() == 1)
            // Two taken, two waiting, the fifth in the producer's hand: it waits, and gives no more.
            var waits = giverWaits.makeAsyncIterator()
            while let count = await waits.next(), count < 4 {}
            #expect(given.value == 4)
            withExtendedLifetime(iterator) {}
        }
        // The stream is let go: its producer is refused what it was giving.
        var endings = ended.makeAsyncIterator()
        #expect(await endings.next() == true)
    }

    @Test("a cancelled consumer ends its stream and cancels the producer")
    func cancelledConsumer() async throws {
        let (ended, end) = AsyncStream<Bool>.makeStream()
        let (never, held) = AsyncStream<Int>.makeStream()
        let stream = AsyncThrowingStream<Int, any Error>.produced { _ in
            for await _ in never {}
            end.yield(Task.isCancelled)
        }
        let consumer = Task {
            for try await _ in stream {}
        }
        consumer.cancel()
        // The consumer's stream ends, or its wait throws, as `AsyncThrowingStream`'s own do when cancelled.
        do {
            try await consumer.value(within: testWaitLimit, "the cancelled consumer")
        } catch {
            #expect(error is CancellationError)
        }
        var endings = ended.makeAsyncIterator()
        #expect(await endings.next() == true)
        held.finish()
    }

    @Test("a call that rests is not ended by the silence watch; the silence after its rest counts again")
    func restIsNotSilence() async throws {
        let clock = ManualClock()
        let limit = Duration.seconds(30)
        let watch = SilenceWatch(limit: limit, clock: clock)
        let (resting, rest) = AsyncStream<Void>.makeStream()
        let (gate, open) = AsyncStream<Void>.makeStream()
        var sleeps = clock.sleeps.makeAsyncIterator()
        let call = Task {
            try await watch.run { heard in
                await heard.resting {
                    rest.yield()
                    for await _ in gate { break }
                }
                rest.yield()
                // After the rest, nothing more is heard.
                for await _ in AsyncStream<Void>.makeStream().stream {}
            }
        }
        var rests = resting.makeAsyncIterator()
        _ = await rests.next()
        _ = await sleeps.next()
        // Four looks while it rests: each would have ended a silent call from the second on.
        for _ in 0..<4 {
            clock.advance(by: limit)
            _ = await sleeps.next()
        }
        open.yield()
        _ = await rests.next()
        // The end of the rest counts as heard: one look passes, the next ends the call.
        clock.advance(by: limit)
        _ = await sleeps.next()
        clock.advance(by: limit)
        await #expect {
            try await call.value(within: testWaitLimit, "the call the watch ends")
        } throws: { error in
            (error as? TransportError)?.kind == .network && (error as? TransportError)?.message.contains("silent") == true
        }
    }
}
