import Hummingbird
import NIOConcurrencyHelpers
import OutpostProtocol

/// The routes the router knows, filled once they are all added, for telling "no such route" (404) from
/// "not with this method" (405).
final class RouteTable: Sendable {
    private let routes = NIOLockedValueBox<[(segments: [Substring], method: HTTPRequest.Method)]>([])

    func load(_ entries: [(path: String, method: HTTPRequest.Method)]) {
        routes.withLockedValue { $0 = entries.map { (Self.segments($0.path), $0.method) } }
    }

    /// The methods `path` answers to, sorted; empty when no route has that path.
    func methods(for path: String) -> [String] {
        let wanted = Self.segments(path)
        return routes.withLockedValue { routes in
            Set(
                routes.filter { route in
                    route.segments.count == wanted.count
                        && zip(route.segments, wanted).allSatisfy { pattern, part in
                            pattern == part || pattern.hasPrefix(":") || pattern.hasPrefix("{")
                        }
                }.map(\.method.rawValue)
            ).sorted()
        }
    }

    static func segments(_ path: String) -> [Substring] {
        path.split(separator: "/", omittingEmptySubsequences: true)
    }
}

/// Answers a known path asked with a method it does not serve with 405 and an `Allow` header.
struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    let table: RouteTable

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            let allowed = table.methods(for: request.uri.path)
            guard !allowed.isEmpty else { throw error }
            throw OutpostHTTPError(
                .methodNotAllowed, .methodNotAllowed, "\(request.uri.path) answers \(allowed.joined(separator: ", "))",
                headers: [.allow: allowed.joined(separator: ", ")])
        }
    }
}
