import Foundation
import OutpostProtocol

extension Outpost {
    /// Signs a person in with a token from the app's sign-in screen, and opens their store.
    ///
    /// - The first sign-in on a store sets it up, with ``Configuration/server`` and ``Configuration/deviceId``.
    /// - The same person signing in again (after their token was refused, or after ``signOut(wipe:discardingUnsynced:)``
    ///   without a wipe) gets their store back as they left it: what waited goes out with the new token.
    /// - Another person gets a store of their own with ``StoreLocation/perUser(directory:)``; with
    ///   ``StoreLocation/file(_:)`` they are refused while the store holds someone else's work.
    ///
    /// A started runtime starts the device's work at once, and sends what waits.
    ///
    /// - Returns: who the token names; nil for a token that is not a JWT with Outpost's claims.
    /// - Throws: ``ClientError`` `invalidInput` for an empty token or a bad server or device id,
    ///   `notConfigured` for a first sign-in without ``Configuration/server``, `otherUser` when the store holds
    ///   another person's work. Nothing changes when it throws.
    @discardableResult
    public func signIn(token: String) async throws -> DeviceUser? {
        guard !isClosed else { throw ClientError(.storeUnavailable, "this Outpost runtime is closed") }
        guard !token.isEmpty else { throw ClientError(.invalidInput, "the token is empty") }
        let user = DeviceUser(token: token)
        let url = configuration.location.storeURL(for: user)
        let sameStore = device?.store.url.standardizedFileURL == url.standardizedFileURL
        let store = try sameStore ? openDevice.store : openStore(at: url)
        do {
            try await save(token, of: user, in: store)
        } catch {
            if !sameStore { try? await store.close() }
            throw error
        }
        // The device's transport sends the token it was made with: the device is opened again around the new one.
        await halt()
        if sameStore {
            dropDevice()
        } else {
            await closeDevice()
        }
        try await open(store)
        try configuration.location.markSignedIn(url)
        logger.info("signed in", metadata: ["store": "\(url.deletingLastPathComponent().lastPathComponent)"])
        announce(token)
        if isStarted, let device { run(device) }
        return user
    }

    /// Saves `token` in `store`: a first sign-in sets the store up; a later one must name the store's person.
    private func save(_ token: String, of user: DeviceUser?, in store: LocalStore) async throws {
        if try await store.setting(Device.SettingName.token) != nil {
            try await Device.signIn(store: store, token: token)
        } else if try await store.setting(Device.SettingName.server) != nil {
            // Signed out without a wipe: the store holds its person's work, for them alone. Opening the device
            // brings its server up to the configured one.
            if let owner = try await store.setting(Device.SettingName.signedOutUser), !owner.isEmpty,
                owner != Self.owner(user)
            {
                throw ClientError(.otherUser, "this device holds the work of another person, who must sign in or wipe it")
            }
            try await store.setSetting(Device.SettingName.token, token)
            try await store.setSetting(Device.SettingName.signedOutUser, nil)
            try await store.setSetting(Device.SettingName.recordIdKeys, nil)
        } else {
            guard let server = configuration.server else {
                throw ClientError(.notConfigured, "a first sign-in needs the server's URL in the configuration")
            }
            let base = configuration.deviceId ?? "device"
            let suffix = String(UUID().uuidString.prefix(8).lowercased())
            let deviceId: String
            switch configuration.location {
            case .file: deviceId = configuration.deviceId ?? "device-\(suffix)"
            case .perUser: deviceId = "\(base)-\(suffix)"
            }
            try await Device.initialize(
                store: store, server: server, fallback: configuration.fallback, token: token, deviceId: deviceId)
        }
    }

    /// Signs the person out: the device's work stops and their token is forgotten.
    ///
    /// - Parameters:
    ///   - wipe: deletes their store and its key too (``Device/wipe(discardingUnsynced:)``), so that nothing of
    ///     theirs can be read again. Without it, their records stay, sealed, and wait for them to sign in again.
    ///   - discardingUnsynced: with `wipe`, deletes records that have not reached the server too.
    /// - Throws: ``ClientError`` `unsyncedRecords`, with nothing changed, when a wipe would lose records.
    public func signOut(wipe: Bool = false, discardingUnsynced: Bool = false) async throws {
        guard let device else { return }
        if wipe, !discardingUnsynced { try await device.checkNothingUnsynced() }
        await halt()
        let url = device.store.url
        if wipe {
            dropDevice()
            try await device.wipe(discardingUnsynced: true)
            if case .perUser = configuration.location {
                try? FileManager.default.removeItem(at: url.deletingLastPathComponent())
            }
        } else {
            let token = try await device.store.setting(Device.SettingName.token)
            try await device.store.setSetting(Device.SettingName.signedOutUser, Self.owner(token.flatMap(DeviceUser.init(token:))))
            try await device.store.setSetting(Device.SettingName.token, nil)
            await closeDevice()
        }
        try configuration.location.markSignedIn(nil)
        logger.info("signed out", metadata: ["wiped": "\(wipe)"])
        publish(signedOutStatus)
        announce(nil)
    }

