import Foundation
import Hummingbird
import Logging

/// Logs one line per request: method, path without its query, status and duration.
///
/// Never the query string, a header or a body, so that no token, payload or personal data reaches a log.
struct AccessLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let start = ContinuousClock.now
        do {
            let response = try await next(request, context)
            log(request, context: context, status: response.status.code, since: start)
            return response
        } catch let error as any HTTPResponseError {
            log(request, context: context, status: error.status.code, since: start)
            throw error
        } catch {
            log(request, context: context, status: 500, since: start)
            throw error
        }
    }

    private func log(_ request: Request, context: Context, status: Int, since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let milliseconds = Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000
        context.logger.info(
            "request",
            metadata: [
                "method": "\(request.method.rawValue)",
                "path": "\(request.uri.path)",
                "status": "\(status)",
                "ms": "\(String(format: "%.1f", milliseconds))",
            ])
    }
}
