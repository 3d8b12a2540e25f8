import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import OutpostConcurrency

/// Lets at most `limit` requests run at once; the others wait their turn.
///
/// A freed place goes to the waiting caller (a user of a tenant) with the fewest requests running, and among
/// equals to the one that has waited longest: however many requests some accounts queue, another account's
/// next request is let in as soon as a place frees. One caller's own requests keep their arrival order.
///
/// A waiting request holds only its connection and this small frame: its token is checked, but none of the
/// deeper frames (routing, decoding, storage, the database pool's lease) exist yet, and its body is read only
/// as far as ``AdmissionMiddleware`` reads it. With 1,000 devices syncing at once against a pool of 32
/// database connections, that keeps the server's memory bounded by the requests that can make progress, not
/// by the ones queued behind them.
///
/// Past `maxWaiting` waiting requests, a request is refused at once with 503 and `Retry-After`, which devices
/// retry with backoff; so is one that has waited `maxWait` (while the database is down, admitted requests
/// hold their places for up to their own 20 s bound, and the queue behind them must not wait for ever).
/// A request whose task is cancelled while it waits (its client went away) leaves the queue.
package final class AdmissionGate: Sendable {
    package struct Snapshot: Equatable, Sendable {
        package var running: Int
        package var waiting: Int
        /// Requests that gave their place back while their body arrives (see ``AdmissionMiddleware``).
        package var arriving = 0
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
        var arriving = 0
        var nextTicket: UInt64 = 0
        /// Each caller's requests that hold a place; a caller with none is absent.
        var runningByCaller: [String: Int] = [:]
        /// Each caller's tickets in arrival order; a ticket missing from `waiters` has left the queue and is
        /// skipped. A caller with no ticket left is absent.
        var queues: [String: CircularBuffer<UInt64>] = [:]
        var waiters: [UInt64: Waiter] = [:]

        mutating func run(_ caller: String) {
            runningByCaller[caller, default: 0] += 1
        }

        mutating func stop(_ caller: String) {
            guard let count = runningByCaller[caller] else { return }
            runningByCaller[caller] = count > 1 ? count - 1 : nil
        }

        /// The caller whose turn it is: fewest running, then the earliest first ticket. Tickets that left
        /// the queue are dropped on the way.
        mutating func nextCaller() -> String? {
            var best: (caller: String, running: Int, ticket: UInt64)?
            for caller in Array(queues.keys) {
                guard let ticket = firstLiveTicket(of: caller) else { continue }
                let running = runningByCaller[caller] ?? 0
                if let chosen = best, (chosen.running, chosen.ticket) < (running, ticket) { continue }
                best = (caller, running, ticket)
            }
            return best?.caller
        }

        private mutating func firstLiveTicket(of caller: String) -> UInt64? {
            while let ticket = queues[caller]?.first {
                if waiters[ticket] != nil { return ticket }
                queues[caller]?.removeFirst()
            }
            queues[caller] = nil
            return nil
        }
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
        state.withLockedValue { Snapshot(running: $0.running, waiting: $0.waiters.count, arriving: $0.arriving) }
    }

    /// Runs `body` once admitted, and lets the next waiter in when it ends. While `body` reads its request's
    /// body, the request may give its place back (``Arrival/giveBack()``): it then waits its turn again when
    /// `body` calls ``Arrival/arrived()``, counted meanwhile in ``Snapshot/arriving``.
    package func withAdmission<T>(caller: String = "", arriving body: (Arrival) async throws -> T) async throws -> T {
        try await enter(caller)
        let arrival = Arrival(gate: self, caller: caller)
        defer { arrival.end() }
        return try await body(arrival)
    }

    /// A request's place while its body arrives; see ``withAdmission(caller:arriving:)``.
    package final class Arrival: Sendable {
        private enum State {
            case holding
            /// Given back while the body arrives; counted in ``Snapshot/arriving``.
            case givenBack
            /// Waiting for a place again.
            case rejoining
            /// Held to the end: the body arrived with the place held, or the place was taken again.
            case kept
            case ended
        }

        private let gate: AdmissionGate
        private let caller: String
        private let state = NIOLockedValueBox(State.holding)

        fileprivate init(gate: AdmissionGate, caller: String) {
            self.gate = gate
            self.caller = caller
        }

        /// Gives the place back, unless the body has arrived: another request may have it meanwhile.
        package func giveBack() {
            let given = state.withLockedValue { state in
                guard state == .holding else { return false }
                state = .givenBack
                return true
            }
            guard given else { return }
            gate.state.withLockedValue { $0.arriving += 1 }
            gate.leave(caller)
        }

        /// The body has arrived: the place is kept, or, given back, waited for again.
        ///
        /// - Throws: as ``AdmissionGate/withAdmission(caller:_:)`` does while it waits.
        package func arrived() async throws {
            let rejoin = state.withLockedValue { state -> Bool in
                switch state {
                case .holding:
                    state = .kept
                    return false
                case .givenBack:
                    state = .rejoining
                    return true
                case .rejoining, .kept, .ended:
                    return false
                }
            }
            guard rejoin else { return }
            gate.state.withLockedValue { $0.arriving -= 1 }
            try await gate.enter(caller)
            state.withLockedValue { $0 = .kept }
        }

        fileprivate func end() {
            let (held, arriving) = state.withLockedValue { state -> (Bool, Bool) in
                defer { state = .ended }
                switch state {
                case .holding, .kept: return (true, false)
                case .givenBack: return (false, true)
                case .rejoining, .ended: return (false, false)
                }
            }
            if held { gate.leave(caller) }
            if arriving { gate.state.withLockedValue { $0.arriving -= 1 } }
        }
    }

    /// Runs `body` once admitted, and lets the next waiter in when it ends.
    ///
    /// - Parameter caller: whose request it is (``Identity/admissionKey``); requests without a caller share "".
    /// - Throws: ``OutpostHTTPError/busy`` when the queue is full or the wait reaches `maxWait`;
    ///   `CancellationError` when the task is cancelled while it waits; whatever `body` throws.
    @discardableResult
    package func withAdmission<T>(caller: String = "", _ body: () async throws -> T) async throws -> T {
        try await enter(caller)
        defer { leave(caller) }
        return try await body()
    }

    private enum Entry {
        case admitted
        case wait(UInt64)
        case full
    }

    private func enter(_ caller: String) async throws {
        let entry: Entry = state.withLockedValue { state in
            if state.running < limit {
                state.running += 1
                state.run(caller)
                return .admitted
            }
            guard state.waiters.count < maxWaiting else { return .full }
            state.nextTicket += 1
            state.queues[caller, default: CircularBuffer()].append(state.nextTicket)
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

    /// Hands this request's place to the waiter whose turn it is (see ``AdmissionGate``), or frees it.
    private func leave(_ caller: String) {
        let next = state.withLockedValue { state -> CheckedContinuation<Void, any Error>? in
            state.stop(caller)
            while let chosen = state.nextCaller(), let ticket = state.queues[chosen]?.popFirst() {
                if state.queues[chosen]?.isEmpty == true { state.queues[chosen] = nil }
                switch state.waiters[ticket] {
                case .waiting(let continuation):
                    state.waiters[ticket] = nil
                    state.run(chosen)
                    return continuation
                case .arriving:
                    state.waiters[ticket] = .decided(.success(()))
                    state.run(chosen)
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

/// Puts every request of a route group through its caller's own gate (``CallerGates``), then the server's
/// (``AdmissionGate``): one account never holds more than its share of the places.
///
/// A request's body must arrive before the request counts: one whose body is still arriving after
/// `bodyGrace` gives its place back, reads the rest holding only its caller's place, and waits its turn again
/// once the body is whole. A client that trickles bodies, from any number of accounts, then holds no place of
/// the server's for longer than the grace, and a well-behaved account's request finds one. A body read after
/// the grace is held in memory until its turn: at most ``CallerGates/share`` bodies of
/// ``ServerConfiguration/maxBodyBytes`` per account, for at most ``ServerConfiguration/bodyTimeout``.
///
/// With `defersBody`, the route reads its body itself, through ``RequestDecoding/collectBody(of:maxBytes:timeout:watch:)``,
/// after checks that need none of it (a file's upload is refused before any byte of it is read); the read gives
/// the place back after the grace as this middleware's own does.
struct AdmissionMiddleware: RouterMiddleware {
    typealias Context = OutpostRequestContext
    let gate: AdmissionGate
    let callers: CallerGates
    let maxBodyBytes: Int
    let bodyTimeout: Duration
    var bodyGrace: Duration = .milliseconds(250)
    var watch: DeadlineWatch = .shared
    var defersBody = false

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let caller = context.identity?.admissionKey ?? ""
        return try await callers.withAdmission(caller: caller) {
            guard Self.hasBody(request) else {
                return try await gate.withAdmission(caller: caller) { try await next(request, context) }
            }
            return try await gate.withAdmission(caller: caller) { arrival in
                let arriving = ArrivingBody(arrival: arrival, grace: bodyGrace, watch: watch)
                if defersBody {
                    return try await RequestDecoding.$arrivingBody.withValue(arriving) { try await next(request, context) }
                }
                let body = try await arriving.collect {
                    try await RequestDecoding.collectBody(of: request, maxBytes: maxBodyBytes, timeout: bodyTimeout, watch: watch)
                }
                var request = request
                request.body = RequestBody(buffer: body)
                return try await RequestDecoding.$arrivedBody.withValue(body) { try await next(request, context) }
            }
        }
    }

    /// Whether the request may carry a body: a length above zero, a chunked one, or a method that sends one.
    static func hasBody(_ request: Request) -> Bool {
        if let length = request.headers[.contentLength] { return length != "0" }
        if request.headers[.transferEncoding] != nil { return true }
        return [.post, .put, .patch].contains(request.method)
    }
}

/// A request's place at the gate while its body arrives (see ``AdmissionMiddleware``).
struct ArrivingBody: Sendable {
    let arrival: AdmissionGate.Arrival
    let grace: Duration
    var watch: DeadlineWatch = .shared

    /// Reads the body with `read`, giving the place back should it take longer than the grace, and waits for the
    /// place again once it has arrived.
    func collect<Body>(_ read: () async throws -> Body) async throws -> Body {
        let deadline = watch.schedule(after: grace) { [arrival] in arrival.giveBack() }
        let body: Body
        do {
            body = try await read()
        } catch {
            watch.cancel(deadline)
            throw error
        }
        watch.cancel(deadline)
        try await arrival.arrived()
        return body
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
