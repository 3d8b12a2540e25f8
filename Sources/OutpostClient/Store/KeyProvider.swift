import Crypto
import Foundation
import NIOConcurrencyHelpers
import OutpostProtocol

/// Supplies the key that seals a device store's payloads.
///
/// ``KeyFileProvider`` keeps it in a file (the CLI, Linux); on Apple platforms `KeychainKeyProvider` keeps it in the
/// Keychain.
public protocol KeyProvider: Sendable {
    /// The 256-bit key; the same one every time for the same store.
    func key() throws -> SymmetricKey

    /// Deletes the key: whatever it sealed can no longer be opened, wherever a copy of it lies. The next
    /// ``key()`` makes a new one.
    func destroy() throws
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

    public func destroy() throws {
        do {
            try FileManager.default.removeItem(at: url)
        } catch CocoaError.fileNoSuchFile {
        } catch {
            throw ClientError(.keyUnavailable, "cannot delete the key file \(url.path)", underlying: error)
        }
    }
}

/// A fixed key, for tests and for apps that manage keys themselves.
public struct StaticKeyProvider: KeyProvider {
    private let value: SymmetricKey

    public init(_ key: SymmetricKey) {
        self.value = key
    }

    public func key() throws -> SymmetricKey { value }

    /// Nothing to delete: the app keeps the key.
    public func destroy() throws {}
}

/// Seals and opens payloads with AES-GCM, bound to the row they belong to.
struct Sealer: Sendable {
    let key: SymmetricKey
    let nonces = NonceSequence()

    /// `context` (such as the collection and record id) is authenticated, so a sealed value moved to another
    /// row no longer opens. Each seal takes the next of the sealer's ``NonceSequence``.
    func seal(_ plaintext: some DataProtocol, context: String) throws -> Data {
        do {
            guard
                let combined = try AES.GCM.seal(
                    plaintext, using: key, nonce: try nonces.next(), authenticating: Array(context.utf8)
                ).combined
            else { throw ClientError(.cannotDecrypt, "AES-GCM produced no output") }
            return combined
        } catch let error as ClientError {
            throw error
        } catch {
            throw ClientError(.cannotDecrypt, "cannot seal a payload", underlying: error)
        }
    }

    func open(_ sealed: Data, context: String) throws -> Data {
        do {
            return try AES.GCM.open(AES.GCM.SealedBox(combined: sealed), using: key, authenticating: Array(context.utf8))
        } catch {
            throw ClientError(.cannotDecrypt, "a sealed payload does not open with this device's key", underlying: error)
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
            throw ClientError(.cannotDecrypt, "a sealed payload does not decode", underlying: error)
        }
    }

    func open<T: Decodable>(json type: T.Type, from sealed: Data, context: String) throws -> T {
        let data = try open(sealed, context: context)
        do {
            return try JSONDecoder().decode(type, from: data)
        } catch {
            throw ClientError(.cannotDecrypt, "a sealed payload does not decode", underlying: error)
        }
    }
}

/// AES-GCM nonces that never repeat under one key, without a draw from the system's random source each.
///
/// NIST SP 800-38D's deterministic construction (8.2.1): a fixed field and an invocation counter. The field is
/// 64 random bits drawn when the sequence starts, the counter 32 bits from a random start; after 2^32 nonces a
/// new field is drawn. Each sealer (each store opened) draws its own, so two sealing with the same key can
/// share a nonce only if 64 random bits match and their counters overlap.
///
/// Home-made because swift-crypto's random nonce costs two `getrandom` calls on Linux, and with it a delta
/// refresh of a roster missed its target (BENCHMARKS.md).
final class NonceSequence: Sendable {
    private struct State {
        var field: UInt64
        var counter: UInt32
        /// Nonces left before the next field.
        var left: UInt64
    }

    private let state: NIOLockedValueBox<State>

    convenience init() {
        var random = SystemRandomNumberGenerator()
        self.init(field: random.next(), counter: random.next(), left: 1 << 32)
    }

    /// A sequence from a given state: for tests.
    init(field: UInt64, counter: UInt32, left: UInt64) {
        state = NIOLockedValueBox(State(field: field, counter: counter, left: left))
    }

    func next() throws -> AES.GCM.Nonce {
        var bytes = state.withLockedValue { state -> (UInt64, UInt32) in
            if state.left == 0 {
                var random = SystemRandomNumberGenerator()
                state = State(field: random.next(), counter: random.next(), left: 1 << 32)
            }
            state.left -= 1
            defer { state.counter &+= 1 }
            return (state.field.bigEndian, state.counter.bigEndian)
        }
        return try withUnsafeBytes(of: &bytes) { try AES.GCM.Nonce(data: $0) }
    }
}
