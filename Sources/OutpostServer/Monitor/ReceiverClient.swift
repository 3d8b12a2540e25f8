import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// How the server reaches an organizer's receiver (a notification's or a connector's URL): the host's name is
/// resolved first, every address it resolves to is checked against the rules an address written in the URL
/// meets, and the request goes to the checked address, so that a name cannot lead the server into its own
/// network, nor one resolution pass the check and another be connected to.
enum ReceiverClient {
    /// Sends `request` to its receiver, after checking where its host's name leads.
    ///
    /// - Throws: ``InternalAddress`` when the name resolves to a private, link-local or loopback address (nothing
    ///   is connected to then); AsyncHTTPClient's errors otherwise.
    static func execute(_ request: HTTPClientRequest, timeout: TimeAmount) async throws -> HTTPClientResponse {
        try await client(for: request.url).execute(request, timeout: timeout)
    }

    /// The client that reaches `url`'s host at the address checked for it: the shared one for an address written
    /// in the URL, or `http` to this machine (which only a server started with `--allow-loopback-receivers`
    /// takes), else one that connects the name to the address it resolved to.
    static func client(for url: String) async throws -> HTTPClient {
        guard let parsed = URL(string: url), parsed.scheme == "https", let host = parsed.host, !isAddress(host) else {
            return NotificationClient.shared
        }
        let address = try checked(try await resolve(host))
        return clients.client(host: host, address: address)
    }

    /// The address to connect to, of those `addresses` a name resolved to: the first, once none is internal.
    ///
    /// - Throws: ``InternalAddress`` when any is, since which one a connection would use is not the server's
    ///   choice alone; ``Unresolved`` when there is none.
    static func checked(_ addresses: [String]) throws -> String {
        guard let first = addresses.first else { throw Unresolved() }
        if addresses.contains(where: isInternal) { throw InternalAddress() }
        return first
    }

    /// Whether `address` (IPv4 or IPv6, as `inet_ntop` writes it) is one the server must not be led to: private,
    /// shared (carrier-grade NAT), link-local, loopback, unspecified or multicast; an IPv6 address that carries an
    /// IPv4 one is judged by it.
    static func isInternal(_ address: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 { return NotificationURL.isInternal(address) }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, address, &v6) == 1 else { return true }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            return isInternal(bytes[12..<16].map(String.init).joined(separator: "."))
        }
        let unspecifiedOrLoopback = bytes[0..<15].allSatisfy { $0 == 0 } && bytes[15] <= 1
        return unspecifiedOrLoopback || bytes[0] & 0xFE == 0xFC || (bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80) || bytes[0] == 0xFF
    }

    /// Whether `host` is an address rather than a name (the URL's rules take names only for https).
    private static func isAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return inet_pton(AF_INET, bare, &v4) == 1 || inet_pton(AF_INET6, bare, &v6) == 1
    }

    /// The addresses `host` resolves to, in the resolver's order, read off the event loops. (SwiftNIO's public
    /// resolving, `SocketAddress.makeAddressResolvingHost`, gives the first address only, and every one must be
    /// checked.)
    static func resolve(_ host: String) async throws -> [String] {
        try await NIOThreadPool.singleton.runIfActive {
            var hints = addrinfo()
            hints.ai_family = AF_UNSPEC
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            var list: UnsafeMutablePointer<addrinfo>?
            guard getaddrinfo(host, nil, &hints, &list) == 0, let list else { throw Unresolved() }
            defer { freeaddrinfo(list) }
            var addresses: [String] = []
            var entry: UnsafeMutablePointer<addrinfo>? = list
            while let info = entry?.pointee {
                var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
                switch info.ai_family {
                case AF_INET:
                    info.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { socket in
                        var address = socket.pointee.sin_addr
                        _ = inet_ntop(AF_INET, &address, &text, socklen_t(text.count))
                    }
                case AF_INET6:
                    info.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { socket in
                        var address = socket.pointee.sin6_addr
                        _ = inet_ntop(AF_INET6, &address, &text, socklen_t(text.count))
                    }
                default:
                    break
                }
                let address = String(cString: text)
                if !address.isEmpty, !addresses.contains(address) { addresses.append(address) }
                entry = info.ai_next
            }
            return addresses
        }
    }

    /// A receiver's name resolves to an address the server must not be led to.
    struct InternalAddress: Error {
        /// What the organizer and the log read: never the name or the address.
        static let reason = "the receiver's name leads to a private, link-local or loopback address"
    }

    /// A receiver's name resolves to no address.
    struct Unresolved: Error {}

    private static let clients = Clients()

    /// One client per receiver host and the address it was checked to have, each connecting that host's name to
    /// that address (AsyncHTTPClient's `dnsOverride`; the certificate is still checked against the name). Clients
    /// live as long as the process, as the shared one does; past ``limit`` the least recently used is shut down.
    final class Clients: Sendable {
        static let limit = 32
        private let state = NIOLockedValueBox<[(key: String, client: HTTPClient)]>([])

        func client(host: String, address: String) -> HTTPClient {
            let key = "\(host) \(address)"
            let (client, evicted) = state.withLockedValue { clients -> (HTTPClient, HTTPClient?) in
                if let index = clients.firstIndex(where: { $0.key == key }) {
                    let found = clients.remove(at: index)
                    clients.append(found)
                    return (found.client, nil)
                }
                var configuration = NotificationClient.configuration
                configuration.dnsOverride = [host: address]
                let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
                clients.append((key, client))
                return (client, clients.count > Self.limit ? clients.removeFirst().client : nil)
            }
            // A request under way on the evicted client has its time first (no receiver gets over a minute).
            if let evicted {
                Task {
                    try? await Task.sleep(for: .seconds(60))
                    try? await evicted.shutdown()
                }
            }
            return client
        }
    }
}
