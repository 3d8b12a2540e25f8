import Crypto
import NIOCore
import Testing

@testable import OutpostServer

/// The running digests of uploads: known at the last byte when every range came through this process, and
/// otherwise not, so that the file is read back and hashed whole.
@Suite("Upload digests")
struct UploadDigestsTests {
    static let bytes = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
    static let digest = Array(SHA256.hash(data: bytes)).hexString

    @Test("ranges in order give the file's digest; a gap, another tenant or a short file give none")
    func runningDigest() {
        let digests = UploadDigests()
        digests.add(ByteBuffer(bytes: Self.bytes[0..<400]), at: 0, tenant: "acme", sha256: "f")
        digests.add(ByteBuffer(bytes: Self.bytes[400..<1000]), at: 400, tenant: "acme", sha256: "f")
        #expect(digests.finish(tenant: "acme", sha256: "f", size: 1000) == Self.digest)
        // Finished, it is forgotten.
        #expect(digests.finish(tenant: "acme", sha256: "f", size: 1000) == nil)

        digests.add(ByteBuffer(bytes: Self.bytes[0..<400]), at: 0, tenant: "acme", sha256: "g")
        digests.add(ByteBuffer(bytes: Self.bytes[500..<1000]), at: 500, tenant: "acme", sha256: "g")
        #expect(digests.finish(tenant: "acme", sha256: "g", size: 1000) == nil)

        digests.add(ByteBuffer(bytes: Self.bytes[0..<400]), at: 0, tenant: "acme", sha256: "h")
        digests.add(ByteBuffer(bytes: Self.bytes[400..<1000]), at: 400, tenant: "other", sha256: "h")
        #expect(digests.finish(tenant: "acme", sha256: "h", size: 1000) == nil)
        #expect(digests.finish(tenant: "other", sha256: "h", size: 1000) == nil)
    }

    @Test("past its capacity it forgets the upload touched longest ago")
    func capacity() {
        let digests = UploadDigests(capacity: 2)
        for name in ["a", "b", "c"] {
            digests.add(ByteBuffer(bytes: Self.bytes), at: 0, tenant: "acme", sha256: name)
        }
        #expect(digests.finish(tenant: "acme", sha256: "a", size: 1000) == nil)
        #expect(digests.finish(tenant: "acme", sha256: "b", size: 1000) == Self.digest)
        #expect(digests.finish(tenant: "acme", sha256: "c", size: 1000) == Self.digest)
    }

    @Test("a range hashed while it is stored counts only once kept, and only where the digest still stands")
    func advanceThenKeep() {
        let digests = UploadDigests()
        digests.add(ByteBuffer(bytes: Self.bytes[0..<400]), at: 0, tenant: "acme", sha256: "f")
        // A range hashed but not kept (its storing was refused) changes nothing;
        _ = digests.advance(ByteBuffer(bytes: Self.bytes[400..<1000]), at: 400, tenant: "acme", sha256: "f")
        let stored = digests.advance(ByteBuffer(bytes: Self.bytes[400..<1000]), at: 400, tenant: "acme", sha256: "f")
        digests.keep(stored, began: 0)
        #expect(digests.finish(tenant: "acme", sha256: "f", size: 1000) == Self.digest)

        // two ranges hashed at one offset at once: the first kept moves the digest on, the second is then out of
        // place and ends it.
        digests.add(ByteBuffer(bytes: Self.bytes[0..<400]), at: 0, tenant: "acme", sha256: "g")
        let first = digests.advance(ByteBuffer(bytes: Self.bytes[400..<1000]), at: 400, tenant: "acme", sha256: "g")
        let second = digests.advance(ByteBuffer(bytes: Self.bytes[400..<1000]), at: 400, tenant: "acme", sha256: "g")
        digests.keep(first, began: 0)
        digests.keep(second, began: 0)
        #expect(digests.finish(tenant: "acme", sha256: "g", size: 1000) == nil)
    }

    @Test("a running digest follows one upload: the same digest begun again elsewhere is not taken for it")
    func beganAgain() {
        let digests = UploadDigests()
        // This server took the first 400 bytes of the upload begun at 1;
        digests.add(ByteBuffer(bytes: Self.bytes[0..<400]), at: 0, tenant: "acme", sha256: "f", began: 1)
        // it was forgotten and begun again at 2 on another server, which took its first 400 bytes (this server
        // never saw them), and the rest comes here:
        let rest = digests.advance(ByteBuffer(bytes: Self.bytes[400..<1000]), at: 400, tenant: "acme", sha256: "f")
        digests.keep(rest, began: 2)
        // the bytes are read back and hashed whole, not taken from the old upload's digest.
        #expect(digests.finish(tenant: "acme", sha256: "f", size: 1000) == nil)
    }
}
