import Foundation
import NIOConcurrencyHelpers

/// Runs an action when a deadline passes, for many operations at once, with one task that wakes every
/// `tick` while any deadline is pending, and none otherwise. A deadline fires up to one `tick` late.
///
/// It bounds the server's PostgreSQL operations and request bodies (``bounded(_:_:timedOut:)``), and ends the
/// device's calls whose answer falls silent (``endingSilence(after:_:silenced:)``).
///
/// Home-made, because a sleeping task per operation keeps its memory after the operation ends: on Linux a
/// cancelled `Task.sleep` keeps its task and dispatch timer until the time it was to wake. Here a finished
/// operation removes its entry, and the memory goes with it.
package final class DeadlineWatch: Sendable {
    package struct Entry: Hashable, Sendable {
        fileprivate let id: UInt64
    }

    private struct Pending {
        /// Since the watch was made; nil while held (see ``hold(_:)``).
        var deadline: Duration?
        /// Whether ``postpone(_:by:heard:)`` was told something was heard.
        var heard = false
        var action: @Sendable (_ heardAnything: Bool) -> Void

        mutating func move(to deadline: Duration, heard: Bool) {
            self.deadline = deadline
            if heard { self.heard = true }
        }
    }

    private struct State {
        var pending: [UInt64: Pending] = [:]
        var nextId: UInt64 = 0
        var watching = false
    }

    private let state = NIOLockedValueBox(State())
    private let tick: Duration
    /// Time since this watch was made, on its clock.
    private let elapsed: @Sendable () -> Duration
    private let sleep: @Sendable (Duration) async throws -> Void

    /// On `clock`: the real one in production, a test clock in tests.
    package init<C: Clock>(clock: C, tick: Duration = .milliseconds(250)) where C.Duration == Duration {
        let start = clock.now
        self.tick = tick
        self.elapsed = { start.duration(to: clock.now) }
        self.sleep = { try await clock.sleep(for: $0) }
    }

    /// The time since this watch was made, on its clock.
    package func timePassed() -> Duration { elapsed() }

    /// The watch every storage operation shares.
    package static let shared = DeadlineWatch(clock: ContinuousClock())

    /// How many deadlines are pending, for tests.
    package var pendingCount: Int { state.withLockedValue { $0.pending.count } }

    /// Runs `action` once `delay` has passed, unless ``cancel(_:)`` comes first.
    @discardableResult
    package func schedule(after delay: Duration, _ action: @escaping @Sendable () -> Void) -> Entry {
        schedule(after: delay) { _ in action() }
    }

    /// Runs `action` once `delay` has passed, unless ``cancel(_:)`` comes first; `action` learns whether
    /// ``postpone(_:by:heard:)`` was ever told something was heard.
    @discardableResult
    package func schedule(after delay: Duration, _ action: @escaping @Sendable (_ heardAnything: Bool) -> Void) -> Entry {
        let deadline = elapsed() + delay
        let (entry, start) = state.withLockedValue { state -> (Entry, Bool) in
            state.nextId += 1
            state.pending[state.nextId] = Pending(deadline: deadline, action: action)
            let start = !state.watching
            state.watching = true
            return (Entry(id: state.nextId), start)
        }
        // Detached: the loop may outlive the request that started it, and must not keep its task-locals.
        if start { Task.detached { await self.watch() } }
        return entry
    }

    /// Forgets a deadline; harmless once it has fired.
    package func cancel(_ entry: Entry) {
        state.withLockedValue { _ = $0.pending.removeValue(forKey: entry.id) }
    }

    /// Moves a pending deadline to `delay` from now, held or not; harmless once it has fired. `heard` records
    /// that the other side was heard, for the action.
    package func postpone(_ entry: Entry, by delay: Duration, heard: Bool = false) {
        let deadline = elapsed() + delay
        state.withLockedValue { $0.pending[entry.id]?.move(to: deadline, heard: heard) }
    }

    /// Holds a pending deadline: it does not fire until ``postpone(_:by:)`` sets it again.
    package func hold(_ entry: Entry) {
        state.withLockedValue { $0.pending[entry.id]?.deadline = nil }
    }

    /// Wakes every tick and runs what is due; ends once nothing is pending (the next deadline starts it again).
    private func watch() async {
        while true {
            try? await sleep(tick)
            let now = elapsed()
            let (due, done) = state.withLockedValue { state -> ([Pending], Bool) in
                let dueIds = state.pending.compactMap { entry in entry.value.deadline.map { $0 <= now } == true ? entry.key : nil }
                let due = dueIds.compactMap { state.pending.removeValue(forKey: $0) }
                if state.pending.isEmpty { state.watching = false }
                return (due, state.pending.isEmpty)
            }
            for pending in due { pending.action(pending.heard) }
            if done { return }
        }
    }
}

