import Foundation

/// Moves the wall clock of an `outpost` process with libfaketime (Debian `faketime`; `.ci/run` installs it)
/// and leaves its monotonic clock true: the device's date is wrong, its timers are not.
///
/// libfaketime 0.9.10 shifts the deadline of every absolute monotonic timerfd by the offset even with
/// `FAKETIME_DONT_FAKE_MONOTONIC=1` (wolfcw/libfaketime#378), and Dispatch arms one for each `Task.sleep`:
/// the sleep never ends, or fails at once. A preload of two functions, built here once, hands timerfd calls
/// straight to the kernel, ahead of libfaketime's.
enum FakeTime {
    /// `faketime -f offset`: the prefix of a command run with its clock moved.
    static func command(_ offset: String) throws -> [String] {
        guard let faketime = Child.path(of: "faketime") else {
            throw TestSetupError("faketime is missing: install Debian's faketime (.ci/run does)")
        }
        return [faketime, "-f", offset]
    }

    /// The environment a faked process runs with.
    static func environment() async throws -> [String: String] {
        ["FAKETIME_DONT_FAKE_MONOTONIC": "1", "LD_PRELOAD": try await preload.value]
    }

    /// Built once per test process.
    private static let preload = Task<String, any Error> {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-faketime-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let source = directory.appendingPathComponent("timerfd.c")
        let library = directory.appendingPathComponent("timerfd.so")
        try """
        #define _GNU_SOURCE
        #include <sys/syscall.h>
        #include <sys/timerfd.h>
        #include <unistd.h>
        int timerfd_settime(int fd, int flags, const struct itimerspec *new, struct itimerspec *old) {
            return (int)syscall(SYS_timerfd_settime, fd, flags, new, old);
        }
        int timerfd_gettime(int fd, struct itimerspec *current) {
            return (int)syscall(SYS_timerfd_gettime, fd, current);
        }
        """.write(to: source, atomically: true, encoding: .utf8)
        let compiler = ["cc", "clang"].lazy.compactMap(Child.path(of:)).first ?? "cc"
        let built = try await Child.run(compiler, ["-shared", "-fPIC", "-O2", "-o", library.path, source.path])
        guard built.status == 0 else { throw TestSetupError("could not build the timerfd preload: \(built.output)") }
        return library.path
    }
}
