import Crypto
import NIOConcurrencyHelpers
import NIOCore

/// The running SHA-256 of the uploads this process is taking, range by range, so that the digest is known when the
/// last byte arrives instead of read back from storage (200 MB read again is most of an upload's time).
///
/// Only a help: a range that arrives at another server of the same database, or after a restart, or an upload
/// pushed out by newer ones, leaves no running digest here, and the file is read back and hashed whole.
final class UploadDigests: Sendable {
    fileprivate struct Running: Sendable {
        /// When the upload began: a running digest follows that upload only, not one begun again after it was
        /// forgotten (on this server or another).
        var began: Int64
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

    /// A running digest with a range added, not kept yet (``keep(_:)``).
    struct Advance: Sendable {
        fileprivate let key: String
        /// The bytes the digest had before the range: where the range starts.
        fileprivate let offset: Int64
        fileprivate let running: Running?
    }

    /// The running digest of the upload with the range at `offset` added: to the one that has every byte before
    /// it, or as the start of one at offset 0. Hashed outside the lock, so that it runs while the range is stored;
    /// nothing changes until the range is kept.
    func advance(_ bytes: ByteBuffer, at offset: Int64, tenant: String, sha256: String) -> Advance {
        let key = Self.key(tenant, sha256)
        var running: Running? =
            offset == 0
            ? Running(began: 0, received: 0, hasher: SHA256(), touched: 0)
            : state.withLockedValue { $0.running[key] }.flatMap { $0.received == offset ? $0 : nil }
        if running != nil {
            bytes.withUnsafeReadableBytes { running!.hasher.update(bufferPointer: $0) }
            running!.received = offset + Int64(bytes.readableBytes)
        }
        return Advance(key: key, offset: offset, running: running)
    }

    /// Keeps `advance` once its range is stored in the upload that `began` then: when the running digest still
    /// stands where the range starts, in that upload (or the range starts the file). A range that follows no
    /// running digest ends the one there was.
    func keep(_ advance: Advance, began: Int64) {
        state.withLockedValue { state in
            state.clock += 1
            guard var running = advance.running,
                advance.offset == 0
                    || (running.began == began && state.running[advance.key].map { $0.received == advance.offset && $0.began == began } == true)
            else {
                state.running[advance.key] = nil
                return
            }
            running.began = began
            running.touched = state.clock
            state.running[advance.key] = running
            if state.running.count > capacity, let oldest = state.running.min(by: { $0.value.touched < $1.value.touched })?.key {
                state.running[oldest] = nil
            }
        }
    }

    /// Adds a range stored at `offset` of the upload that `began` then (``advance(_:at:tenant:sha256:)`` kept at
    /// once).
    func add(_ bytes: ByteBuffer, at offset: Int64, tenant: String, sha256: String, began: Int64 = 0) {
        keep(advance(bytes, at: offset, tenant: tenant, sha256: sha256), began: began)
    }

    /// The digest of the first `size` bytes, in lower-case hexadecimal, when this process followed every one of them;
    /// the upload is forgotten either way.
    func finish(tenant: String, sha256: String, size: Int64) -> String? {
        let running = state.withLockedValue { $0.running.removeValue(forKey: Self.key(tenant, sha256)) }
        guard let running, running.received == size else { return nil }
        return running.hasher.finalize().hexString
    }
}