extension DeadlineWatch {
    /// Runs `body`, and gives up after `timeout` without waiting for it to finish, throwing `timedOut()`.
    package func bounded<T: Sendable>(
        _ timeout: Duration, _ body: @escaping @Sendable () async throws -> T,
        timedOut: @escaping @Sendable () -> any Error
    ) async throws -> T {
        let outcome = FirstOutcome<T>()
        let operation = Task {
            do {
                outcome.resume(with: .success(try await body()))
            } catch {
                outcome.resume(with: .failure(error))
            }
        }
        let deadline = schedule(after: timeout) {
            operation.cancel()
            outcome.resume(with: .failure(timedOut()))
        }
        defer { cancel(deadline) }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { outcome.install($0) }
        } onCancel: {
            operation.cancel()
        }
    }
}

extension DeadlineWatch {
    /// What a call tells the watch that ends it when it falls silent: that it heard a piece of the answer (call
    /// it as a function), and when it rests.
    package struct Hearing: Sendable {
        fileprivate let watch: DeadlineWatch
        fileprivate let entry: Entry
        fileprivate let limit: Duration

        package func callAsFunction() {
            watch.postpone(entry, by: limit, heard: true)
        }

        /// Runs `body`, a wait that is not the other side's silence (a stream waiting for its consumer to take
        /// what it read); the silence counts again from its end.
        package func resting<T>(_ body: () async throws -> T) async rethrows -> T {
            watch.hold(entry)
            defer { watch.postpone(entry, by: limit) }
            return try await body()
        }
    }

    /// Runs `operation` in a task of its own, which is cancelled once it has heard nothing for `limit` (up to a
    /// `tick` more), or nothing at all for `first`; the call then throws `silenced(heardAnything)`, however the
    /// operation ended. The caller's cancellation reaches the operation too.
    ///
    /// An HTTP client's deadline bounds only the wait for an answer's head; this bounds the silence of the rest.
    /// Give `first` beyond the client's deadline, so that a server that never answers fails with the client's
    /// own error.
    package func endingSilence<T: Sendable>(
        after limit: Duration, first: Duration? = nil, _ operation: @escaping @Sendable (_ heard: Hearing) async throws -> T,
        silenced: @escaping @Sendable (_ heardAnything: Bool) -> any Error
    ) async throws -> T {
        // Set once the deadline fires: whether anything was heard before.
        let fired = NIOLockedValueBox<Bool?>(nil)
        let running = NIOLockedValueBox<Task<T, any Error>?>(nil)
        // Scheduled before the operation starts, so that a rest at its very start is seen.
        let entry = schedule(after: first ?? limit) { heardAnything in
            fired.withLockedValue { $0 = heardAnything }
            running.withLockedValue { $0 }?.cancel()
        }
        defer { cancel(entry) }
        let task = Task { try await operation(Hearing(watch: self, entry: entry, limit: limit)) }
        running.withLockedValue { $0 = task }
        if fired.withLockedValue({ $0 }) != nil { task.cancel() }
        let result = await withTaskCancellationHandler {
            await task.result
        } onCancel: {
            task.cancel()
        }
        if let heardAnything = fired.withLockedValue({ $0 }) { throw silenced(heardAnything) }
        return try result.get()
    }
}

/// Resumes a continuation with whichever outcome comes first, once.
private final class FirstOutcome<T: Sendable>: Sendable {
    private struct State: Sendable {
        var continuation: CheckedContinuation<T, any Error>?
        var pending: Result<T, any Error>?
        var finished = false
    }

    private let state = NIOLockedValueBox(State())

    func install(_ continuation: CheckedContinuation<T, any Error>) {
        let ready: Result<T, any Error>? = state.withLockedValue { state in
            guard let pending = state.pending else {
                state.continuation = continuation
                return nil
            }
            state.finished = true
            return pending
        }
        if let ready { continuation.resume(with: ready) }
    }

    func resume(with result: Result<T, any Error>) {
        let waiting: CheckedContinuation<T, any Error>? = state.withLockedValue { state in
            guard !state.finished else { return nil }
            guard let continuation = state.continuation else {
                if state.pending == nil { state.pending = result }
                return nil
            }
            state.finished = true
            state.continuation = nil
            return continuation
        }
        waiting?.resume(with: result)
    }
}
