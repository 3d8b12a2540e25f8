import Crypto
import Foundation
import OutpostProtocol

/// Supplies the key that seals a device store's payloads.
///
/// On Linux the default is ``KeyFileProvider``; on Apple platforms the Keychain is the intended provider.
public protocol KeyProvider: Sendable {
    /// The 256-bit key; the same one every time for the same store.
    func key() throws -> SymmetricKey
}

/// Keeps the key in a file of its own, mode 0600, beside the store; creates it on first use.
public struct KeyFileProvider: KeyProvider {
    public var url: URL

    public init(url: URL) {
        self.url = url
    }

    public func key() throws -> SymmetricKey {
        if let data = FileManager.default.contents(atPath: url.path) {
            guard data.count == 32 else {
                throw ClientError(.keyUnavailable, "the key file \(url.path) is not a 256-bit key")
            }
            return SymmetricKey(data: data)
        }
        let key = SymmetricKey(size: .bits256)
        let data = key.withUnsafeBytes { Data($0) }
        // O_EXCL: two processes opening a new store at once must not end up with two keys.
        let descriptor = open(url.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else {
            if errno == EEXIST { return try self.key() }
            throw ClientError(.keyUnavailable, "cannot create the key file \(url.path)")
        }
        defer { close(descriptor) }
        let written = data.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == data.count, fsync(descriptor) == 0 else {
            throw ClientError(.keyUnavailable, "cannot write the key file \(url.path)")
        }
        return key
    }
}

/// A fixed key, for tests and for apps that manage keys themselves.
public struct StaticKeyProvider: KeyProvider {
    private let value: SymmetricKey

    public init(_ key: SymmetricKey) {
        self.value = key
    }

    public func key() throws -> SymmetricKey { value }
}

/// Seals and opens payloads with AES-GCM, bound to the row they belong to.
struct Sealer: Sendable {
    let key: SymmetricKey

    /// `context` (such as the collection and record id) is authenticated, so a sealed value moved to another
    /// row no longer opens.
    ///
    /// - Parameter nonce: one of ``nonces(_:)``; nil draws a fresh random nonce.
    func seal(_ plaintext: some DataProtocol, context: String, nonce: AES.GCM.Nonce? = nil) throws -> Data {
        do {
            guard let combined = try AES.GCM.seal(
                plaintext, using: key, nonce: nonce ?? AES.GCM.Nonce(), authenticating: Array(context.utf8)
            ).combined
            else { throw ClientError(.cannotDecrypt, "AES-GCM produced no output") }
            return combined
        } catch let error as ClientError {
            throw error
        } catch {
            throw ClientError(.cannotDecrypt, "cannot seal a payload")
        }
    }

    /// `count` random 96-bit nonces, for a page of seals, drawn from the system's random source at once: a
    /// nonce of its own costs two `getrandom` calls on Linux (swift-crypto draws 8 bytes at a time), a tenth of
    /// a reference row's sealing.
    /// Where the system's source cannot be read at once (a sandbox without `/dev/urandom`), each nonce is
    /// drawn on its own.
    func nonces(_ count: Int) throws -> [AES.GCM.Nonce] {
        let size = 12
        var bytes = [UInt8](repeating: 0, count: count * size)
        guard bytes.withUnsafeMutableBytes({ SystemRandom.fill($0) }) else {
            return (0..<count).map { _ in AES.GCM.Nonce() }
        }
        return try (0..<count).map { try AES.GCM.Nonce(data: bytes[($0 * size)..<(($0 + 1) * size)]) }
    }

    func open(_ sealed: Data, context: String) throws -> Data {
        do {
            return try AES.GCM.open(AES.GCM.SealedBox(combined: sealed), using: key, authenticating: Data(context.utf8))
        } catch {
            throw ClientError(.cannotDecrypt, "a sealed payload does not open with this device's key")
        }
    }

    func seal<T: Encodable>(json value: T, context: String) throws -> Data {
        try seal(try JSONEncoder().encode(value), context: context)
    }

    /// Field maps, the payload of nearly every row, skip Codable (see `JSONValue.init(parsing:)`).
    func seal(json fields: [String: JSONValue], context: String) throws -> Data {
        let bytes: [UInt8]
        do {
            bytes = try fields.jsonBytes()
        } catch {
            throw ClientError.unstorableField(error)
        }
        return try seal(Data(bytes), context: context)
    }

    func open(json type: [String: JSONValue].Type, from sealed: Data, context: String) throws -> [String: JSONValue] {
        let data = try open(sealed, context: context)
        do {
            return try [String: JSONValue](parsingObject: data)
        } catch {
            throw ClientError(.cannotDecrypt, "a sealed payload does not decode")
        }
    }

    func open<T: Decodable>(json type: T.Type, from sealed: Data, context: String) throws -> T {
        let data = try open(sealed, context: context)
        do {
            return try JSONDecoder().decode(type, from: data)
        } catch {
            throw ClientError(.cannotDecrypt, "a sealed payload does not decode")
        }
    }
}

/// Random bytes from the operating system's cryptographic source, many at once.
enum SystemRandom {
    /// Fills `buffer`; false when the source cannot be read.
    static func fill(_ buffer: UnsafeMutableRawBufferPointer) -> Bool {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return true }
        #if canImport(Darwin)
        arc4random_buf(base, buffer.count)
        return true
        #else
        // The kernel's source as a file: one read, where getrandom(2) is not declared to Swift on every glibc.
        var descriptor: Int32
        repeat {
            descriptor = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        } while descriptor < 0 && errno == EINTR
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var filled = 0
        while filled < buffer.count {
            let count = read(descriptor, base + filled, buffer.count - filled)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            filled += count
        }
        return true
        #endif
    }
}
