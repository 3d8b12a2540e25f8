import OutpostProtocol

extension Device {
    /// Replaces the token saved in `store`, keeping everything queued: what the device saved while its old token
    /// was refused goes out with the new one at the next sync.
    ///
    /// Only the store changes; nothing is sent. A process that has the device open takes the new token at its
    /// next refused request.
    ///
    /// - Returns: who the new token names; nil for a token that is not a JWT with Outpost's claims, which is
    ///   saved as it is (as ``initialize(store:server:token:deviceId:)`` saves one) when the old token was none either.
    /// - Throws: ``ClientError`` `invalidInput` for an empty token, `notConfigured` when the store was never
    ///   initialised, and `otherUser` when the token names another tenant or user than the saved one (a device
    ///   store holds one person's work). The store is unchanged when it throws.
    @discardableResult
    public static func signIn(store: LocalStore, token: String) async throws -> DeviceUser? {
        try await save(token, in: store, forgettingKeys: true)
    }

    /// Saves `token` in place of the store's, for the same person.
    ///
    /// - Parameter forgettingKeys: forgets the user's keys for record ids. A person signing in again may follow a
    ///   new server secret, and with it new keys, which the next sync fetches; a token the app's provider renews
    ///   silently keeps them, so that a screen reading them never finds them gone in between.
    static func save(_ token: String, in store: LocalStore, forgettingKeys: Bool) async throws -> DeviceUser? {
        guard !token.isEmpty else { throw ClientError(.invalidInput, "the token is empty") }
        guard let saved = try await store.setting(SettingName.token) else {
            throw ClientError(.notConfigured, "this device is not set up: give it a server and a token first")
        }
        let user = try user(of: token, replacing: saved)
        try await store.setSetting(SettingName.token, token)
        if forgettingKeys { try await store.setSetting(SettingName.recordIdKeys, nil) }
        return user
    }

    /// Whether the server refused the token saved in `store` and no token has replaced it since: the person must
    /// sign in again (``signIn(store:token:)``) before the queued records can go out.
    public static func needsSignIn(store: LocalStore) async throws -> Bool {
        guard let refused = try await store.setting(SettingName.refusedToken) else { return false }
        return try await store.setting(SettingName.token) == refused
    }

    /// Who `token` names, when it may replace `saved`: a token for the same tenant and user, or any token when
    /// `saved` names no one.
    ///
    /// - Throws: ``ClientError`` `otherUser` otherwise.
    static func user(of token: String, replacing saved: String) throws -> DeviceUser? {
        let user = DeviceUser(token: token)
        guard let current = DeviceUser(token: saved) else { return user }
        guard let user, user.tenant == current.tenant, user.userId == current.userId else {
            throw ClientError(
                .otherUser, "the token is not for \(current.userId) of \(current.tenant), whose work this device holds")
        }
        return user
    }
}

/// A device's credentials: the token saved in its store, renewed by the app's provider and saved back, sealed.
extension Device {
    /// The credentials through which a transport the app makes itself (such as `URLSessionSyncTransport`)
    /// renews its token, as the HTTP transport ``open(store:transport:credentials:httpClient:clock:configure:now:)``
    /// makes does: a token saved in the store since the refused one (by ``signIn(store:token:)``, in this process or
    /// another) is taken first; then `app` is asked, and what it gives is saved; with neither, the store keeps the
    /// refusal, and ``needsSignIn(store:)`` says so.
    ///
    /// ```swift
    /// let transport = URLSessionSyncTransport(
    ///     baseURL: server, token: token, credentials: Device.storedCredentials(store: store, app: identityProvider))
    /// let device = try await Device.open(store: store, transport: transport)
    /// ```
    public static func storedCredentials(store: LocalStore, app: (any CredentialsProvider)? = nil) -> any CredentialsProvider {
        StoredCredentials(store: store, app: app)
    }
}

/// The token store behind every transport of a device (see ``Device/storedCredentials(store:app:)``).
struct StoredCredentials: CredentialsProvider {
    let store: LocalStore
    /// The app's own provider, when it gave one.
    let app: (any CredentialsProvider)?
    /// Told of every token taken in place of the one sent, before any request sends it.
    var taken: @Sendable (String) async -> Void = { _ in }

    func refreshedToken(after rejected: String) async throws -> String? {
        // A sign-in in another process, or the app's own through `Device.signIn`, may have saved one meanwhile.
        if let saved = try await store.setting(Device.SettingName.token), saved != rejected {
            await taken(saved)
            return saved
        }
        if let fresh = try await app?.refreshedToken(after: rejected), fresh != rejected {
            do {
                _ = try await Device.save(fresh, in: store, forgettingKeys: true)
                await taken(fresh)
                return fresh
            } catch let error as ClientError where error.code == .otherUser || error.code == .invalidInput {
                // Another person's token must not send this one's work: they sign in again instead.
            }
        }
        try await store.setSetting(Device.SettingName.refusedToken, rejected)
        return nil
    }

    /// As for a refused token, but the one expiring still works: without a fresh one nothing is recorded.
    func renewedToken(before expiring: String) async throws -> String? {
        if let saved = try await store.setting(Device.SettingName.token), saved != expiring {
            await taken(saved)
            return saved
        }
        guard let fresh = try await app?.renewedToken(before: expiring), fresh != expiring else { return nil }
        do {
            _ = try await Device.save(fresh, in: store, forgettingKeys: false)
            await taken(fresh)
            return fresh
        } catch let error as ClientError where error.code == .otherUser || error.code == .invalidInput {
            return nil
        }
    }
}

extension Device {
    /// Signs the person out of a shared device and deletes everything the device holds of them: deliveries
    /// stop, and the store (records, queue, settings, token, reference data) is deleted with its key
    /// (``LocalStore/wipe()``). The device and its store must not be used afterwards; the next person opens a new
    /// store at the same place.
    ///
    /// - Parameter discardingUnsynced: deletes records that have not reached the server too. Without it, the wipe
    ///   is refused while any record waits to sync or waits for the person after a refusal.
    /// - Throws: ``ClientError`` `unsyncedRecords`, with nothing deleted, when records would be lost.
    public func wipe(discardingUnsynced: Bool = false) async throws {
        if !discardingUnsynced { try await checkNothingUnsynced() }
        await engine.stopDelivery()
        try await store.wipe()
    }

    /// - Throws: ``ClientError`` `unsyncedRecords` while any record waits to sync or waits for the person.
    func checkNothingUnsynced() async throws {
        let counts = try await store.counts()
        let unsynced = counts.pending + counts.failed + counts.refused
        guard unsynced == 0 else {
            throw ClientError(
                .unsyncedRecords,
                unsynced == 1
                    ? "1 record has not reached the server: sync it first, or discard it with the device's data"
                    : "\(unsynced) records have not reached the server: sync them first, or discard them with the device's data")
        }
    }
}
