import Crypto
import NIOConcurrencyHelpers
import NIOCore

/// The running SHA-256 of the uploads this process is taking, range by range, so that the digest is known when the
/// last byte arrives instead of read back from storage (200 MB read again is most of an upload's time).
///
/// Only a help: a range that arrives at another server of the same database, or after a restart, or an upload
/// pushed out by newer ones, leaves no running digest here, and the file is read back and hashed whole.
final class UploadDigests: Sendable {
    private struct Running {
        var received: Int64
        var hasher: SHA256
        var touched: UInt64
    }

    private struct State {
        var running: [String: Running] = [:]
        var clock: UInt64 = 0
    }

    private let state = NIOLockedValueBox(State())
    /// The most uploads followed at once; the one touched longest ago is forgotten first.
    let capacity: Int

    init(capacity: Int = 256) {
        self.capacity = capacity
    }

    private static func key(_ tenant: String, _ sha256: String) -> String { tenant + "\u{0}" + sha256 }

    /// Adds a range stored at `offset`: to the running digest that has every byte before it, or as the start of
    /// one at offset 0. A range that follows no running digest ends the one there was.
    func add(_ bytes: ByteBuffer, at offset: Int64, tenant: String, sha256: String) {
        let key = Self.key(tenant, sha256)
        state.withLockedValue { state in
            state.clock += 1
            var running: Running
            if offset == 0 {
                running = Running(received: 0, hasher: SHA256(), touched: state.clock)
            } else if let known = state.running[key], known.received == offset {
                running = known
            } else {
                state.running[key] = nil
                return
            }
            bytes.withUnsafeReadableBytes { running.hasher.update(bufferPointer: $0) }
            running.received = offset + Int64(bytes.readableBytes)
            running.touched = state.clock
            state.running[key] = running
            if state.running.count > capacity, let oldest = state.running.min(by: { $0.value.touched < $1.value.touched })?.key {
                state.running[oldest] = nil
            }
        }
    }

    /// The digest of the first `size` bytes, in lower-case hexadecimal, when this process followed every one of them;
    /// the upload is forgotten either way.
    func finish(tenant: String, sha256: String, size: Int64) -> String? {
        let running = state.withLockedValue { $0.running.removeValue(forKey: Self.key(tenant, sha256)) }
        guard let running, running.received == size else { return nil }
        return running.hasher.finalize().hexString
    }
}
