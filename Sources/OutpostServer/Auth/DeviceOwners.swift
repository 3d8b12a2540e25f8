import Foundation
import NIOConcurrencyHelpers
import OutpostProtocol

/// Which user each device id speaks for: the first user of the tenant to use it, until an organizer releases it.
///
/// A push, a heartbeat or a failure report names its device; it is refused unless the device is the caller's
/// (or new, and so becomes the caller's), and unless the token's `device` claim, when it has one, names the
/// same device. So no one can push, report or overwrite a monitor row under a colleague's device.
///
/// Bindings are stored (by the device's fingerprint, never its id), so every server sharing the database
/// agrees. Each process remembers the bindings it confirmed for ``confirmationLifetime``, so that a device's
/// requests do not each ask the database; a release therefore reaches another server's requests from the same
/// old owner within that time, and a new owner's at once (anything but a remembered match asks the database).
final class DeviceOwners<Storage: MonitorStorage>: Sendable {
    private let storage: Storage
    private let secrets: ServerSecrets
    private let now: @Sendable () -> Date
    private let confirmed = NIOLockedValueBox<[Key: Date]>([:])

    /// How long a process trusts a binding it confirmed.
    static var confirmationLifetime: TimeInterval { 60 }
    /// The most bindings a process remembers; past that it forgets them all and asks again.
    static var maxRemembered: Int { 100_000 }

    private struct Key: Hashable {
        var tenant: String
        var deviceId: String
        var userId: String
    }

    init(storage: Storage, secrets: ServerSecrets, now: @escaping @Sendable () -> Date) {
        self.storage = storage
        self.secrets = secrets
        self.now = now
    }

    /// Throws 403 unless `identity` may speak for `deviceId`, binding the device to it when it is new.
    func authorize(_ deviceId: String, for identity: Identity) async throws {
        if let bound = identity.device, bound != deviceId {
            throw OutpostHTTPError.forbidden("this token speaks for device \(bound) only")
        }
        let key = Key(tenant: identity.tenant, deviceId: deviceId, userId: identity.userId)
        let time = now()
        let known = confirmed.withLockedValue { $0[key].map { $0 > time } ?? false }
        if known { return }
        let fingerprint = try secrets.fingerprint(tenant: identity.tenant, deviceId: deviceId)
        let owner = try await storage.bindDevice(
            tenant: identity.tenant, fingerprint: fingerprint, userId: identity.userId,
            at: Timestamp(time).millisecondsSince1970)
        guard owner == identity.userId else {
            throw OutpostHTTPError(
                .forbidden, .deviceOwned, "device \(deviceId) belongs to another user; an organizer can release it")
        }
        confirmed.withLockedValue { confirmed in
            if confirmed.count >= Self.maxRemembered { confirmed.removeAll() }
            confirmed[key] = time.addingTimeInterval(Self.confirmationLifetime)
        }
    }

    /// Unbinds `deviceId`, here and in storage; false when it was not bound.
    func release(_ deviceId: String, tenant: String) async throws -> Bool {
        let fingerprint = try secrets.fingerprint(tenant: tenant, deviceId: deviceId)
        confirmed.withLockedValue { confirmed in
            confirmed = confirmed.filter { $0.key.tenant != tenant || $0.key.deviceId != deviceId }
        }
        return try await storage.releaseDevice(tenant: tenant, fingerprint: fingerprint)
    }
}
