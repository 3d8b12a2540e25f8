import Foundation
import GRDB
import Hummingbird
import Logging
import OutpostProtocol

/// Turns every error into the wire error format, so that no response ever carries a stack trace,
/// SQL text or a payload. Unexpected errors are logged by type only and answered with 500.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch {
            throw Self.answer(for: error, logger: context.logger)
        }
    }

    /// The wire error `error` is answered with; a storage failure or an unexpected error is logged, by its code
    /// or its type only. Also ends a stream of pulls that fails part way.
    static func answer(for error: any Error, logger: Logger) -> OutpostHTTPError {
        switch error {
        case let error as OutpostHTTPError:
            return error
        case let error as HTTPError:
            return translate(error)
        case let error as StorageError:
            if error.code == .concurrentClaim {
                // Other pushes kept claiming the same keys: the push is safe to send again, and will be.
                logger.warning("storage contention", metadata: ["code": "\(error.code)"])
                return OutpostHTTPError.busy
            }
            logger.error("storage failure", metadata: ["code": "\(error.code)"])
            return error.code == .unavailable ? OutpostHTTPError.unavailable : internalError
        case let error as DatabaseError
        where error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_LOCKED:
            // The embedded database stayed locked by other writers for its whole busy timeout.
            logger.warning("storage contention", metadata: ["code": "\(error.resultCode)"])
            return OutpostHTTPError.busy
        case is CancellationError:
            return OutpostHTTPError.unavailable
        default:
            // Only the type: a description could hold SQL or a value from the request.
            logger.error("unexpected error", metadata: ["type": "\(String(reflecting: type(of: error)))"])
            return internalError
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
        let status: HTTPResponse.Status =
            error.status.code >= 500 && error.status != .serviceUnavailable
            ? .internalServerError : error.status
        return OutpostHTTPError(status, code, message, headers: error.headers)
    }
}
