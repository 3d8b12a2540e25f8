import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A pipe to a child process whose ends are close-on-exec from the start.
///
/// Foundation's `Pipe` is not: a process another test spawns at the same moment (the private PostgreSQL
/// server lives for the whole run) inherits the write end of a command's output pipe, so the reader never
/// sees its end and the test waits for ever. The child gets its own copy through its standard streams, which
/// the spawn duplicates without the flag; ``closeChildEnd(of:)`` closes this process's copy after `run()`.
struct ChildPipe {
    let reading: FileHandle
    let writing: FileHandle

    /// glibc's `pipe2`, which the Glibc module leaves out (it is a GNU extension): the flag is set as the pipe is
    /// made, with no moment in which a spawn elsewhere could inherit it.
    private typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
    private static let pipe2: Pipe2 = unsafeBitCast(dlsym(nil, "pipe2")!, to: Pipe2.self)

    init() throws {
        var ends: [Int32] = [0, 0]
        guard Self.pipe2(&ends, O_CLOEXEC) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EMFILE) }
        reading = FileHandle(fileDescriptor: ends[0], closeOnDealloc: true)
        writing = FileHandle(fileDescriptor: ends[1], closeOnDealloc: true)
    }

    /// Closes the end the child holds a copy of, once it runs: its writing end for an output, its reading end
    /// for an input.
    func closeChildEnd(input: Bool = false) {
        try? (input ? reading : writing).close()
    }
}
