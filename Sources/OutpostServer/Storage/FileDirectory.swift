import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The bytes of uploaded files kept as files in a directory, one per tenant and digest:
/// `<root>/<tenant>/<first two digits>/<sha256>`, the tenant's folder named by the digest of its name. The
/// engine keeps each upload's state (``FileUpload``) in its database and decides, in the transaction that counts a
/// range received, whether it goes on the file; this type only moves bytes.
///
/// A range is written and its write to disk started, not waited for; the file is flushed whole before the engine
/// marks it complete. A range counted but lost with the machine's power is caught by the digest: after a restart
/// no running digest is left, the file is read back from disk to be checked, and bytes that do not have the digest
/// are discarded and uploaded again. A complete file never changes. The directory is the operator's: on PostgreSQL
/// with several servers, every server names the same one (a shared volume).
package struct FileDirectory: Sendable {
    /// The most bytes one read returns: a download is answered this much at a time.
    package static let readBytes = 1024 * 1024

    package let root: URL

    package init(root: URL) {
        self.root = root
    }

    /// Creates the directory when it is missing, readable by this user alone.
    ///
    /// - Throws: ``StorageError`` `configuration` when it cannot be created or written.
    package func prepare() throws {
        do {
            try FileManager.default.createDirectory(
                at: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw StorageError(.configuration, "cannot create the file directory \(root.path)", underlying: error)
        }
        guard access(root.path, W_OK | X_OK) == 0 else {
            throw StorageError(.configuration, "cannot write in the file directory \(root.path)")
        }
    }

    /// Where the file `sha256` of `tenant` is kept.
    func path(tenant: String, sha256: String) -> String {
        let tenantKey = SHA256.hash(data: Data(tenant.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
        return root.appendingPathComponent(tenantKey).appendingPathComponent(String(sha256.prefix(2)))
            .appendingPathComponent(sha256).path
    }

    /// Writes `bytes` at `offset` of the file and starts writing them to disk; at offset 0 the file starts anew,
    /// whatever an upload that was discarded left. Blocking: call it off Swift's threads
    /// (``appending(_:tenant:sha256:at:)``) or on a database's own queue.
    package func append(_ bytes: ByteBuffer, tenant: String, sha256: String, at offset: Int64) throws {
        let path = path(tenant: tenant, sha256: sha256)
        let folder = (path as NSString).deletingLastPathComponent
        if offset == 0 {
            try FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        let flags = O_WRONLY | O_CLOEXEC | (offset == 0 ? O_CREAT | O_TRUNC : 0)
        let descriptor = open(path, flags, 0o600)
        guard descriptor >= 0 else {
            if errno == ENOENT { throw Self.missingBytes }
            throw Self.failure("open", path: path)
        }
        defer { close(descriptor) }
        // The bytes counted before the range must be on the file: a file removed, or cut short by a crash, makes
        // the upload start again instead of holding a hole.
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw Self.failure("open", path: path) }
        guard Int64(status.st_size) >= offset else { throw Self.missingBytes }
        try bytes.withUnsafeReadableBytes { raw in
            guard let start = raw.baseAddress else { return }
            var written = 0
            // The whole blocks go straight to the disk, the partial ones at either end through the page cache.
            if let direct = Self.directWrites, raw.count >= 2 * direct.alignment {
                let head = Int((Int64(direct.alignment) - offset % Int64(direct.alignment)) % Int64(direct.alignment))
                try Self.write(descriptor, start, count: head, at: offset, path: path)
                written = head
                let blocks = (raw.count - head) / direct.alignment * direct.alignment
                written += direct.write(path: path, start + head, count: blocks, at: offset + Int64(head))
            }
            try Self.write(descriptor, start + written, count: raw.count - written, at: offset + Int64(written), path: path)
        }
    }

    /// Writes `count` bytes at `offset` through the page cache.
    private static func write(
        _ descriptor: Int32, _ bytes: UnsafeRawPointer, count: Int, at offset: Int64, path: String
    ) throws {
        var written = 0
        while written < count {
            let done = pwrite(descriptor, bytes + written, count - written, off_t(offset) + off_t(written))
            if done < 0, errno == EINTR { continue }
            guard done > 0 else { throw failure("write", path: path) }
            written += done
        }
    }

    /// Flushes the file and its name to disk: called before the upload is marked complete.
    package func flush(tenant: String, sha256: String) throws {
        let path = path(tenant: tenant, sha256: sha256)
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            // A file of no byte was never written: there is nothing to flush.
            if errno == ENOENT { return }
            throw Self.failure("open", path: path)
        }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw Self.failure("flush", path: path) }
        Self.flushFolder((path as NSString).deletingLastPathComponent)
    }

    /// ``flush(tenant:sha256:)`` on NIO's thread pool.
    package func flushing(tenant: String, sha256: String) async throws {
        try await NIOThreadPool.singleton.runIfActive { try flush(tenant: tenant, sha256: sha256) }
    }

    /// ``append(_:tenant:sha256:at:)`` on NIO's thread pool.
    package func appending(_ bytes: ByteBuffer, tenant: String, sha256: String, at offset: Int64) async throws {
        try await NIOThreadPool.singleton.runIfActive { try append(bytes, tenant: tenant, sha256: sha256, at: offset) }
    }

    /// Up to ``readBytes`` of the file from `offset`; nil when the file is missing or holds no byte there. The
    /// caller reads no further than the bytes counted received.
    package func read(tenant: String, sha256: String, at offset: Int64) async throws -> FileChunk? {
        let path = path(tenant: tenant, sha256: sha256)
        let count = Self.readBytes
        return try await NIOThreadPool.singleton.runIfActive {
            let descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else {
                if errno == ENOENT { return nil }
                throw Self.failure("open", path: path)
            }
            defer { close(descriptor) }
            var buffer = ByteBufferAllocator().buffer(capacity: count)
            let read = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
                var read = 0
                while read < count {
                    let got = pread(descriptor, raw.baseAddress! + read, count - read, off_t(offset) + off_t(read))
                    if got < 0, errno == EINTR { continue }
                    guard got >= 0 else { throw Self.failure("read", path: path) }
                    if got == 0 { break }
                    read += got
                }
                return read
            }
            return read == 0 ? nil : FileChunk(start: offset, bytes: buffer)
        }
    }

    /// Removes the file, when there is one: called in the transaction that forgets its upload, so that an upload
    /// of the same digest begun meanwhile waits for it and writes a file of its own.
    package func remove(tenant: String, sha256: String) {
        _ = unlink(path(tenant: tenant, sha256: sha256))
    }

    /// A range whose file does not hold the bytes counted before it: the engine forgets the upload.
    package static let missingBytes = StorageError(.corrupt, "the file directory does not hold the bytes of an upload")

    /// Whether `error` is ``missingBytes``.
    package static func isMissingBytes(_ error: any Error) -> Bool {
        (error as? StorageError).map { $0.code == missingBytes.code && $0.message == missingBytes.message } ?? false
    }

    /// Direct writes where the platform has them (Linux), else nil.
    static let directWrites: DirectWrites? = DirectWrites()

    private static func flushFolder(_ folder: String) {
        let descriptor = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = fsync(descriptor)
        close(descriptor)
    }

    /// The failure of a file operation, named without the bytes or the digest's owner.
    private static func failure(_ operation: String, path: String) -> StorageError {
        let reason = String(cString: strerror(errno))
        return StorageError(.unavailable, "cannot \(operation) a file in the file directory: \(reason)")
    }
}

