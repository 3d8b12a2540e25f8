/// A clock that reports each sleep before it starts, so that a test advances a test clock only once the
/// code under test is known to be waiting.
public final class ObservedClock<Base: Clock>: Clock, @unchecked Sendable where Base.Duration == Duration {
    public typealias Instant = Base.Instant

    public let base: Base
    /// The duration of every sleep, in the order they begin.
    public let sleeps: AsyncStream<Duration>
    private let continuation: AsyncStream<Duration>.Continuation

    public init(_ base: Base) {
        self.base = base
        (self.sleeps, self.continuation) = AsyncStream.makeStream(of: Duration.self)
    }

    public var now: Instant { base.now }
    public var minimumResolution: Duration { base.minimumResolution }

    public func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        continuation.yield(now.duration(to: deadline))
        try await base.sleep(until: deadline, tolerance: tolerance)
    }
}
