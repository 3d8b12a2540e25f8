import Foundation
import NIOConcurrencyHelpers

/// A settable wall clock for an engine's `now`: tests move it explicitly.
public final class ManualNow: Sendable {
    private let value: NIOLockedValueBox<Date>

    /// Starts at 2026-11-21 09:00 UTC unless told otherwise.
    public init(_ start: Date = Date(timeIntervalSince1970: 1_795_251_600)) {
        self.value = NIOLockedValueBox(start)
    }

    public var date: Date { value.withLockedValue { $0 } }

    public func advance(seconds: Double) {
        value.withLockedValue { $0 = $0.addingTimeInterval(seconds) }
    }

    /// The closure to inject. Each read moves a millisecond on, like a real clock between two actions.
    public var closure: @Sendable () -> Date {
        {
            self.value.withLockedValue {
                $0 = $0.addingTimeInterval(0.001)
                return $0
            }
        }
    }
}
