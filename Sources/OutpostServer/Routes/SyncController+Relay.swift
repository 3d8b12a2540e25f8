import Hummingbird
import OutpostProtocol

extension SyncController {
    /// `POST /v1/relay/forward`: a venue relay's forwarded writes, each batch applied as its device's push would
    /// be, in the name of the person the relay verified, with the same idempotency keys.
    ///
    /// A relay token carries no person's rights: it forwards writes in its own scopes only, for people of its
    /// tenant up to ``RelayGrant/highestForwardedRole``, and for a device only as the person the device is bound
    /// to. A batch that breaks those rules has each of its mutations rejected, and the batches after it go on.
    @Sendable func forward(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (relay, grant) = try context.requireRelay()
        let body = try await RequestDecoding.parseBody(
            from: request, maxBytes: configuration.maxBodyBytes, timeout: configuration.bodyTimeout
        ) { (json: JSONValue) throws(JSONSyntaxError) in try RelayForwardRequest(json: json) }
        guard body.batches.reduce(0, { $0 + $1.mutations.count }) <= configuration.maxBatchSize else {
            throw OutpostHTTPError(
                .contentTooLarge, .batchTooLarge,
                "a forward carries at most \(configuration.maxBatchSize) mutations; split it")
        }
        for batch in body.batches {
            guard Identifier.isValid(batch.deviceId), Identifier.isValid(batch.userId) else {
                throw OutpostHTTPError.badRequest("deviceId and userId must be identifiers (A-Z a-z 0-9 . _ : @ -)")
            }
            guard (1...200).contains(batch.userName.count) else {
                throw OutpostHTTPError.badRequest("userName must be 1 to 200 characters")
            }
        }
        var answers: [PushResponse] = []
        for batch in body.batches {
            answers.append(PushResponse(results: try await forward(batch, tenant: relay.tenant, grant: grant)))
        }
        return .json(bytes: try RelayForwardResponse(batches: answers).jsonBytes())
    }

