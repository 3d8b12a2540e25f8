import AsyncHTTPClient
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

    enum SettingName {
        static let server = "server"
        static let token = "token"
        static let deviceId = "device_id"
    }

    /// Saves the connection settings of a device store, creating the store when needed.
    public static func initialize(store: LocalStore, server: URL, token: String, deviceId: String) async throws {
        guard Identifier.isValid(deviceId) else {
            throw ClientError(.invalidInput, "the device id must be 1 to 128 characters from A-Z a-z 0-9 . _ : @ -")
        }
        guard let scheme = server.scheme, ["http", "https"].contains(scheme), server.host != nil else {
            throw ClientError(.invalidInput, "the server must be an http:// or https:// URL")
        }
        guard !token.isEmpty else { throw ClientError(.invalidInput, "the token is empty") }
        try await store.setSetting(SettingName.server, server.absoluteString)
        try await store.setSetting(SettingName.token, token)
        try await store.setSetting(SettingName.deviceId, deviceId)
    }

    /// Opens the device saved in `store`.
    ///
    /// - Parameter transport: replaces the HTTP transport (tests use an in-memory one).
    /// - Throws: ``ClientError`` `notConfigured` when `initialize` never ran on this store.
    public static func open(
        store: LocalStore,
        transport: (any SyncTransport)? = nil,
        httpClient: HTTPClient = .shared,
        clock: any Clock<Duration> = ContinuousClock(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) async throws -> Device {
        guard let server = try await store.setting(SettingName.server).flatMap(URL.init(string:)),
            let token = try await store.setting(SettingName.token),
            let deviceId = try await store.setting(SettingName.deviceId)
        else {
            throw ClientError(.notConfigured, "this device is not set up: run `outpost device init --server URL --token T` first")
        }
        let transport = transport ?? HTTPSyncTransport(baseURL: server, token: token, client: httpClient, timeout: .seconds(15))
        let engine = SyncEngine(
            store: store, transport: transport, configuration: SyncConfiguration(deviceId: deviceId), clock: clock,
            now: now)
        try await engine.refreshStatus()
        return Device(store: store, engine: engine, transport: transport, serverURL: server)
    }

    public var deviceId: String { engine.configuration.deviceId }
}
