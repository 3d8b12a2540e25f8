/// Work an app does not wait on for longer than a bound: a screen that must answer at once.
package enum Bounded {
    /// Runs `body` for at most `bound` on `clock`; past it, `body`'s task is cancelled and this returns.
    ///
    /// - Returns: true when `body` finished within the bound.
    @discardableResult
    package static func run(
        for bound: Duration, clock: any Clock<Duration>, _ body: @escaping @Sendable () async -> Void
    ) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await body()
                return true
            }
            group.addTask {
                try? await clock.sleep(for: bound)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }
}
