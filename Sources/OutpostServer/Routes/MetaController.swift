import Foundation
import Hummingbird
import OutpostProtocol

/// `GET /health`, `GET /openapi.yaml` and `GET /metrics`: the routes that need no token.
struct MetaController<Storage: SyncStorage> {
    let storage: Storage
    let metrics: ServerMetrics
    let gate: AdmissionGate
    let now: @Sendable () -> Date

    func addRoutes(to router: Router<OutpostRequestContext>) {
        router.get("health", use: health)
        router.get("openapi.yaml", use: openAPI)
        router.get("metrics", use: prometheus)
    }

    /// The Prometheus text format. Counts and states only: no tenant, id or name is a label.
    @Sendable func prometheus(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let text = try await metrics.exposition(storage: storage, gate: gate, now: now())
        return Response(
            status: .ok,
            headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    @Sendable func health(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        do {
            try await storage.checkHealth()
        } catch {
            throw OutpostHTTPError.unavailable
        }
        return try .json(HealthResponse(status: "ok", storage: "ok"))
    }

    @Sendable func openAPI(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        Response(
            status: .ok,
            headers: [.contentType: "application/yaml; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: try OpenAPIDocument.data())))
    }
}

/// The protocol's OpenAPI document, shipped as a resource of this module (the repository's `openapi.yaml`).
package enum OpenAPIDocument {
    package static func data() throws -> Data {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml") else {
            throw OutpostHTTPError(.internalServerError, .internalError, "the OpenAPI document is missing")
        }
        return try Data(contentsOf: url)
    }
}
