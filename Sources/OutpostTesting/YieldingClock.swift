import NIOConcurrencyHelpers

/// A clock whose every sleep returns at once, after one yield to other tasks; its time jumps to each deadline.
///
/// For simulations that retry through a clock and should not wait: the sleep is an await point like any other,
/// and it throws `CancellationError` when its task is cancelled before or during it, as a real sleep does. (swift-clocks' `ImmediateClock`
/// starts twenty background-priority tasks per sleep, which a busy machine can leave waiting behind other work.)
public final class YieldingClock: Clock, Sendable {
    public typealias Instant = ManualClock.Instant

    private let time = NIOLockedValueBox(Instant())

    public init() {}

    public var now: Instant { time.withLockedValue { $0 } }
    public var minimumResolution: Duration { .zero }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        try Task.checkCancellation()
        time.withLockedValue { $0 = max($0, deadline) }
        await Task.yield()
        try Task.checkCancellation()
    }
}
