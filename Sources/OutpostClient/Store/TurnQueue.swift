/// Gives turns per key within the process: one body of a key runs at a time, and callers that find the key taken
/// wait for their turn in the order they came.
///
/// A waiting caller that is cancelled leaves the queue at once and throws `CancellationError`. A body must not ask
/// for a turn of its own key: it would wait for itself.
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

    private let state = LockedBox(State())

    /// Callers waiting for a turn, all keys together.
    var waiting: Int { state.withLock { $0.queues.values.reduce(0) { $0 + $1.count } } }

    /// Runs `body` in `key`'s turn, then gives the turn to the next caller waiting, whatever `body`'s outcome.
    ///
    /// - Throws: `CancellationError` when cancelled while waiting; what `body` throws.
    func run<T>(_ key: String, _ body: () async throws -> T) async throws -> T {
        try await take(key)
        defer { give(key) }
        return try await body()
    }

    private func take(_ key: String) async throws {
        let id = state.withLock { state -> Int? in
            if state.taken.insert(key).inserted { return nil }
            state.lastId += 1
            return state.lastId
        }
        guard let id else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // Cancelled before the handler could find it in the queue: it never joins.
                let cancelled = state.withLock { state -> Bool in
                    guard !Task.isCancelled else { return true }
                    state.queues[key, default: []].append(Waiter(id: id, continuation: continuation))
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let leaving = state.withLock { state -> Waiter? in
                guard let position = state.queues[key]?.firstIndex(where: { $0.id == id }) else { return nil }
                return state.queues[key]?.remove(at: position)
            }
            leaving?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Hands the turn to the first caller waiting, or frees the key.
    private func give(_ key: String) {
        let next = state.withLock { state -> Waiter? in
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
