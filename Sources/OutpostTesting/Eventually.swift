import Foundation
import Observation

/// Waits until `condition`, read from observable models, holds: it is read again after every change Observation
/// reports, as SwiftUI would redraw. Bounded, so that a screen that never updates fails with `what`.
@MainActor
public func eventually(_ what: String, _ condition: @escaping @MainActor () -> Bool) async throws {
    try await bounded(what) { @MainActor in
        while !condition() {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resume = ResumeOnce(continuation)
                let holds = withObservationTracking {
                    condition()
                } onChange: {
                    resume()
                }
                if holds { resume() }
            }
        }
    }
}

/// Resumes a continuation the first time it is called.
final class ResumeOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Void, Never>?

    init(_ continuation: CheckedContinuation<Void, Never>) {
        self.continuation = continuation
    }

    func callAsFunction() {
        lock.lock()
        let continuation = self.continuation
        self.continuation = nil
        lock.unlock()
        continuation?.resume()
    }
}
