import Crypto
import Foundation
import Hummingbird
import Logging
import OutpostProtocol
import OutpostRecords

/// `POST /v1/heartbeats`, `POST /v1/sync-failures` (devices), `GET /v1/monitor` and
/// `DELETE /v1/devices/{deviceId}/owner` (organizers).
struct MonitorController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration
    let secrets: ServerSecrets
    let devices: DeviceOwners<Storage>
    let metrics: ServerMetrics
    let now: @Sendable () -> Date

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.post("heartbeats", use: heartbeat)
        group.post("sync-failures", use: syncFailures)
        group.get("monitor", use: monitor)
        group.delete("devices/:deviceId/owner", use: releaseDevice)
        group.post("sign-in-codes", use: signInCode)
    }

    /// `POST /v1/sign-in-codes`: a single-use link to the monitor for the organizer who asks, valid minutes.
    @Sendable func signInCode(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        guard identity.role >= .organizer else { throw OutpostHTTPError.forbidden("the sync monitor needs an organizer token") }
        let date = now()
        let code = AdminSecret.make()
        let expires = date.milliseconds + AdminController<Storage>.codeLifetime.milliseconds
        let sessionEnd = min(
            (context.tokenExpires ?? date).milliseconds, date.milliseconds + AdminController<Storage>.sessionLifetime.milliseconds)
        try await storage.storeGrant(
            AdminGrant(
                kind: .code, hash: AdminSecret.hash(code), identity: identity, csrf: "", expiresAt: min(expires, sessionEnd),
                sessionExpiresAt: sessionEnd),
            now: date.milliseconds)
        let answer = SignInCode(
            code: code, path: "/admin/session?code=\(code)", expiresAt: Timestamp(millisecondsSince1970: min(expires, sessionEnd)))
        return try Response.json(answer, status: .created)
    }

    /// The most bytes a heartbeat may say wait to upload: 1 TB, past any device's storage.
    static var maxPendingUploadBytes: Int64 { 1_000_000_000_000 }

    @Sendable func heartbeat(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        let beat = try await RequestDecoding.decodeBody(
            Heartbeat.self, from: request, maxBytes: 16 * 1024, timeout: configuration.bodyTimeout)
        guard Identifier.isValid(beat.deviceId) else {
            throw OutpostHTTPError.badRequest("deviceId must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        if let event = beat.event, !Identifier.isValid(event) {
            throw OutpostHTTPError.badRequest("event must be an identifier")
        }
        try await devices.authorize(beat.deviceId, for: identity)
        guard (0...10_000_000).contains(beat.pendingCount), (0...10_000_000).contains(beat.failedCount),
            (0...10_000_000).contains(beat.rejectedCount ?? 0)
        else {
            throw OutpostHTTPError.badRequest("pendingCount, failedCount and rejectedCount must be from 0 to 10000000")
        }
        guard (0...Self.maxPendingUploadBytes).contains(beat.pendingUploadBytes ?? 0) else {
            throw OutpostHTTPError.badRequest("pendingUploadBytes must be from 0 to \(Self.maxPendingUploadBytes)")
        }
        guard (1...64).contains(beat.appVersion.utf8.count), beat.appVersion.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else { throw OutpostHTTPError.badRequest("appVersion must be 1 to 64 printable ASCII characters") }
        let received = Timestamp(now())
        let fingerprint = try secrets.fingerprint(tenant: identity.tenant, deviceId: beat.deviceId)
        try await storage.recordHeartbeat(
            DeviceReport(
                tenant: identity.tenant, fingerprint: fingerprint, userId: identity.userId, staffName: identity.name,
                event: beat.event ?? "", pendingCount: beat.pendingCount, failedCount: beat.failedCount,
                rejectedCount: beat.rejectedCount ?? 0, pendingUploadBytes: beat.pendingUploadBytes ?? 0,
                lastRosterFetch: beat.lastRosterFetch.map { reported($0, received: received) },
                appVersion: beat.appVersion,
                lastSeen: received.millisecondsSince1970))
        metrics.heartbeats.increment()
        return try .json(HeartbeatResponse(fingerprint: fingerprint))
    }

    @Sendable func syncFailures(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        let report = try await RequestDecoding.decodeBody(
            SyncFailureReport.self, from: request, maxBytes: 1024 * 1024, timeout: configuration.bodyTimeout)
        guard Identifier.isValid(report.deviceId) else {
            throw OutpostHTTPError.badRequest("deviceId must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        guard (1...SyncFailureReport.maxFailures).contains(report.failures.count) else {
            throw OutpostHTTPError.badRequest("a report carries 1 to \(SyncFailureReport.maxFailures) failures")
        }
        try await devices.authorize(report.deviceId, for: identity)
        let received = Timestamp(now())
        // A record the device still knows by its provisional id is reported under the id the server keeps:
        // neither the monitor nor the table of failures holds an id that names the user.
        let attendanceKey =
            report.failures.contains { $0.collection == Attendance.collection }
            ? try secrets.attendanceKey(tenant: identity.tenant, userId: identity.userId) : nil
        let reportedFailures = report.failures.map { failure in
            var failure = failure
            if failure.collection == Attendance.collection, let attendanceKey,
                let derived = Attendance.derivedRecordId(of: failure.recordId, userId: identity.userId, key: attendanceKey)
            {
                failure.recordId = derived
            }
            return failure
        }
        // Everything is checked before anything is written: a report is recorded whole or not at all.
        for (index, failure) in reportedFailures.enumerated() {
            guard configuration.collections[failure.collection] != nil else {
                throw OutpostHTTPError(.notFound, .unknownCollection, "failures[\(index)].collection is not a collection")
            }
            guard Identifier.isValid(failure.recordId) else {
                throw OutpostHTTPError.badRequest("failures[\(index)].recordId must be an identifier", code: .invalidRecordId)
            }
            guard SyncFailure.Kind.all.contains(failure.kind ?? .persistent) else {
                throw OutpostHTTPError.badRequest("failures[\(index)].kind must be persistent or rejected")
            }
            guard SyncFailure.isValidError(failure.lastError) else {
                throw OutpostHTTPError.badRequest(
                    "failures[\(index)].lastError must be 1 to \(SyncFailure.maxErrorLength) characters, with no "
                        + "control characters but tab and line breaks")
            }
            // Only the device's own records: one another device or user wrote, and this one never did, is refused.
            let writers = try await storage.recordWriters(
                tenant: identity.tenant, collection: failure.collection, recordId: failure.recordId)
            let mine = RecordWriter(deviceId: report.deviceId, userId: identity.userId)
            if !writers.isEmpty && !writers.contains(mine) {
                throw OutpostHTTPError.forbidden("\(failure.collection)/\(failure.recordId) was written by another device")
            }
        }
        guard configuration.escalationEnabled else {
            return try .json(SyncFailureReceipt(recorded: 0, alreadyKnown: 0, escalationEnabled: false))
        }
        let fingerprint = try secrets.fingerprint(tenant: identity.tenant, deviceId: report.deviceId)
        let failures = reportedFailures.map { failure in
            StoredSyncFailure(
                tenant: identity.tenant, fingerprint: fingerprint, userId: identity.userId,
                collection: failure.collection, recordId: failure.recordId,
                firstAttempt: reported(failure.firstAttempt, received: received), lastError: failure.lastError,
                reportedAt: received.millisecondsSince1970, kind: failure.kind ?? .persistent)
        }
        let recorded = try await Self.record(
            failures, storage: storage, received: received, metrics: metrics, logger: context.logger)
        return try .json(
            SyncFailureReceipt(
                recorded: recorded, alreadyKnown: report.failures.count - recorded, escalationEnabled: true))
    }

    /// Stores `failures` in one transaction (a report that cannot be stored whole leaves nothing behind, and is
    /// sent again), and logs and counts each one not stored before; returns how many those were.
    static func record(
        _ failures: [StoredSyncFailure], storage: Storage, received: Timestamp, metrics: ServerMetrics, logger: Logger
    ) async throws -> Int {
        let stored = try await storage.recordSyncFailures(failures)
        var recorded = 0
        for (failure, isNew) in zip(failures, stored) where isNew {
            let firstAttempt = failure.firstAttempt
            recorded += 1
            // Ids and times only: never the payload, the error text (it may quote a value) or a name.
            var metadata: Logger.Metadata = [
                "tenant": "\(failure.tenant)", "device": "\(failure.fingerprint)", "collection": "\(failure.collection)",
                "record": "\(Self.reference(tenant: failure.tenant, recordId: failure.recordId))",
            ]
            if failure.kind == .rejected {
                // A refusal waits for a person, not for the network: no page, and no age to report.
                metrics.rejectedRecords.increment()
                metadata["refused_at"] = "\(Timestamp(millisecondsSince1970: firstAttempt).iso8601)"
                logger.warning("Rejected Record", metadata: metadata)
            } else {
                metrics.persistentFailures.increment()
                metadata["first_attempt"] = "\(Timestamp(millisecondsSince1970: firstAttempt).iso8601)"
                metadata["age_hours"] = "\((received.millisecondsSince1970 - firstAttempt) / 3_600_000)"
                logger.error("Persistent Sync Failure", metadata: metadata)
            }
        }
        return recorded
    }

    /// A time a device reports about itself, in milliseconds, kept between the earliest time the server
    /// accepts and the moment of receipt: a device whose clock is wrong still shows up, with a time that
    /// cannot sort ahead of the present.
    private func reported(_ time: Timestamp, received: Timestamp) -> Int64 {
        min(max(time, configuration.earliestTimestamp), received).millisecondsSince1970
    }

    /// A short, stable reference to a record for logs: its id can embed a user id.
    static func reference(tenant: String, recordId: String) -> String {
        SHA256.hash(data: Array("\(tenant)\u{0}\(recordId)".utf8)).prefix(6).hexString
    }

    /// Lets the next user to use a device own it (a device handed to a colleague).
    @Sendable func releaseDevice(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        try identity.require(.organizer)
        // Path parameters arrive as sent: an id's `@` may come percent-encoded.
        guard let deviceId = context.parameters.get("deviceId")?.removingPercentEncoding, Identifier.isValid(deviceId)
        else {
            throw OutpostHTTPError.badRequest("deviceId must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        let released = try await devices.release(deviceId, tenant: identity.tenant)
        return try .json(DeviceRelease(deviceId: deviceId, released: released))
    }

    @Sendable func monitor(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        try identity.require(.organizer)
        let event = try RequestDecoding.optionalIdentifier("event", in: request)
        return try .json(
            try await MonitorReport.load(
                tenant: identity.tenant, event: event, storage: storage, secrets: secrets, relay: configuration.relay,
                now: now()))
    }
}
