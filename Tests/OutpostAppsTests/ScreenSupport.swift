import Foundation
import Observation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting

/// Waits for the next element of `arrivals`, bounded.
func next(_ arrivals: AsyncStream<Void>, _ what: String) async throws {
    try await bounded(what) {
        var iterator = arrivals.makeAsyncIterator()
        _ = await iterator.next()
    }
}

/// A location service whose answer the test changes, and can hold until it is released.
final class TestLocation: LocationProvider, @unchecked Sendable {
    private let lock = NSLock()
    private var fix: LocationFix?
    private var held: [CheckedContinuation<Void, Never>]?
    /// An element each time an answer starts waiting.
    let arrivals: AsyncStream<Void>
    private let arrival: AsyncStream<Void>.Continuation

    init(_ fix: LocationFix?) {
        self.fix = fix
        (arrivals, arrival) = AsyncStream.makeStream()
    }

    func set(_ fix: LocationFix?) {
        lock.withLock { self.fix = fix }
    }

    /// Makes the next answers wait for ``release()``.
    func hold() {
        lock.withLock { held = [] }
    }

    func release() {
        let waiting = lock.withLock {
            defer { held = nil }
            return held ?? []
        }
        for continuation in waiting { continuation.resume() }
    }

    func currentFix() async -> LocationFix? {
        await withCheckedContinuation { continuation in
            let waits = lock.withLock {
                guard held != nil else { return false }
                held?.append(continuation)
                return true
            }
            if waits { arrival.yield() } else { continuation.resume() }
        }
        return lock.withLock { fix }
    }
}

/// A transport whose pushes wait, when held, until the test releases them: for a screen's busy state.
final class HeldPushes: ForwardingTransport, @unchecked Sendable {
    let inner: any SyncTransport
    private let lock = NSLock()
    private var held: [CheckedContinuation<Void, Never>]?
    /// An element each time a push starts waiting.
    let arrivals: AsyncStream<Void>
    private let arrival: AsyncStream<Void>.Continuation

    init(_ inner: any SyncTransport) {
        self.inner = inner
        (arrivals, arrival) = AsyncStream.makeStream()
    }

    func hold() {
        lock.withLock { held = [] }
    }

    /// Lets the waiting pushes go; later ones wait again when `keepHolding`.
    func release(keepHolding: Bool = false) {
        let waiting = lock.withLock {
            defer { held = keepHolding ? [] : nil }
            return held ?? []
        }
        for continuation in waiting { continuation.resume() }
    }

    func push(_ request: PushRequest) async throws -> PushResponse {
        await withCheckedContinuation { continuation in
            let waits = lock.withLock {
                guard held != nil else { return false }
                held?.append(continuation)
                return true
            }
            if waits { arrival.yield() } else { continuation.resume() }
        }
        return try await inner.push(request)
    }
}