    /// Who a store belongs to, as saved when its person signs out: empty for a token that names no one.
    static func owner(_ user: DeviceUser?) -> String {
        user.map { "\($0.tenant)\n\($0.userId)" } ?? ""
    }

    // MARK: Opening and closing the device

    func openStore(at url: URL) throws -> LocalStore {
        do {
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        } catch {
            throw ClientError(.storeUnavailable, "cannot create the folder of the device store at \(url.path)", underlying: error)
        }
        return try LocalStore(url: url, keys: configuration.keys(url), schema: configuration.schema)
    }

    /// Opens the device of a store that holds a token, and forwards its statuses.
    func open(_ store: LocalStore) async throws {
        guard let (server, token) = try await Device.savedConnection(store) else {
            throw ClientError(.notConfigured, "this device is not set up with a server and a token")
        }
        if let configured = configuration.server, configured != server {
            try Device.validate(server: configured)
            try await store.setSetting(Device.SettingName.server, configured.absoluteString)
        }
        var stored = StoredCredentials(
            store: store, app: credentials.map { RenewalReporter(app: $0, runtime: self) })
        stored.taken = { [weak self] token in await self?.taken(token) }
        let configuration = configuration
        let saved = try await Device.savedFallback(store)
        let fallback = configuration.fallback ?? saved
        let transport = Device.transport(server: configuration.server ?? server, fallback: fallback) {
            configuration.transport.make($0, token, stored)
        }
        let device = try await Device.open(
            store: store, transport: transport,
            clock: configuration.clock,
            configure: { sync in
                sync.appVersion = configuration.appVersion
                sync.escalation = configuration.escalation
                sync.recordIdSettlements = configuration.recordIdSettlements
            }, now: configuration.now)
        if try await Device.needsSignIn(store: store) { await device.engine.setSignIn(.needsSignIn) }
        self.device = device
        let updates = await device.engine.statusUpdates()
        forwarding = Task { [weak self] in
            for await status in updates { await self?.publish(status) }
        }
    }

    /// Forgets the device, leaving its store open.
    func dropDevice() {
        forwarding?.cancel()
        forwarding = nil
        device = nil
    }

    /// Forgets the device and closes its store.
    func closeDevice() async {
        guard let device else { return }
        dropDevice()
        do {
            try await device.store.close()
        } catch {
            logger.warning("the device store did not close", metadata: ["reason": "\(Self.describe(error))"])
        }
    }

    // MARK: Tokens

    /// A token the device took in place of the one it sent.
    func taken(_ token: String) async {
        await device?.engine.setSignIn(.signedIn)
        logger.info("token renewed")
        announce(token)
    }

    func announce(_ token: String?) {
        for observer in tokenObservers.values { observer.yield(token) }
    }

    /// The app's provider is being asked for a token, or has answered.
    func renewing(_ asking: Bool) async {
        guard let engine = device?.engine else { return }
        let state = await engine.status.signIn
        if asking, state == .signedIn {
            await engine.setSignIn(.renewing)
        } else if !asking, state == .renewing {
            await engine.setSignIn(.signedIn)
        }
    }
}

/// The app's credentials provider, with the runtime told while it is asked (``SignInState/renewing``).
struct RenewalReporter: CredentialsProvider {
    let app: any CredentialsProvider
    weak var runtime: Outpost?

    func refreshedToken(after rejected: String) async throws -> String? {
        try await asking { try await app.refreshedToken(after: rejected) }
    }

    func renewedToken(before expiring: String) async throws -> String? {
        try await asking { try await app.renewedToken(before: expiring) }
    }

    private func asking(_ body: () async throws -> String?) async throws -> String? {
        await runtime?.renewing(true)
        do {
            let token = try await body()
            await runtime?.renewing(false)
            return token
        } catch {
            await runtime?.renewing(false)
            throw error
        }
    }
}