    /// `POST /v1/relay-tokens`: a venue relay's token, for organizers. It is signed with the server's own secret,
    /// also where people sign in with an identity provider.
    @Sendable func relayToken(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        try identity.require(.organizer)
        let body = try await RequestDecoding.decodeBody(
            RelayTokenRequest.self, from: request, maxBytes: 64 * 1024, timeout: configuration.bodyTimeout)
        guard Identifier.isValid(body.relayId) else {
            throw OutpostHTTPError.badRequest("relayId must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        guard !body.scopes.isEmpty, body.scopes.count <= TokenAuthority.maxRelayScopes, body.scopes.allSatisfy(Identifier.isValid)
        else {
            throw OutpostHTTPError.badRequest(
                "scopes must name 1 to \(TokenAuthority.maxRelayScopes) events, each an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        if let name = body.name, !(1...200).contains(name.count) {
            throw OutpostHTTPError.badRequest("name must be 1 to 200 characters")
        }
        let longest = Int(configuration.tokenRules.maxLifetime.components.seconds)
        let lifetime = body.lifetimeSeconds ?? min(3 * 24 * 3600, longest)
        guard (60...longest).contains(lifetime) else {
            throw OutpostHTTPError.badRequest("lifetimeSeconds must be from 60 to \(longest)")
        }
        let issued = now()
        let relay = Identity.relay(
            tenant: identity.tenant, relayId: body.relayId, name: body.name ?? body.relayId, scopes: Array(Set(body.scopes)).sorted())
        let token = try await secrets.tokens().token(for: relay, lifetime: .seconds(lifetime), now: issued)
        var response = try Response.json(
            RelayTokenResponse(token: token, expiresAt: Timestamp(issued.addingTimeInterval(Double(lifetime)))))
        response.headers[.cacheControl] = "no-store"
        return response
    }

    /// `POST /v1/relay/status`: a relay's backlog and the heartbeats of its events' devices, for the server's
    /// monitor. A device's report is kept only when it is newer than the one the server has, which the device may
    /// have sent itself.
    @Sendable func relayStatus(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (relay, grant) = try context.requireRelay()
        let report = try await RequestDecoding.decodeBody(
            RelayStatusReport.self, from: request, maxBytes: 1024 * 1024, timeout: configuration.bodyTimeout)
        let received = now().milliseconds
        guard (0...10_000_000).contains(report.waiting), report.devices.count <= 1000 else {
            throw OutpostHTTPError.badRequest("waiting must be from 0 to 10000000, and devices at most 1000")
        }
        var reports: [DeviceReport] = []
        for device in report.devices {
            guard Self.isFingerprint(device.fingerprint) else {
                throw OutpostHTTPError.badRequest("a device's fingerprint is 16 lowercase hex digits")
            }
            guard Identifier.isValid(device.userId), (1...200).contains(device.staffName.count) else {
                throw OutpostHTTPError.badRequest("a device's userId must be an identifier, and its staffName 1 to 200 characters")
            }
            guard grant.scopes.contains(device.event) else {
                throw OutpostHTTPError.forbidden("a relay reports the devices of its own events only")
            }
            guard [device.pendingCount, device.failedCount, device.rejectedCount].allSatisfy({ (0...10_000_000).contains($0) }),
                (1...64).contains(device.appVersion.utf8.count), device.appVersion.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
            else {
                throw OutpostHTTPError.badRequest(
                    "a device's counts must be from 0 to 10000000, and its appVersion 1 to 64 printable ASCII characters")
            }
            reports.append(
                DeviceReport(
                    tenant: relay.tenant, fingerprint: device.fingerprint, userId: device.userId, staffName: device.staffName,
                    event: device.event, pendingCount: device.pendingCount, failedCount: device.failedCount,
                    rejectedCount: device.rejectedCount,
                    lastRosterFetch: device.lastRosterFetch.map { min($0.millisecondsSince1970, received) },
                    appVersion: device.appVersion, lastSeen: min(device.lastSeen.millisecondsSince1970, received)))
        }
        let failures = try await relayedFailures(report.failures ?? [], tenant: relay.tenant, received: received)
        for device in reports { try await storage.recordHeartbeat(device) }
        if configuration.escalationEnabled, !failures.isEmpty {
            _ = try await MonitorController<Storage>.record(
                failures, storage: storage, received: Timestamp(millisecondsSince1970: received), metrics: metrics,
                logger: context.logger)
        }
        let lastError = report.lastError.map { text in
            String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.prefix(1000).map(Character.init))
        }
        try await storage.recordRelayReport(
            RelayReport(
                tenant: relay.tenant, relayId: relay.userId, name: relay.name, scopes: grant.scopes, waiting: report.waiting,
                oldestWaiting: report.oldestWaitingSince.map { min($0.millisecondsSince1970, received) }, lastError: lastError,
                lastContact: received))
        return Response(status: .noContent)
    }

    /// The failures a relay passes on, checked as a device's own report is: a record id and a reason a monitor may
    /// show, else 400; of those, the ones of a collection with a scope, of a record no one but the reporting person
    /// wrote here.
    private func relayedFailures(
        _ failures: [RelayFailureReport], tenant: String, received: Int64
    ) async throws -> [StoredSyncFailure] {
        guard failures.count <= 1000 else { throw OutpostHTTPError.badRequest("a relay passes on at most 1000 failures") }
        var stored: [StoredSyncFailure] = []
        for (index, failure) in failures.enumerated() {
            guard Self.isFingerprint(failure.fingerprint), Identifier.isValid(failure.userId),
                Identifier.isValid(failure.recordId), SyncFailure.isValidError(failure.lastError),
                SyncFailure.Kind.all.contains(failure.kind)
            else { throw OutpostHTTPError.badRequest("failures[\(index)] is not a failure a device reports") }
            // One the relay may not speak of is passed over, not the whole report: the rest still shows.
            guard configuration.collections[failure.collection]?.scopeField != nil else { continue }
            let writers = try await storage.recordWriters(tenant: tenant, collection: failure.collection, recordId: failure.recordId)
            if !writers.isEmpty && !writers.contains(where: { $0.userId == failure.userId }) { continue }
            stored.append(
                StoredSyncFailure(
                    tenant: tenant, fingerprint: failure.fingerprint, userId: failure.userId, collection: failure.collection,
                    recordId: failure.recordId,
                    firstAttempt: min(max(failure.firstAttempt, configuration.earliestTimestamp).millisecondsSince1970, received),
                    lastError: failure.lastError, reportedAt: received, kind: failure.kind))
        }
        return stored
    }

    /// A device fingerprint as a server writes it: 16 lowercase hex digits.
    static func isFingerprint(_ text: String) -> Bool {
        text.utf8.count == 16 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    private func forward(_ batch: RelayBatch, tenant: String, grant: RelayGrant) async throws -> [MutationResult] {
        func refuseAll(_ code: WireError.Code, _ message: String) -> [MutationResult] {
            batch.mutations.map { .rejected(String($0.idempotencyKey.prefix(256)), code, message) }
        }
        guard batch.role <= RelayGrant.highestForwardedRole else {
            return refuseAll(.forbidden, "a relay forwards the writes of staff, supervisors and organizers only")
        }
        let person = Identity(tenant: tenant, userId: batch.userId, role: batch.role, name: batch.userName)
        do {
            try await devices.authorize(batch.deviceId, for: person)
        } catch let error as OutpostHTTPError where error.status == .forbidden {
            return refuseAll(error.wire.code, error.wire.message)
        }
        return try await apply(batch.mutations, deviceId: batch.deviceId, by: person) { mutation in
            guard let scope = mutation.scope, grant.scopes.contains(scope) else {
                return .rejected(mutation.idempotencyKey, .forbidden, "this relay forwards writes in its own events only")
            }
            return nil
        }
    }

    /// What a venue relay answers a device: a write it applied (or applied in part, in a conflict) is
    /// `held_at_relay` until the server answered it, then the server's answer, so that a device calls a write
    /// synced only once the server has it. A refusal, and a write the venue already settled otherwise (a second
    /// scan of a guest: `superseded`), is answered at once: the door must know now.
    func relayAnswers(_ results: [MutationResult], tenant: String) async throws -> [MutationResult] {
        guard let journal = storage as? any RelayJournalStorage else { return results }
        // A write the relay applied, or applied in part (a conflict on a protected field), waits for the server's
        // word; a second scan the venue already settled (`superseded`) does not.
        func awaitsServer(_ result: MutationResult) -> Bool {
            let status = result.status == .duplicate ? result.originalStatus : result.status
            return status == .applied || status == .conflict
        }
        let outcomes = try await journal.journaled(tenant: tenant, keys: results.filter(awaitsServer).map(\.idempotencyKey))
        return results.map { result in
            guard awaitsServer(result), let outcome = outcomes[result.idempotencyKey] else { return result }
            guard let upstream = outcome else {
                return .rejected(
                    result.idempotencyKey, .heldAtRelay,
                    "saved at the venue relay; it reaches the server when the venue's line is up")
            }
            return upstream
        }
    }
}

extension MutationResult {
    /// A venue relay's answer for a write it holds and the server has not answered yet.
    var isHeldAtRelay: Bool { status == .rejected && error?.code == .heldAtRelay }
}
