import Foundation
import Hummingbird
import OutpostProtocol

/// `GET /files/{sha256}?tenant=…&collection=…&recordId=…[&scope=…]&expires=…&signature=…`: a file through a signed
/// link (``FileLinks``), for a system outside Outpost that holds no token, such as a crew's sheet.
///
/// The link must be this server's, unexpired, and the record it names must still be live and name the file: a link
/// to a photo that was replaced or deleted stops working. Every refusal is the same 404, so that a link tells
/// nothing of what it does not name.
struct FileLinkController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration
    let secrets: ServerSecrets
    let gate: AdmissionGate
    let now: @Sendable () -> Date

    func addRoutes(to router: Router<OutpostRequestContext>) {
        router.get("files/:sha256", use: file)
    }

    @Sendable func file(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let notFound = OutpostHTTPError(.notFound, .notFound, "this link is not valid, or no longer")
        guard let base = configuration.publicURL else { throw notFound }
        let sha256 = try FileController<Storage>.digest(in: context)
        let query = request.uri.queryParameters
        func text(_ name: String) -> String? { query[name[...]].map(String.init) }
        guard let tenant = text("tenant"), let collection = text("collection"), let recordId = text("recordId"),
            let expires = text("expires").flatMap({ Int64($0) }), let signature = text("signature"),
            let policy = configuration.collections[collection]
        else { throw notFound }
        let target = FileLinks.Target(
            tenant: tenant, collection: collection, scope: text("scope") ?? "", recordId: recordId, sha256: sha256)
        let links = FileLinks(base: base, key: try secrets.fileLinkKey(), lifetime: configuration.fileLinkLifetime)
        guard links.verifies(target, expires: expires, signature: signature, now: now()) else { throw notFound }
        return try await gate.withAdmission(caller: "link:\(tenant)") {
            guard
                let record = try await storage.record(
                    tenant: tenant, collection: policy.name, recordId: recordId, scope: target.scope),
                !record.tombstone,
                let named = FileReference.references(in: record.fields).values.first(where: { $0.sha256 == sha256 }),
                let file = try await storage.completeFiles(tenant: tenant, sha256s: [sha256])[sha256]
            else { throw notFound }
            return try await FileController<Storage>.answer(
                file, named: named.name, range: request.headers[.range], tenant: tenant, storage: storage, gate: gate,
                caller: "link:\(tenant)", logger: context.logger)
        }
    }
}
