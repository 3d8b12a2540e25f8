import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback port whose connections the kernel completes and nobody ever reads or answers: a server behind a
/// captive portal, or one bar in a basement, for tests and benchmarks of what a device does when nothing answers.
public final class SilentPort: @unchecked Sendable {
    public let port: Int
    private let socket: Int32

    /// Listens on a free loopback port, with room for `backlog` connections the kernel completes.
    public init(backlog: Int32 = 128) throws {
        let fd = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0, listen(fd, backlog) == 0 else {
            _ = Foundation.close(fd)
            throw CocoaError(.fileWriteUnknown)
        }
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        socket = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { _ = Foundation.close(socket) }
}
