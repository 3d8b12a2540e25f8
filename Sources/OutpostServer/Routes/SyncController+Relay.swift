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

    /// What a venue relay answers a device: a write it applied is `held_at_relay` until the server answered it,
    /// then the server's answer, so that a device calls a write synced only once the server has it. A refusal,
    /// and a write the venue already settled otherwise (a second scan of a guest: `superseded`), is answered at
    /// once: the door must know now.
    func relayAnswers(_ results: [MutationResult], tenant: String) async throws -> [MutationResult] {
        guard let journal = storage as? any RelayJournalStorage else { return results }
        let applied = results.filter { ($0.status == .duplicate ? $0.originalStatus : $0.status) == .applied }
        let outcomes = try await journal.journaled(tenant: tenant, keys: applied.map(\.idempotencyKey))
        return results.map { result in
            guard (result.status == .duplicate ? result.originalStatus : result.status) == .applied,
                let outcome = outcomes[result.idempotencyKey]
            else { return result }
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
