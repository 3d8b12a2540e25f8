import Foundation
import Hummingbird
import OutpostProtocol

/// `GET /health` and `GET /openapi.yaml`: the routes that need no token.
struct MetaController<Storage: SyncStorage> {
    let storage: Storage

    func addRoutes(to router: Router<OutpostRequestContext>) {
        router.get("health", use: health)
        router.get("openapi.yaml", use: openAPI)
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