/// Writes that bypass the page cache (`O_DIRECT`), from memory aligned to the disk's blocks: a file's bytes are
/// copied once, into that memory, instead of into the page cache, which cost as much CPU as the rest of an upload
/// (`bench attachments`). Where the file system refuses them, the bytes go through the page cache.
final class DirectWrites: @unchecked Sendable {
    /// The alignment of offsets, lengths and memory: a page, a multiple of every disk's logical block.
    let alignment = 4096
    /// The memory one write takes; longer runs go in several.
    let bufferBytes = 4 * 1024 * 1024
    private let flag: Int32
    // Guarded by `lock`: aligned buffers kept for the next writes.
    private let lock = NIOLock()
    private var spare: [UnsafeMutableRawPointer] = []

    init?() {
        #if os(Linux) && arch(x86_64)
            flag = 0o40000
        #elseif os(Linux) && arch(arm64)
            flag = 0o200000
        #else
            return nil
        #endif
    }

    /// Writes whole blocks of `bytes` at `offset` (a multiple of ``alignment``), as many as go; how many bytes
    /// went. Fewer than `count` when the file system takes no direct write: the caller writes the rest through the
    /// page cache.
    func write(path: String, _ bytes: UnsafeRawPointer, count: Int, at offset: Int64) -> Int {
        guard count > 0 else { return 0 }
        let descriptor = open(path, O_WRONLY | O_CLOEXEC | flag)
        guard descriptor >= 0 else { return 0 }
        defer { close(descriptor) }
        guard let buffer = take() else { return 0 }
        defer { give(buffer) }
        var written = 0
        while written < count {
            let length = min(bufferBytes, count - written)
            buffer.copyMemory(from: bytes + written, byteCount: length)
            let done = pwrite(descriptor, buffer, length, off_t(offset) + off_t(written))
            if done < 0, errno == EINTR { continue }
            // A short or refused direct write leaves the rest to the page cache, from a whole block.
            guard done == length else { return done > 0 ? written + done / alignment * alignment : written }
            written += length
        }
        return written
    }

    /// An aligned buffer, or nil when none can be had (the write goes through the page cache).
    private func take() -> UnsafeMutableRawPointer? {
        if let kept = lock.withLock({ spare.popLast() }) { return kept }
        var memory: UnsafeMutableRawPointer?
        guard posix_memalign(&memory, alignment, bufferBytes) == 0 else { return nil }
        return memory
    }

    private func give(_ buffer: UnsafeMutableRawPointer) {
        let kept = lock.withLock { () -> Bool in
            guard spare.count < 4 else { return false }
            spare.append(buffer)
            return true
        }
        if !kept { free(buffer) }
    }
}
