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

    /// Waits for `task` to end, for at most `bound` on `clock`, or until the waiting task is cancelled; `task`
    /// itself goes on. (Awaiting a task's value does not end when the waiter is cancelled, so ``run(for:clock:_:)``
    /// cannot bound it.)
    ///
    /// - Returns: true when `task` ended within the bound.
    @discardableResult
    package static func wait<T: Sendable>(for task: Task<T, Never>, upTo bound: Duration, clock: any Clock<Duration>) async -> Bool {
        let (ended, continuation) = AsyncStream.makeStream(of: Bool.self)
        let watcher = Task {
            _ = await task.value
            continuation.yield(true)
        }
        let timer = Task {
            try? await clock.sleep(for: bound)
            continuation.yield(false)
        }
        var result = false
        for await value in ended {
            result = value
            break
        }
        watcher.cancel()
        timer.cancel()
        continuation.finish()
        return result
    }
}
