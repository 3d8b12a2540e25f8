import AsyncHTTPClient
import Foundation
import OutpostClient

extension Device {
    /// Opens the device saved in `store`, talking HTTP to its server through AsyncHTTPClient, and to its fallback
    /// when it has one and the server cannot be reached (``FailoverTransport``).
    ///
    /// The transport sends the token saved in the store. When the server refuses it, the device takes a token
    /// saved there since (by a sign-in in another process, see ``Device/signIn(store:token:)``), or else asks
    /// `credentials` and saves what it gives, sealed, for the next process; with neither, its calls throw
    /// `TransportError.signInRequired` and queued records wait for a sign-in.
    ///
    /// - Parameter credentials: renews a refused token, such as by signing in again against the app's identity
    ///   provider. A token that names another tenant or user than the saved one is not taken.
    /// - Throws: ``ClientError`` `notConfigured` when `initialize` never ran on this store.
    public static func open(
        store: LocalStore,
        credentials: (any CredentialsProvider)? = nil,
        httpClient: HTTPClient = .shared,
        clock: any Clock<Duration> = ContinuousClock(),
        configure: @Sendable (inout SyncConfiguration) -> Void = { _ in },
        now: @escaping @Sendable () -> Date = { Date() }
    ) async throws -> Device {
        guard let (server, token) = try await savedConnection(store) else {
            throw ClientError(.notConfigured, "this device is not set up with a server and a token")
        }
        let renewal = storedCredentials(store: store, app: credentials)
        let transport = transport(server: server, fallback: try await savedFallback(store)) { url in
            HTTPSyncTransport(baseURL: url, token: token, credentials: renewal, client: httpClient, timeout: .seconds(15))
        }
        return try await open(store: store, transport: transport, clock: clock, configure: configure, now: now)
    }
}

extension Outpost.Transport {
    /// HTTP on AsyncHTTPClient (``HTTPSyncTransport``), with streamed pulls.
    public static func http(client: HTTPClient = .shared, timeout: Duration = .seconds(15)) -> Self {
        Self { server, token, credentials in
            HTTPSyncTransport(baseURL: server, token: token, credentials: credentials, client: client, timeout: timeout)
        }
    }
}
