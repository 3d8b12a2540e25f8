import Foundation
import Hummingbird
import OutpostProtocol

/// `GET /v1/audit` and `GET /v1/conflicts`: what organizers read to review what happened.
struct ReviewController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration

    /// The most conflicts one request lists.
    static var maxConflicts: Int { 1000 }

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.get("audit", use: audit)
        group.get("conflicts", use: conflicts)
    }

    @Sendable func audit(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        try identity.require(.organizer)
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        let recordId = try RequestDecoding.required("recordId", in: request)
        guard Identifier.isValid(recordId) else {
            throw OutpostHTTPError.badRequest("recordId must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        // Without a scope, every scope's record of that id.
        let scope = try RequestDecoding.scope(in: request)
        let entries = try await storage.audit(
            tenant: identity.tenant, collection: policy.name, recordId: recordId, scope: scope)
        return try .json(AuditResponse(entries: entries))
    }

    @Sendable func conflicts(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        try identity.require(.organizer)
        var collection: String?
        if try RequestDecoding.optional("collection", in: request) != nil {
            collection = try RequestDecoding.collection(in: request, registry: configuration.collections).name
        }
        let limit = try RequestDecoding.limit(in: request, default: 100, max: Self.maxConflicts)
        let conflicts = try await storage.conflicts(tenant: identity.tenant, collection: collection, limit: limit)
        return try .json(ConflictsResponse(conflicts: conflicts))
    }
}
