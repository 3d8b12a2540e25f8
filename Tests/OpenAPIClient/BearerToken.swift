import Foundation
import HTTPTypes
import OpenAPIRuntime

/// The bearer token on every request of the generated client: the generator leaves security schemes to middleware,
/// so a team that generates a client adds this much by hand, beside the generated code.
public struct BearerToken: ClientMiddleware {
    public var token: String

    public init(token: String) { self.token = token }

    public func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(token)"
        return try await next(request, body, baseURL)
    }
}
