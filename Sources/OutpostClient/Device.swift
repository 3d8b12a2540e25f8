import Foundation
import OutpostProtocol

/// A field device: its store, its server connection and its engine, as saved by `outpost device init`.
///
/// The server URL, the token (sealed) and the device id live in the store's settings, so every command
/// that opens the store acts as the same device.
public struct Device: Sendable {
    public let store: LocalStore
    public let engine: SyncEngine
    public let transport: any SyncTransport
    public let serverURL: URL
    /// Who the device acts for, as its token names them; nil when the token is not a JWT.
    public let user: DeviceUser?

    enum SettingName {
        static let server = "server"
        /// Where the device syncs when the server cannot be reached, such as the venue relay of the day.
        static let fallback = "fallback"
        static let token = "token"
        static let deviceId = "device_id"
        /// The last token the server refused and no fresh one replaced (see ``Device/needsSignIn(store:)``).
        static let refusedToken = "refused_token"
        /// The user's keys for record ids (``RecordIdKeyResponse``, JSON), once fetched from the server.
        static let recordIdKeys = "record_id_keys"
        /// Whose work the store holds after they signed out without a wipe (``Outpost/owner(_:)``): only they
        /// may sign in to it again.
        static let signedOutUser = "signed_out_user"
    }

    /// Saves the connection settings of a device store, creating the store when needed.
    ///
    /// - Parameter fallback: where the device syncs when `server` cannot be reached, such as a venue relay
    ///   (``FailoverTransport``); nil for none.
    public static func initialize(
        store: LocalStore, server: URL, fallback: URL? = nil, token: String, deviceId: String
    ) async throws {
        guard Identifier.isValid(deviceId) else {
            throw ClientError(.invalidInput, "the device id must be 1 to 128 characters from A-Z a-z 0-9 . _ : @ -")
        }
        try validate(server: server)
        if let fallback {
            try validate(server: fallback)
            guard fallback != server else { throw ClientError(.invalidInput, "the fallback must be another server") }
        }
        guard !token.isEmpty else { throw ClientError(.invalidInput, "the token is empty") }
        try await store.setSetting(SettingName.server, server.absoluteString)
        try await store.setSetting(SettingName.fallback, fallback?.absoluteString)
        try await store.setSetting(SettingName.token, token)
        try await store.setSetting(SettingName.deviceId, deviceId)
        try await store.setSetting(SettingName.recordIdKeys, nil)
    }

    /// Opens the device saved in `store`, talking to its server through `transport`.
    ///
    /// Give the transport ``storedCredentials(store:app:)`` as its credentials, so that it sends the token saved in
    /// the store and saves every renewed one back, sealed. ``Outpost`` opens its device so; OutpostHTTP's
    /// `Device.open(store:credentials:httpClient:…)` makes the HTTP transport this way.
    ///
    /// - Throws: ``ClientError`` `notConfigured` when `initialize` never ran on this store.
    public static func open(
        store: LocalStore,
        transport: any SyncTransport,
        clock: any Clock<Duration> = ContinuousClock(),
        configure: @Sendable (inout SyncConfiguration) -> Void = { _ in },
        now: @escaping @Sendable () -> Date = { Date() }
    ) async throws -> Device {
        guard let (server, token) = try await savedConnection(store),
            let deviceId = try await store.setting(SettingName.deviceId)
        else {
            throw ClientError(.notConfigured, "this device is not set up with a server and a token")
        }
        var configuration = SyncConfiguration(deviceId: deviceId)
        configure(&configuration)
        let engine = SyncEngine(store: store, transport: transport, configuration: configuration, clock: clock, now: now)
        try await engine.refreshStatus()
        // On every start: records made too long ago and still not synced bring the notice up, with no sync.
        try await engine.refreshPersistentFailureNotice()
        return Device(
            store: store, engine: engine, transport: transport, serverURL: server, user: DeviceUser(token: token))
    }

    /// The server and token saved in `store`; nil when it was never set up, or its person signed out.
    package static func savedConnection(_ store: LocalStore) async throws -> (server: URL, token: String)? {
        guard let server = try await store.setting(SettingName.server).flatMap(URL.init(string:)),
            let token = try await store.setting(SettingName.token)
        else { return nil }
        return (server, token)
    }

    public var deviceId: String { engine.configuration.deviceId }

    /// The fallback saved in `store` (see ``initialize(store:server:fallback:token:deviceId:)``), or nil.
    public static func savedFallback(_ store: LocalStore) async throws -> URL? {
        try await store.setting(SettingName.fallback).flatMap(URL.init(string:))
    }

    /// `make`'s transport to `server`, or, when `fallback` is given, a ``FailoverTransport`` over `make`'s
    /// transports to both.
    public static func transport(
        server: URL, fallback: URL?, _ make: (URL) -> any SyncTransport
    ) -> any SyncTransport {
        guard let fallback else { return make(server) }
        return FailoverTransport(primary: make(server), fallback: make(fallback))
    }

    /// - Throws: ``ClientError`` `invalidInput` unless `server` is an http:// or https:// URL with a host.
    static func validate(server: URL) throws {
        guard let scheme = server.scheme, ["http", "https"].contains(scheme), server.host != nil else {
            throw ClientError(.invalidInput, "the server must be an http:// or https:// URL")
        }
    }
}

/// The staff member a device acts for, read from the claims of its token.
///
/// The device reads the claims without checking the signature, which only the server can: it needs its own
/// user id (attendance record ids carry it) and name, and the server refuses anything a forged claim would
/// try to write.
public struct DeviceUser: Sendable, Hashable {
    public var tenant: String
    public var userId: String
    public var name: String
    public var role: Role

    public init(tenant: String, userId: String, name: String, role: Role) {
        self.tenant = tenant
        self.userId = userId
        self.name = name
        self.role = role
    }

    /// The user a JWT names, or nil when `token` is not a JWT with Outpost's claims.
    public init?(token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        struct Claims: Decodable {
            var tenant: String
            var sub: String
            var role: String
            var name: String?
        }
        guard let data = Base64URL.decode(parts[1]), let claims = try? JSONDecoder().decode(Claims.self, from: Data(data)),
            Identifier.isValid(claims.sub), let role = Role(rawValue: claims.role)
        else { return nil }
        self.init(tenant: claims.tenant, userId: claims.sub, name: claims.name ?? claims.sub, role: role)
    }
}
