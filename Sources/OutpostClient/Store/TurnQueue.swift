import NIOConcurrencyHelpers

/// Gives turns per key within the process: one body of a key runs at a time, and callers that find the key taken
/// wait for their turn in the order they came.
///
/// A waiting caller that is cancelled leaves the queue at once and throws `CancellationError`. A body must not ask
/// for a turn of its own key: it would wait for itself.
///
/// Home-made because none of the packages this project builds on (swift-async-algorithms, swift-concurrency-extras,
/// SwiftNIO) has an async lock per key that a cancelled waiter leaves at once.
final class TurnQueue: Sendable {
    private struct Waiter {
        var id: Int
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var taken: Set<String> = []
        var queues: [String: [Waiter]] = [:]
        var lastId = 0
    }

    /// Where a test holds or watches a caller that found its key taken.
    struct Seams: Sendable {
        /// Runs between finding the key taken and joining its queue.
        var beforeJoining: (@Sendable () async -> Void)?
        /// Runs once a caller has joined its key's queue.
        var joined: (@Sendable () -> Void)?
    }

    private let state = NIOLockedValueBox(State())
    /// Empty but in tests; read only by a caller that found its key taken.
    let seams = NIOLockedValueBox(Seams())

    /// Callers waiting for a turn, all keys together.
    var waiting: Int { state.withLockedValue { $0.queues.values.reduce(0) { $0 + $1.count } } }

    /// Runs `body` in `key`'s turn, then gives the turn to the next caller waiting, whatever `body`'s outcome.
    ///
    /// - Throws: `CancellationError` when cancelled while waiting; what `body` throws.
    func run<T>(_ key: String, _ body: () async throws -> T) async throws -> T {
        try await take(key)
        defer { give(key) }
        return try await body()
    }

    private func take(_ key: String) async throws {
        let id = state.withLockedValue { state -> Int? in
            if state.taken.insert(key).inserted { return nil }
            state.lastId += 1
            return state.lastId
        }
        guard let id else { return }
        let seams = self.seams.withLockedValue { $0 }
        await seams.beforeJoining?()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLockedValue { state -> Result<Void, any Error>? in
                    // Cancelled before the handler could find it in the queue: it never joins.
                    if Task.isCancelled { return .failure(CancellationError()) }
                    // The turn was given back since the key was found taken, to nobody: it is this caller's. (A
                    // caller joining now would wait for a give that never comes.)
                    if state.taken.insert(key).inserted { return .success(()) }
                    state.queues[key, default: []].append(Waiter(id: id, continuation: continuation))
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) } else { seams.joined?() }
            }
        } onCancel: {
            let leaving = state.withLockedValue { state -> Waiter? in
                guard let position = state.queues[key]?.firstIndex(where: { $0.id == id }) else { return nil }
                return state.queues[key]?.remove(at: position)
            }
            leaving?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Hands the turn to the first caller waiting, or frees the key.
    private func give(_ key: String) {
        let next = state.withLockedValue { state -> Waiter? in
            guard var queue = state.queues[key], !queue.isEmpty else {
                state.taken.remove(key)
                state.queues[key] = nil
                return nil
            }
            let first = queue.removeFirst()
            state.queues[key] = queue.isEmpty ? nil : queue
            return first
        }
        next?.continuation.resume()
    }
}
