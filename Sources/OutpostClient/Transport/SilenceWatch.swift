import Foundation
import NIOConcurrencyHelpers

/// Ends calls whose answer falls silent.
///
/// AsyncHTTPClient's deadline bounds only the wait for an answer's head; nothing bounds its body after that, so a
/// server or network that stalls halfway through would hold a sync, or a roster download, for ever. Each call
/// reports every piece it hears. One task per watch, shared by all its calls, wakes every `limit` while any call
/// runs and ends a call that has heard nothing since the wake before: it is cancelled, and fails with a network
/// error, which the engine retries. A call is ended between one and two `limit`s after the last piece it heard.
///
/// A call waiting for its consumer to take what it read (a stream of pages whose consumer is still storing one) rests:
/// it reads nothing then, on purpose, and the watch leaves it be.
///
/// A sleeping task per call would be simpler, but on Linux a cancelled `Task.sleep` keeps its timer until the time
/// it was to wake: 50 devices pushing in one process left a thousand of them behind, and the throughput 3 % lower.
final class SilenceWatch: @unchecked Sendable {
    private struct Call {
        var heard = true
        var resting = false
        let end: @Sendable () -> Void
    }

    /// What a call tells its watch: that it heard a piece of the answer (call it as a function), and when it rests.
    struct Hearing: Sendable {
        fileprivate let watch: SilenceWatch
        fileprivate let id: UInt64

        func callAsFunction() {
            watch.lock.withLock { watch.calls[id]?.heard = true }
        }

        /// Runs `body`, a wait that is not the server's silence; the watch's next look after it counts from its end.
        func resting<T>(_ body: () async throws -> T) async rethrows -> T {
            watch.lock.withLock { watch.calls[id]?.resting = true }
            defer {
                watch.lock.withLock {
                    watch.calls[id]?.resting = false
                    watch.calls[id]?.heard = true
                }
            }
            return try await body()
        }
    }

    private let limit: Duration
    private let sleep: @Sendable (Duration) async throws -> Void
    private let lock = NSLock()
    private var calls: [UInt64: Call] = [:]
    private var nextId: UInt64 = 0
    private var watching = false

    init(limit: Duration, clock: some Clock<Duration>) {
        self.limit = limit
        self.sleep = { try await clock.sleep(for: $0) }
    }

    /// Runs `operation` in a task of its own, which the watch cancels when it falls silent; the caller's
    /// cancellation reaches it too.
    func run<T: Sendable>(
        _ operation: @escaping @Sendable (_ heard: Hearing) async throws -> T
    ) async throws -> T {
        let silent = NIOLockedValueBox(false)
        let running = NIOLockedValueBox<Task<T, any Error>?>(nil)
        // The call is counted before its operation starts, so that a rest at its very start is seen; and in one
        // step with the check, so that a watch ending as it finds no call is never counted on.
        let (id, start) = lock.withLock {
            nextId += 1
            calls[nextId] = Call(end: {
                silent.withLockedValue { $0 = true }
                running.withLockedValue { $0 }?.cancel()
            })
            defer { watching = true }
            return (nextId, !watching)
        }
        let heard = Hearing(watch: self, id: id)
        let task = Task { try await operation(heard) }
        running.withLockedValue { $0 = task }
        if silent.withLockedValue({ $0 }) { task.cancel() }
        // Detached: the loop outlives the call that started it, and must not keep its task-locals.
        if start { Task.detached { await self.watch() } }
        defer { lock.withLock { _ = calls.removeValue(forKey: id) } }
        let result = await withTaskCancellationHandler {
            await task.result
        } onCancel: {
            task.cancel()
        }
        // Checked first: a call cut short by the watch fails however its operation ended.
        if silent.withLockedValue({ $0 }) {
            throw TransportError(
                kind: .network, message: "the server fell silent for \(limit.components.seconds) s in the middle of its answer")
        }
        return try result.get()
    }

    /// Wakes every `limit` while any call runs, and ends those that heard nothing since the last wake.
    private func watch() async {
        while true {
            try? await sleep(limit)
            let (silent, done) = lock.withLock { () -> ([@Sendable () -> Void], Bool) in
                var silent: [@Sendable () -> Void] = []
                for (id, call) in calls {
                    if call.resting {
                        continue
                    } else if call.heard {
                        calls[id]?.heard = false
                    } else {
                        silent.append(call.end)
                        calls.removeValue(forKey: id)
                    }
                }
                if calls.isEmpty { watching = false }
                return (silent, calls.isEmpty)
            }
            for end in silent { end() }
            if done { return }
        }
    }
}
