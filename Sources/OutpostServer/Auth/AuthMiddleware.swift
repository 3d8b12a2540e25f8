import Foundation
import Hummingbird
import HummingbirdAuth
import OutpostProtocol

/// Requires a valid bearer token and puts its ``Identity`` on the request context.
struct AuthMiddleware: RouterMiddleware {
    typealias Context = OutpostRequestContext

    let secrets: ServerSecrets
    let now: @Sendable () -> Date

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        guard request.headers[.authorization] != nil else {
            throw OutpostHTTPError.unauthorized(.unauthorized, "missing bearer token")
        }
        guard let bearer = request.headers.bearer else {
            throw OutpostHTTPError.unauthorized(.invalidToken, "the Authorization header must be 'Bearer <token>'")
        }
        let identity: Identity
        let expires: Date
        switch try await secrets.bearer(bearer.token, now: now()) {
        case .valid(let proven, let until): (identity, expires) = (proven, until)
        case .invalid: throw OutpostHTTPError.unauthorized(.invalidToken, "the token is invalid or expired")
        case .keysUnavailable: throw OutpostHTTPError.keysUnavailable
        }
        var context = context
        context.identity = identity
        context.tokenExpires = expires
        return try await next(request, context)
    }
}
