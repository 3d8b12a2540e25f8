import Foundation
import OutpostTesting
import Testing

/// The reaper that ends the long-running children a test process leaves behind.
@Suite("Orphan reaper")
struct OrphanReaperTests {
    @Test("kills a registered process group when its pipe closes, with what the group's leader started")
    func killsRegistered() async throws {
        let reaper = try OrphanReaper()
        // The leader starts a grandchild in its group, which a kill of the leader alone would leave running.
        let child = try await RunningChild("/bin/sh", ["-c", "sleep 300 & echo $!; wait"])
        let grandchild = try await pid_t(child.waitFor("([0-9]+)\n"))!
        reaper.watch(child.processIdentifier)

        #expect(try await reaper.close() == 0)
        #expect(try await Task { await child.wait() }.value(within: testWaitLimit, "the registered child's end") == 128 + SIGKILL)
        try await bounded("the grandchild's end") {
            while !Self.hasEnded(grandchild) { try await Task.sleep(for: .milliseconds(20)) }
        }
    }

    @Test("leaves a group alone once it is withdrawn")
    func sparesWithdrawn() async throws {
        let reaper = try OrphanReaper()
        let child = try await RunningChild("/bin/sleep", ["300"])
        reaper.watch(child.processIdentifier)
        reaper.forget(child.processIdentifier)

        #expect(try await reaper.close() == 0)
        #expect(child.isRunning)
        #expect(await child.stop(SIGTERM) == 128 + SIGTERM)
    }

    @Test("a child that ends takes what it left running in its group with it")
    func endsItsGroup() async throws {
        let child = try await RunningChild("/bin/sh", ["-c", "sleep 300 > /dev/null 2>&1 & echo $!"])
        let grandchild = try await pid_t(child.waitFor("([0-9]+)\n"))!
        #expect(try await Task { await child.wait() }.value(within: testWaitLimit, "the child's end") == 0)
        try await bounded("the grandchild's end") {
            while !Self.hasEnded(grandchild) { try await Task.sleep(for: .milliseconds(20)) }
        }
    }

    /// Whether `pid` is gone or a zombie: killed, but not yet reaped by the process that inherited it.
    static func hasEnded(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let name = stat.lastIndex(of: ")"), let state = stat[name...].dropFirst(2).first
        else { return true }
        return state == "Z" || state == "X"
    }
}
