import AsyncAlgorithms

extension AsyncThrowingStream where Failure == any Error {
    /// How many pages a stream holds ready beyond the one its consumer works on, by default: enough that the
    /// next page is read while the consumer stores one, and no more.
    package static var defaultReadAhead: Int { 2 }

    /// A stream whose elements `produce` delivers from a task of its own, at most `readAhead` ahead of the
    /// consumer.
    ///
    /// `deliver` hands an element over through an `AsyncThrowingChannel` (swift-async-algorithms) into a buffer of
    /// `readAhead`, and waits while the buffer is full: a producer that reads pages off the network faster than the
    /// device stores them holds at most `readAhead + 1` of them, and stops reading, so that the connection's own
    /// flow control holds back the rest. (`AsyncThrowingStream`'s own buffer has no such bound.)
    ///
    /// The stream ends when `produce` returns, or throws its error after the elements delivered before it. The
    /// producing task is cancelled when the consumer is cancelled or lets the stream go; `deliver` then throws
    /// `CancellationError`, and the element is dropped.
    package static func produced(
        readAhead: Int = defaultReadAhead,
        by produce:
            @escaping @Sendable (_ deliver: @escaping @Sendable (Element) async throws -> Void) async throws
            -> Void
    ) -> Self
    where Element: Sendable {
        precondition(readAhead > 0, "a produced stream reads at least one element ahead")
        let channel = AsyncThrowingChannel<Element, any Error>()
        let producer = Task { await channel.feed(by: produce) }
        let consumer = ProducedStreamConsumer(elements: channel.buffer(policy: .bounded(readAhead)), producer: producer)
        return AsyncThrowingStream(unfolding: { try await consumer.next() })
    }
}

extension AsyncThrowingChannel where Failure == any Error {
    /// Runs `produce`, handing what it makes to this channel, and ends the channel as `produce` ends: with its
    /// error, after what it handed on before it. Once the producing task is cancelled, `send` throws
    /// `CancellationError`, its element not handed on.
    func feed(
        by produce: (_ send: @escaping @Sendable (Element) async throws -> Void) async throws -> Void
    ) async {
        do {
            try await produce { element in
                await self.send(element)
                // A send returns without handing the element on when the producing task is cancelled.
                try Task.checkCancellation()
            }
            finish()
        } catch {
            fail(error)
        }
    }
}

/// The consumer's end of a produced stream, held only by the stream: when the stream and its iterators are let go,
/// the producer is cancelled.
///
/// Unchecked: its iterator is used by one task at a time, as `AsyncThrowingStream(unfolding:)` asks for elements
/// one after another.
private final class ProducedStreamConsumer<Base: AsyncSequence & Sendable>: @unchecked Sendable
where Base.Element: Sendable {
    private var iterator: AsyncBufferSequence<Base>.AsyncIterator
    private let producer: Task<Void, Never>

    init(elements: AsyncBufferSequence<Base>, producer: Task<Void, Never>) {
        self.iterator = elements.makeAsyncIterator()
        self.producer = producer
    }

    func next() async throws -> Base.Element? {
        let element = try await withTaskCancellationHandler {
            try await iterator.next()
        } onCancel: { [producer] in
            producer.cancel()
        }
        // A cancelled consumer's wait ends without an element: that is its cancellation, not the stream's end.
        if element == nil { try Task.checkCancellation() }
        return element
    }

    deinit {
        producer.cancel()
    }
}
