import Foundation

/// A settable wall clock for an engine's `now`: tests move it explicitly.
public final class ManualNow: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Date

    /// Starts at 2026-11-21 09:00 UTC unless told otherwise.
    public init(_ start: Date = Date(timeIntervalSince1970: 1_795_251_600)) {
        self.value = start
    }

    public var date: Date { lock.withLock { value } }

    public func advance(seconds: Double) {
        lock.withLock { value = value.addingTimeInterval(seconds) }
    }

    /// The closure to inject. Each read moves a millisecond on, like a real clock between two actions.
    public var closure: @Sendable () -> Date {
        {
            self.lock.withLock {
                self.value = self.value.addingTimeInterval(0.001)
                return self.value
            }
        }
    }
}
