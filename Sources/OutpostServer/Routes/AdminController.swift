import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import OutpostProtocol

/// The organizer's sync monitor in a browser: `/admin/monitor`, behind a session cookie.
///
/// An organizer signs in with an organizer token (a form, or a sign-in link carrying it); the server answers
/// with a fresh, shorter-lived token in a `Secure`, `HttpOnly`, `SameSite=Strict` cookie scoped to `/admin`,
/// so page scripts never see it and no other site can send it. Browsers keep `Secure` cookies over plain
/// http only on loopback; anywhere else, serve the monitor over TLS.
struct AdminController<Storage: SyncStorage> {
    let storage: Storage
    let secrets: ServerSecrets
    let now: @Sendable () -> Date
    /// How long a sign-in form's body may take to arrive (``ServerConfiguration/bodyTimeout``).
    let bodyTimeout: Duration
    let pages: MonitorPages?

    static var cookieName: String { "outpost_session" }
    static var sessionLifetime: Duration { .seconds(8 * 3600) }
    static var defaultRefresh: Duration { .seconds(15) }

    init(storage: Storage, secrets: ServerSecrets, now: @escaping @Sendable () -> Date, bodyTimeout: Duration) {
        self.storage = storage
        self.secrets = secrets
        self.now = now
        self.bodyTimeout = bodyTimeout
        self.pages = try? MonitorPages()
    }

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.get("sign-in", use: signInPage)
        group.post("session", use: signInForm)
        group.get("session", use: signInLink)
        group.post("sign-out", use: signOut)
        group.get("monitor", use: monitor)
        group.get("monitor/fragment", use: fragment)
        group.get("assets/:name", use: asset)
    }

    private func templates() throws -> MonitorPages {
        guard let pages else {
            throw OutpostHTTPError(.internalServerError, .internalError, "the monitor's templates are missing")
        }
        return pages
    }

    @Sendable func signInPage(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        Self.html(try templates().signIn(error: nil))
    }

    @Sendable func signInForm(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let buffer = try await RequestDecoding.collectBody(of: request, maxBytes: 16 * 1024, timeout: bodyTimeout)
        guard let token = SignInForm.token(in: String(buffer: buffer)), !token.isEmpty else {
            return Self.html(try templates().signIn(error: "Enter an organizer token."), status: .badRequest)
        }
        return try await startSession(token: token)
    }

    /// `GET /admin/session?token=…`: the sign-in link the demo prints. The token leaves the address bar at
    /// once (a redirect), and the page sends no referrer.
    @Sendable func signInLink(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        guard let token = (try? RequestDecoding.optional("token", in: request)) ?? nil else {
            return Response.redirect(to: "/admin/sign-in", type: .normal)
        }
        return try await startSession(token: token)
    }

    private func startSession(token: String) async throws -> Response {
        let authority = try secrets.tokens()
        let date = now()
        let identity: Identity
        let expires: Date
        switch try await secrets.bearer(token.trimmingCharacters(in: .whitespacesAndNewlines), now: date) {
        case .valid(let proven, let until): (identity, expires) = (proven, until)
        case .invalid: return Self.html(try templates().signIn(error: "That token is invalid or expired."), status: .unauthorized)
        case .keysUnavailable: throw OutpostHTTPError.keysUnavailable
        }
        guard identity.role >= .organizer else {
            return Self.html(
                try templates().signIn(error: "The sync monitor needs an organizer token."), status: .forbidden)
        }
        // A session never outlives the token it started from: signing in again with a session's own token (or
        // one about to expire) gives no more time, so a token that leaks cannot be renewed for ever.
        let lifetime = Self.sessionLifetime(until: expires, now: date)
        let session = try await authority.token(for: identity, lifetime: lifetime, now: date)
        var response = Response.redirect(to: "/admin/monitor", type: .normal)
        response.setCookie(
            Cookie(
                name: Self.cookieName, value: session, maxAge: max(Int(lifetime.components.seconds), 1),
                path: "/admin", secure: true, httpOnly: true, sameSite: .strict))
        Self.secure(&response.headers)
        return response
    }

    /// ``sessionLifetime``, or less when the token signed in with expires sooner.
    static func sessionLifetime(until expires: Date, now: Date) -> Duration {
        let left = expires.timeIntervalSince(now)
        guard left < Double(sessionLifetime.components.seconds) else { return sessionLifetime }
        return .milliseconds(Int64(max(left, 0) * 1000))
    }

    @Sendable func signOut(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        var response = Response.redirect(to: "/admin/sign-in", type: .normal)
        response.setCookie(
            Cookie(name: Self.cookieName, value: "", maxAge: 0, path: "/admin", secure: true, httpOnly: true, sameSite: .strict))
        return response
    }

    /// The organizer the session cookie proves, or nil.
    private func organizer(_ request: Request) async throws -> Identity? {
        guard let value = request.cookies[Self.cookieName]?.value, !value.isEmpty else { return nil }
        guard let identity = try await secrets.tokens().identity(fromToken: value, now: now()),
            identity.role >= .organizer
        else { return nil }
        return identity
    }

    @Sendable func monitor(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        // A malformed address is refused as such, signed in or not.
        let refresh = try Self.refresh(in: request)
        let event = try RequestDecoding.optionalIdentifier("event", in: request)
        guard let identity = try await organizer(request) else {
            return Response.redirect(to: "/admin/sign-in", type: .normal)
        }
        let report = try await load(event: event, identity: identity)
        return Self.html(try templates().page(report, refresh: refresh))
    }

    @Sendable func fragment(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let refresh = try Self.refresh(in: request)
        let event = try RequestDecoding.optionalIdentifier("event", in: request)
        guard let identity = try await organizer(request) else {
            throw OutpostHTTPError.unauthorized(.unauthorized, "sign in at /admin/sign-in")
        }
        let report = try await load(event: event, identity: identity)
        return Self.html(try templates().body(report, refresh: refresh))
    }

    private func load(event: String?, identity: Identity) async throws -> MonitorResponse {
        var event = event
        if event == nil {
            event = try await storage.events(tenant: identity.tenant).first?.id
        }
        return try await MonitorReport.load(
            tenant: identity.tenant, event: event, storage: storage, secrets: secrets, now: now())
    }

    /// `?refresh=SECONDS`, 1 to 300; 15 by default.
    static func refresh(in request: Request) throws -> Duration {
        guard let text = try RequestDecoding.optional("refresh", in: request) else { return defaultRefresh }
        guard let seconds = Int64(text), (1...300).contains(seconds) else {
            throw OutpostHTTPError.badRequest("refresh must be a number of seconds from 1 to 300")
        }
        return .seconds(seconds)
    }

    @Sendable func asset(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        guard let name = context.parameters.get("name"), let asset = try templates().assets[name] else {
            throw OutpostHTTPError(.notFound, .notFound, "no such asset")
        }
        return Response(
            status: .ok,
            headers: [.contentType: asset.contentType, .cacheControl: "no-cache"],
            body: .init(byteBuffer: ByteBuffer(string: asset.body)))
    }

    static func html(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        var headers: HTTPFields = [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"]
        secure(&headers)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// Headers that keep the page's content its own: scripts and styles from this server only, no framing,
    /// no referrer (a sign-in link's token never leaves in one).
    static func secure(_ headers: inout HTTPFields) {
        headers[.contentSecurityPolicy] =
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
        headers[.xContentTypeOptions] = "nosniff"
        headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
    }
}

/// The sign-in form's body (`application/x-www-form-urlencoded`).
enum SignInForm {
    /// The `token` field, percent-decoded; other fields are ignored, as a browser may add its own.
    static func token(in body: String) -> String? {
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0] == "token" else { continue }
            return String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
        }
        return nil
    }
}
