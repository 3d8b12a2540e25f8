import Foundation
import Hummingbird
import Logging
import OutpostProtocol

/// Turns every error into the wire error format, so that no response ever carries a stack trace,
/// SQL text or a payload. Unexpected errors are logged by type only and answered with 500.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as OutpostHTTPError {
            throw error
        } catch let error as HTTPError {
            throw Self.translate(error)
        } catch let error as StorageError {
            context.logger.error("storage failure", metadata: ["code": "\(error.code)"])
            throw error.code == .unavailable ? OutpostHTTPError.unavailable : Self.internalError
        } catch is CancellationError {
            throw OutpostHTTPError.unavailable
        } catch {
            // Only the type: a description could hold SQL or a value from the request.
            context.logger.error("unexpected error", metadata: ["type": "\(String(reflecting: type(of: error)))"])
            throw Self.internalError
        }
    }

    static var internalError: OutpostHTTPError {
        OutpostHTTPError(.internalServerError, .internalError, "internal server error")
    }

    static func translate(_ error: HTTPError) -> OutpostHTTPError {
        let code: WireError.Code =
            switch error.status {
            case .notFound: .notFound
            case .methodNotAllowed: .methodNotAllowed
            case .contentTooLarge: .payloadTooLarge
            case .unauthorized: .unauthorized
            case .forbidden: .forbidden
            case .serviceUnavailable: .serviceUnavailable
            default: error.status.code >= 500 ? .internalError : .invalidRequest
            }
        let message: String =
            switch error.status {
            case .notFound: "no such route"
            case .contentTooLarge: "request body is too large"
            default: error.status.code >= 500 ? "internal server error" : error.status.reasonPhrase.lowercased()
            }
        let status: HTTPResponse.Status = error.status.code >= 500 && error.status != .serviceUnavailable
            ? .internalServerError : error.status
        return OutpostHTTPError(status, code, message, headers: error.headers)
    }
}
