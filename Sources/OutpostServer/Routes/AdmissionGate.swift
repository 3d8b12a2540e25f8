import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import OutpostConcurrency

/// Lets at most `limit` requests run at once; the others wait their turn, first come first served.
///
/// A waiting request holds only its connection and this small frame: its body is not read, its token not
/// checked, and none of the deeper frames (routing, decoding, storage, the database pool's lease) exist yet.
/// With 1,000 devices syncing at once against a pool of 32 database connections, that keeps the server's
/// memory bounded by the requests that can make progress, not by the ones queued behind them.
///
/// Past `maxWaiting` waiting requests, a request is refused at once with 503 and `Retry-After`, which devices
/// retry with backoff; so is one that has waited `maxWait` (while the database is down, admitted requests
/// hold their places for up to their own 20 s bound, and the queue behind them must not wait for ever).
/// A request whose task is cancelled while it waits (its client went away) leaves the queue.
package final class AdmissionGate: Sendable {
    package struct Snapshot: Equatable, Sendable {
        package var running: Int
        package var waiting: Int
    }

    /// A waiter's state; its continuation is stored a moment after it takes its ticket, and a release, a
    /// cancellation or its deadline can come in between.
    private enum Waiter {
        case arriving
        case waiting(CheckedContinuation<Void, any Error>)
        /// Let in (success) or refused (failure) before its continuation was stored: it resumes with this
        /// as soon as it stores it.
        case decided(Result<Void, any Error>)
    }

    private struct State {
        var running = 0
        var nextTicket: UInt64 = 0
        /// Tickets in arrival order; a ticket missing from `waiters` has left the queue and is skipped.
        var order = CircularBuffer<UInt64>()
        var waiters: [UInt64: Waiter] = [:]
    }

    package let limit: Int
    package let maxWaiting: Int
    package let maxWait: Duration
    private let watch: DeadlineWatch
    private let state = NIOLockedValueBox(State())

    package init(limit: Int, maxWaiting: Int, maxWait: Duration = .seconds(20), watch: DeadlineWatch = .shared) {
        precondition(limit >= 1 && maxWaiting >= 0)
        self.limit = limit
        self.maxWaiting = maxWaiting
        self.maxWait = maxWait
        self.watch = watch
    }

    /// How many requests run and how many wait, for metrics and tests.
    package var snapshot: Snapshot {
        state.withLockedValue { Snapshot(running: $0.running, waiting: $0.waiters.count) }
    }

    /// Runs `body` once admitted, and lets the next waiter in when it ends.
    ///
    /// - Throws: ``OutpostHTTPError/busy`` when the queue is full or the wait reaches `maxWait`;
    ///   `CancellationError` when the task is cancelled while it waits; whatever `body` throws.
    @discardableResult
    package func withAdmission<T>(_ body: () async throws -> T) async throws -> T {
        try await enter()
        defer { leave() }
        return try await body()
    }

    private enum Entry {
        case admitted
        case wait(UInt64)
        case full
    }

    private func enter() async throws {
        let entry: Entry = state.withLockedValue { state in
            if state.running < limit {
                state.running += 1
                return .admitted
            }
            guard state.waiters.count < maxWaiting else { return .full }
            state.nextTicket += 1
            state.order.append(state.nextTicket)
            state.waiters[state.nextTicket] = .arriving
            return .wait(state.nextTicket)
        }
        switch entry {
        case .admitted: return
        case .full: throw OutpostHTTPError.busy
        case .wait(let ticket):
            let deadline = watch.schedule(after: maxWait) { [self] in refuse(ticket, OutpostHTTPError.busy) }
            defer { watch.cancel(deadline) }
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    let decided = state.withLockedValue { state -> Result<Void, any Error>? in
                        guard case .decided(let result) = state.waiters[ticket] else {
                            state.waiters[ticket] = .waiting(continuation)
                            return nil
                        }
                        state.waiters[ticket] = nil
                        return result
                    }
                    if let decided { continuation.resume(with: decided) }
                }
            } onCancel: {
                refuse(ticket, CancellationError())
            }
        }
    }

    /// Takes a waiter out of the queue, cancelled or timed out: it throws `error`, now or as soon as it
    /// stores its continuation. A waiter already let in or refused goes on as it is.
    private func refuse(_ ticket: UInt64, _ error: any Error) {
        let continuation = state.withLockedValue { state -> CheckedContinuation<Void, any Error>? in
            switch state.waiters[ticket] {
            case .waiting(let continuation):
                state.waiters[ticket] = nil
                return continuation
            case .arriving:
                state.waiters[ticket] = .decided(.failure(error))
                return nil
            case .decided, nil:
                return nil
            }
        }
        continuation?.resume(throwing: error)
    }

    /// Hands this request's place to the first waiter still waiting, or frees it.
    private func leave() {
        let next = state.withLockedValue { state -> CheckedContinuation<Void, any Error>? in
            while let ticket = state.order.popFirst() {
                switch state.waiters[ticket] {
                case .waiting(let continuation):
                    state.waiters[ticket] = nil
                    return continuation
                case .arriving:
                    state.waiters[ticket] = .decided(.success(()))
                    return nil
                case .decided, nil:
                    continue
                }
            }
            state.running -= 1
            return nil
        }
        next?.resume()
    }
}

/// Puts every request of a route group through an ``AdmissionGate``.
/// Lets a request in through its caller's own gate, then the server's: one account never holds more than its
/// ``CallerGates/share`` of the places.
struct AdmissionMiddleware: RouterMiddleware {
    typealias Context = OutpostRequestContext
    let gate: AdmissionGate
    let callers: CallerGates

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let caller = context.identity.map { "\($0.tenant)\u{0}\($0.userId)" } ?? ""
        return try await callers.withAdmission(caller: caller) {
            try await gate.withAdmission { try await next(request, context) }
        }
    }
}

/// Keeps one caller (a user of a tenant) from holding more than `share` of the server's places: their further
/// requests wait in a queue of their own, holding only their connection. A client that trickles its bodies,
/// or floods, from one account then delays that account alone, never another's pull.
package final class CallerGates: Sendable {
    /// The most requests of one caller that run, or wait at the server's gate, at once.
    package let share: Int
    private let maxWaiting: Int
    private let maxWait: Duration
    private let gates = NIOLockedValueBox<[String: (gate: AdmissionGate, users: Int)]>([:])

    package init(share: Int, maxWaiting: Int, maxWait: Duration = .seconds(20)) {
        self.share = max(1, share)
        self.maxWaiting = maxWaiting
        self.maxWait = maxWait
    }

    /// Runs `body` once the caller has a place of their own; the caller's gate is dropped when none of theirs is left.
    package func withAdmission<T>(caller: String, _ body: () async throws -> T) async throws -> T {
        let gate = gates.withLockedValue { gates in
            let entry = gates[caller] ?? (AdmissionGate(limit: share, maxWaiting: maxWaiting, maxWait: maxWait), 0)
            gates[caller] = (entry.gate, entry.users + 1)
            return entry.gate
        }
        defer {
            gates.withLockedValue { gates in
                guard let entry = gates[caller] else { return }
                if entry.users <= 1 { gates[caller] = nil } else { gates[caller] = (entry.gate, entry.users - 1) }
            }
        }
        return try await gate.withAdmission(body)
    }

    /// How many callers hold or wait for places: for tests.
    package var callers: Int { gates.withLockedValue { $0.count } }
}
