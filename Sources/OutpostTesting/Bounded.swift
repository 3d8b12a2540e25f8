import NIOConcurrencyHelpers

/// A wait that went on past its bound: what was awaited, and the bound.
public struct StillWaiting: Error, CustomStringConvertible {
    public var what: String
    public var limit: Duration

    public var description: String { "still waiting for \(what) after \(limit)" }
}

/// How long a test waits for what it started before it fails: far longer than any correct run takes on a busy
/// machine, so that only a hang reaches it.
public let testWaitLimit = Duration.seconds(120)

/// Runs `operation` in a task of its own and waits for it for at most `limit` of real time; past the limit the
/// task is cancelled and left behind, and this throws ``StillWaiting`` naming `what`.
///
/// A safety net for tests, so that a lost wake-up fails with a diagnostic instead of hanging the run: no test's
/// outcome depends on the bound, which only a hang reaches. Left behind, an operation that ignores cancellation
/// cannot hold the caller. Cancelling the caller cancels the operation.
public func bounded<T: Sendable>(
    _ what: String, within limit: Duration = testWaitLimit, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await Task { try await operation() }.value(within: limit, what)
}

extension Task where Failure == any Error {
    /// The task's value, waited for at most `limit` of real time (see ``bounded(_:within:_:)``); the task is
    /// cancelled when the caller is, and past the limit.
    ///
    /// - Throws: what the task throws; ``StillWaiting`` past the limit.
    public func value(within limit: Duration = testWaitLimit, _ what: String) async throws -> Success {
        try await awaitBounded(limit, what, result: { await self.result }, cancel: { self.cancel() })
    }
}

extension Task where Failure == Never {
    /// The task's value, waited for at most `limit` of real time (see ``bounded(_:within:_:)``); the task is
    /// cancelled when the caller is, and past the limit.
    ///
    /// - Throws: ``StillWaiting`` past the limit.
    public func value(within limit: Duration = testWaitLimit, _ what: String) async throws -> Success {
        try await awaitBounded(limit, what, result: { .success(await self.value) }, cancel: { self.cancel() })
    }
}

private func awaitBounded<T: Sendable>(
    _ limit: Duration, _ what: String, result: @escaping @Sendable () async -> Result<T, any Error>,
    cancel: @escaping @Sendable () -> Void
) async throws -> T {
    let first = FirstResult<T>()
    // Both waits in tasks of their own: the caller waits only for the first to answer.
    let waiting = Task { first.resume(with: await result()) }
    let timer = Task {
        do { try await Task.sleep(for: limit) } catch { return }
        first.resume(with: .failure(StillWaiting(what: what, limit: limit)))
    }
    defer {
        timer.cancel()
        waiting.cancel()
    }
    do {
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { first.install($0) }
        } onCancel: {
            cancel()
        }
    } catch let error as StillWaiting {
        cancel()
        throw error
    }
}

/// Resumes one continuation with whichever result comes first, once, whether the continuation or the result
/// comes first.
private final class FirstResult<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var result: Result<T, any Error>?
        var finished = false
    }

    private let state = NIOLockedValueBox(State())

    func install(_ continuation: CheckedContinuation<T, any Error>) {
        let ready = state.withLockedValue { state -> Result<T, any Error>? in
            guard let result = state.result else {
                state.continuation = continuation
                return nil
            }
            state.finished = true
            return result
        }
        if let ready { continuation.resume(with: ready) }
    }

    func resume(with result: Result<T, any Error>) {
        let waiting = state.withLockedValue { state -> CheckedContinuation<T, any Error>? in
            guard !state.finished, state.result == nil else { return nil }
            guard let continuation = state.continuation else {
                state.result = result
                return nil
            }
            state.finished = true
            state.continuation = nil
            return continuation
        }
        waiting?.resume(with: result)
    }
}
