import Foundation
import OutpostConcurrency
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// A stream of pages read ahead of its consumer holds a bounded number of them: the producer waits, element in hand,
/// until the consumer takes one, and a wait for the consumer is not the server's silence.
@Suite("Read-ahead of streamed pages", .timeLimit(.minutes(5)))
struct ProducedStreamTests {
    /// A producer that delivers 0, 1, 2, … for ever, tells each element once delivered, and says how it ended.
    private func endless(
        delivered: AsyncStream<Int>.Continuation, ended: AsyncStream<Bool>.Continuation
    ) -> AsyncThrowingStream<Int, any Error> {
        AsyncThrowingStream<Int, any Error>.produced(readAhead: 2) { deliver in
            do {
                for n in 0... {
                    try await deliver(n)
                    delivered.yield(n)
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
        let (delivered, deliver) = AsyncStream<Int>.makeStream()
        var deliveries = delivered.makeAsyncIterator()
        do {
            var iterator = endless(delivered: deliver, ended: end).makeAsyncIterator()
            #expect(try await iterator.next() == 0)
            #expect(try await iterator.next() == 1)
            // Two taken and two waiting: the producer delivers 0 to 3, and waits with the fifth in hand.
            while let n = await deliveries.next(), n < 3 {}
            // However long the consumer leaves it, nothing more is delivered.
            for _ in 0..<1_000 { await Task.yield() }
            deliver.finish()
            #expect(await deliveries.next() == nil, "the producer delivered beyond its read-ahead")
            withExtendedLifetime(iterator) {}
        }
        // The stream is let go: its producer is cancelled in the middle of delivering.
        var endings = ended.makeAsyncIterator()
        #expect(await endings.next() == true)
    }

    @Test("every element arrives once, in order; the producer's error comes after them; then the end")
    func elementsThenError() async throws {
        struct Broke: Error {}
        let stream = AsyncThrowingStream<Int, any Error>.produced(readAhead: 3) { deliver in
            for n in 0..<50 { try await deliver(n) }
            throw Broke()
        }
        var iterator = stream.makeAsyncIterator()
        var received: [Int] = []
        await #expect(throws: Broke.self) {
            while let n = try await iterator.next() { received.append(n) }
        }
        #expect(received == Array(0..<50))
        #expect(try await iterator.next() == nil)
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

    /// Moves `clock` on by `tick`, `count` times, each once the watch sleeps again, and checks that the call is
    /// still watched after each look.
    private static func look(
        _ count: Int, every tick: Duration, on clock: ManualClock, sleeps: inout AsyncStream<Duration>.Iterator,
        watch: DeadlineWatch, sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        for _ in 0..<count {
            clock.advance(by: tick)
            _ = await sleeps.next()
            #expect(watch.pendingCount == 1, sourceLocation: sourceLocation)
        }
    }

    @Test("a call that rests is not ended by the silence watch; the silence after its rest counts again")
    func restIsNotSilence() async throws {
        let clock = ManualClock()
        let tick = Duration.seconds(10)
        let watch = DeadlineWatch(clock: clock, tick: tick)
        let (resting, rest) = AsyncStream<Void>.makeStream()
        let (gate, open) = AsyncStream<Void>.makeStream()
        var sleeps = clock.sleeps.makeAsyncIterator()
        struct Silenced: Error {}
        let call = Task {
            try await watch.endingSilence(after: .seconds(30)) { heard in
                await heard.resting {
                    rest.yield()
                    for await _ in gate { break }
                }
                rest.yield()
                // After the rest, nothing more is heard.
                for await _ in AsyncStream<Void>.makeStream().stream {}
            } silenced: { _ in
                Silenced()
            }
        }
        var rests = resting.makeAsyncIterator()
        _ = await rests.next()
        _ = await sleeps.next()
        // Twelve looks while it rests, four limits: a silent call would have been ended at the third.
        await Self.look(12, every: tick, on: clock, sleeps: &sleeps, watch: watch)
        open.yield()
        _ = await rests.next()
        // The end of the rest counts as heard: two looks pass, the third (a whole limit later) ends the call.
        await Self.look(2, every: tick, on: clock, sleeps: &sleeps, watch: watch)
        clock.advance(by: tick)
        await #expect(throws: Silenced.self) {
            try await call.value(within: testWaitLimit, "the call the watch ends")
        }
        #expect(watch.pendingCount == 0)
    }

    @Test("a call that hears nothing at all is ended at its first deadline, not at the limit")
    func firstDeadline() async throws {
        let clock = ManualClock()
        let tick = Duration.seconds(10)
        let watch = DeadlineWatch(clock: clock, tick: tick)
        var sleeps = clock.sleeps.makeAsyncIterator()
        struct Silenced: Error { var heardAnything: Bool }
        let call = Task {
            try await watch.endingSilence(after: .seconds(30), first: .seconds(60)) { _ in
                for await _ in AsyncStream<Void>.makeStream().stream {}
            } silenced: { heardAnything in
                Silenced(heardAnything: heardAnything)
            }
        }
        _ = await sleeps.next()
        // Five looks, 50 s: past the limit, short of the first deadline.
        await Self.look(5, every: tick, on: clock, sleeps: &sleeps, watch: watch)
        clock.advance(by: tick)
        let error = await #expect(throws: Silenced.self) {
            try await call.value(within: testWaitLimit, "the call the watch ends")
        }
        // It heard nothing at all: the transport says the server could not be reached.
        #expect(error?.heardAnything == false)
    }

    @Test("a call that keeps hearing is never ended, and leaves nothing pending")
    func hearingKeepsACall() async throws {
        let clock = ManualClock()
        let watch = DeadlineWatch(clock: clock, tick: .seconds(10))
        var sleeps = clock.sleeps.makeAsyncIterator()
        let (pieces, piece) = AsyncStream<Void>.makeStream()
        let (heardAll, told) = AsyncStream<Int>.makeStream()
        let call = Task {
            try await watch.endingSilence(after: .seconds(30)) { heard in
                var count = 0
                for await _ in pieces {
                    heard()
                    count += 1
                    told.yield(count)
                }
                return count
            } silenced: { _ in
                CancellationError()
            }
        }
        var counts = heardAll.makeAsyncIterator()
        _ = await sleeps.next()
        // A piece every 20 s, for ten minutes: never 30 s of silence.
        for n in 1...30 {
            piece.yield()
            #expect(await counts.next() == n)
            clock.advance(by: .seconds(10))
            _ = await sleeps.next()
            clock.advance(by: .seconds(10))
            _ = await sleeps.next()
        }
        piece.finish()
        #expect(try await call.value(within: testWaitLimit, "the call") == 30)
        #expect(watch.pendingCount == 0)
    }
}
