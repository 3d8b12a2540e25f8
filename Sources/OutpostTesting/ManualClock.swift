import NIOConcurrencyHelpers

/// A clock whose time moves only when a test advances it, and which reports each sleep once the sleeper waits.
///
/// A test awaits a report from ``sleeps``, then ``advance(by:)``: the sleep reported is already waiting, so an
/// advance by exactly the duration reported wakes it, however late the sleeping task runs again. (A clock that
/// reports a sleep before it waits lets such an advance slip in between: the sleeper then waits, at its deadline,
/// for an advance that never comes.)
///
/// A cancelled sleeper stops waiting at once and throws `CancellationError`.
///
/// Home-made beside swift-clocks' `TestClock`, whose `advance(by:)` lets sleepers run by yielding a fixed number of
/// times (`Task.megaYield`), which a loaded machine can outrun; this clock says when a sleep waits instead.
public final class ManualClock: Clock, Sendable {
    /// A point in the clock's time: how far it stands from the clock's start.
    public struct Instant: InstantProtocol {
        public var offset: Duration

        public init(offset: Duration = .zero) {
            self.offset = offset
        }

        public func advanced(by duration: Duration) -> Self {
            Instant(offset: offset + duration)
        }

        public func duration(to other: Self) -> Duration {
            other.offset - offset
        }

        public static func < (lhs: Self, rhs: Self) -> Bool {
            lhs.offset < rhs.offset
        }
    }

    private struct Sleeper {
        var id: UInt64
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant()
        var sleepers: [Sleeper] = []
        var lastId: UInt64 = 0
    }

    private let state = NIOLockedValueBox(State())
    /// The duration of every sleep, in the order they begin to wait; a sleep already due is reported as it
    /// returns. One consumer at a time.
    public let sleeps: AsyncStream<Duration>
    private let reports: AsyncStream<Duration>.Continuation

    public init() {
        (sleeps, reports) = AsyncStream.makeStream(of: Duration.self)
    }

    public var now: Instant { state.withLockedValue { $0.now } }
    public var minimumResolution: Duration { .zero }

    /// How many sleeps wait.
    public var sleeping: Int { state.withLockedValue { $0.sleepers.count } }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        enum Registration {
            case cancelled
            case due(Duration)
            case waiting(Duration)
        }
        let id = state.withLockedValue { state in
            state.lastId += 1
            return state.lastId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // In one step with the cancellation handler's: a sleep cancelled before it waits never waits.
                let registration = state.withLockedValue { state -> Registration in
                    if Task.isCancelled { return .cancelled }
                    let duration = state.now.duration(to: deadline)
                    if deadline <= state.now { return .due(duration) }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return .waiting(duration)
                }
                switch registration {
                case .cancelled:
                    continuation.resume(throwing: CancellationError())
                case .due(let duration):
                    reports.yield(duration)
                    continuation.resume()
                case .waiting(let duration):
                    reports.yield(duration)
                }
            }
        } onCancel: {
            let leaving = state.withLockedValue { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            leaving?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the time on by `duration`, and wakes every sleep due by then, earliest deadline first.
    ///
    /// A sleep that begins after this returns counts from the new time.
    public func advance(by duration: Duration) {
        precondition(duration >= .zero, "a clock does not go back")
        let due = state.withLockedValue { state -> [Sleeper] in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }
}
