import Foundation

/// Elements handed from one producing task to one consumer, with room for `capacity` that wait to be taken.
///
/// A giver beyond that waits, element in hand, until the consumer takes one: a producer that reads pages off the
/// network faster than the device stores them holds at most `capacity + 1` of them, and stops reading, so that the
/// connection's own flow control holds back the rest. (`AsyncThrowingStream`'s buffer has no such bound: a stream
/// of 40 pages of 4 MiB could all wait in memory.)
final class Handoff<Element: Sendable>: @unchecked Sendable {
    /// Who waits: the giver, for room; the consumer, for an element.
    enum Party: Sendable {
        case giver, taker
    }

    private let capacity: Int
    /// Told each time a giver or the consumer begins to wait (for tests).
    private let onWait: (@Sendable (Party) -> Void)?
    private let lock = NSLock()
    private var queue: [Element] = []
    /// A giver waiting for room, with its element.
    private var giver: (element: Element, continuation: CheckedContinuation<Void, any Error>)?
    /// The consumer waiting for an element.
    private var taker: CheckedContinuation<Element?, any Error>?
    /// How the producer ended, once it has: delivered after the elements still waiting.
    private var end: Result<Void, any Error>?
    /// The consumer let go: givers are refused from then on.
    private var abandoned = false

    /// - Parameter onWait: told each time a giver or the consumer begins to wait, once it waits (for tests).
    init(capacity: Int, onWait: (@Sendable (Party) -> Void)? = nil) {
        self.capacity = max(capacity, 0)
        self.onWait = onWait
    }

    /// How many elements wait to be taken, whether a giver waits for room, and whether the consumer waits for an
    /// element (for tests).
    var state: (waiting: Int, giverWaits: Bool, takerWaits: Bool) {
        lock.withLock { (queue.count, giver != nil, taker != nil) }
    }

    /// Hands over `element`, waiting while `capacity` elements wait already. Throws `CancellationError` when the
    /// consumer has let go or the giving task is cancelled; the element is then dropped.
    func give(_ element: Element) async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resume = lock.withLock { () -> () -> Void in
                    if abandoned || Task.isCancelled || giver != nil {
                        return { continuation.resume(throwing: CancellationError()) }
                    }
                    if let taker {
                        self.taker = nil
                        return {
                            taker.resume(returning: element)
                            continuation.resume()
                        }
                    }
                    if queue.count < capacity {
                        queue.append(element)
                        return { continuation.resume() }
                    }
                    giver = (element, continuation)
                    return { self.onWait?(.giver) }
                }
                resume()
            }
        } onCancel: {
            let waiting = lock.withLock { () -> CheckedContinuation<Void, any Error>? in
                defer { giver = nil }
                return giver?.continuation
            }
            waiting?.resume(throwing: CancellationError())
        }
    }

    /// Ends the elements: `take()` answers nil (or throws `error`) once those given before are taken.
    func finish(throwing error: (any Error)? = nil) {
        let result: Result<Void, any Error> = error.map { .failure($0) } ?? .success(())
        let waiting = lock.withLock { () -> CheckedContinuation<Element?, any Error>? in
            guard end == nil else { return nil }
            guard let taker else {
                end = result
                return nil
            }
            // Told now, to the consumer waiting; after it, the end.
            end = .success(())
            self.taker = nil
            return taker
        }
        if let waiting { Self.deliver(result, to: waiting) }
    }

    /// The next element, waiting for one; nil after the last. Throws the producer's error after the elements given
    /// before it, or `CancellationError` when the taking task is cancelled.
    func take() async throws -> Element? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Element?, any Error>) in
                let resume = lock.withLock { () -> () -> Void in
                    if Task.isCancelled || taker != nil {
                        return { continuation.resume(throwing: CancellationError()) }
                    }
                    // A waiting giver's element goes behind those waiting, and the giver on its way.
                    let given = giver?.continuation
                    if let giver {
                        queue.append(giver.element)
                        self.giver = nil
                    }
                    if !queue.isEmpty {
                        let element = queue.removeFirst()
                        return {
                            continuation.resume(returning: element)
                            given?.resume()
                        }
                    }
                    if let end {
                        // An error is told once; after it, the end.
                        self.end = .success(())
                        return { Self.deliver(end, to: continuation) }
                    }
                    taker = continuation
                    return { self.onWait?(.taker) }
                }
                resume()
            }
        } onCancel: {
            let waiting = lock.withLock { () -> CheckedContinuation<Element?, any Error>? in
                defer { taker = nil }
                return taker
            }
            waiting?.resume(throwing: CancellationError())
        }
    }

    /// The consumer lets go: what waits is dropped, and a waiting giver, and every later one, is refused.
    func abandon() {
        let waiting = lock.withLock { () -> CheckedContinuation<Void, any Error>? in
            abandoned = true
            queue.removeAll()
            defer { giver = nil }
            return giver?.continuation
        }
        waiting?.resume(throwing: CancellationError())
    }

    private static func deliver(_ end: Result<Void, any Error>, to taker: CheckedContinuation<Element?, any Error>) {
        switch end {
        case .success: taker.resume(returning: nil)
        case .failure(let error): taker.resume(throwing: error)
        }
    }
}

extension AsyncThrowingStream where Failure == any Error {
    /// How many pages a stream holds ready beyond the one its consumer works on, by default: enough that the
    /// next page is read while the consumer stores one, and no more.
    static var defaultReadAhead: Int { 2 }

    /// A stream whose elements `produce` delivers from a task of its own, at most `readAhead` ahead of the
    /// consumer: `deliver` waits while that many wait to be taken. The stream ends when `produce` returns or
    /// throws. The task is cancelled when the consumer is cancelled or lets the stream go. `onWait` is the
    /// handoff's, for tests.
    static func produced(
        readAhead: Int = defaultReadAhead,
        onWait: (@Sendable (Handoff<Element>.Party) -> Void)? = nil,
        by produce:
            @escaping @Sendable (_ deliver: @escaping @Sendable (Element) async throws -> Void) async throws
            -> Void
    ) -> Self
    where Element: Sendable {
        let handoff = Handoff<Element>(capacity: readAhead, onWait: onWait)
        let task = Task {
            do {
                try await produce { try await handoff.give($0) }
                handoff.finish()
            } catch {
                handoff.finish(throwing: error)
            }
        }
        let consumer = HandoffConsumer(handoff: handoff, producer: task)
        return AsyncThrowingStream(unfolding: { try await consumer.next() })
    }
}

/// The consumer's end of a produced stream, held only by the stream: when the stream and its iterators are let go,
/// the producer is cancelled and anything it still gives is refused.
private final class HandoffConsumer<Element: Sendable>: Sendable {
    let handoff: Handoff<Element>
    let producer: Task<Void, Never>

    init(handoff: Handoff<Element>, producer: Task<Void, Never>) {
        self.handoff = handoff
        self.producer = producer
    }

    func next() async throws -> Element? {
        try await withTaskCancellationHandler {
            try await handoff.take()
        } onCancel: {
            producer.cancel()
        }
    }

    deinit {
        producer.cancel()
        handoff.abandon()
    }
}
