import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import OutpostProtocol

/// The organizer's sync monitor in a browser: `/admin/monitor`, behind a session kept by the server.
///
/// An organizer signs in with an organizer token (or their identity provider's), or with a sign-in link's
/// single-use code. The server stores a session and sends only its opaque random id, in a `Secure`,
/// `HttpOnly`, `SameSite=Strict` cookie scoped to `/admin`: page scripts never see it, it is no bearer token
/// on `/v1`, and signing out deletes the session, so a copied cookie stops working. Every form that changes
/// state (sign-in, sign-out) must come from this server's own page: its `Origin` is this server's, and it
/// carries the CSRF token of the page (sign-in: a cookie set with the form; sign-out: the session's). A
/// sign-in link only asks; its code is used by the form it shows. Browsers keep `Secure` cookies over plain
/// http only on loopback; anywhere else, serve the monitor over TLS.
struct AdminController<Storage: SyncStorage> {
    let storage: Storage
    let secrets: ServerSecrets
    let now: @Sendable () -> Date
    /// The collections and limits, for the monitor's downloads; its `bodyTimeout` bounds a sign-in form's body.
    let configuration: ServerConfiguration
    /// The `/v1` admission gate, under which a download reads its pages.
    let gate: AdmissionGate
    let pages: MonitorPages?

    static var cookieName: String { "outpost_session" }
    static var csrfCookieName: String { "outpost_csrf" }
    static var sessionLifetime: Duration { .seconds(8 * 3600) }
    /// How long a sign-in link's code may wait to be used.
    static var codeLifetime: Duration { .seconds(5 * 60) }
    static var defaultRefresh: Duration { .seconds(15) }

    init(
        storage: Storage, secrets: ServerSecrets, now: @escaping @Sendable () -> Date, configuration: ServerConfiguration,
        gate: AdmissionGate
    ) {
        self.storage = storage
        self.secrets = secrets
        self.now = now
        self.configuration = configuration
        self.gate = gate
        self.pages = try? MonitorPages()
    }

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.get("sign-in", use: signInPage)
        group.post("session", use: signInForm)
        group.get("session", use: signInLink)
        group.post("sign-out", use: signOut)
        group.get("monitor", use: monitor)
        group.get("monitor/fragment", use: fragment)
        group.get("export", use: export)
        group.post("notifications", use: setNotifications)
        group.get("assets/:name", use: asset)
    }

    private func templates() throws -> MonitorPages {
        guard let pages else {
            throw OutpostHTTPError(.internalServerError, .internalError, "the monitor's templates are missing")
        }
        return pages
    }

    @Sendable func signInPage(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        try signInResponse(error: nil)
    }

    /// The sign-in page with a fresh CSRF token, in its form and in a cookie beside it.
    private func signInResponse(error: String?, status: HTTPResponse.Status = .ok, confirm: MonitorPages.Confirm? = nil) throws -> Response {
        let csrf = AdminSecret.make()
        var response = Self.html(try templates().signIn(error: error, csrf: csrf, confirm: confirm), status: status)
        response.setCookie(Self.cookie(Self.csrfCookieName, csrf, maxAge: Int(Self.codeLifetime.components.seconds) * 6))
        return response
    }

    /// `POST /admin/session`: the sign-in form, with a token or a sign-in link's code.
    @Sendable func signInForm(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let buffer = try await RequestDecoding.collectBody(of: request, maxBytes: 16 * 1024, timeout: configuration.bodyTimeout)
        let form = AdminForm(String(buffer: buffer))
        guard Self.isSameOrigin(request), let csrf = form["csrf"], let cookie = request.cookies[Self.csrfCookieName]?.value,
            AdminSecret.equal(csrf, cookie)
        else {
            return try signInResponse(error: "That sign-in did not come from this page. Sign in here.", status: .forbidden)
        }
        let date = now()
        if let code = form["code"], !code.isEmpty {
            guard let grant = try await storage.takeGrant(.code, hash: AdminSecret.hash(code), now: date.milliseconds) else {
                return try signInResponse(error: "That sign-in link has expired or was used. Ask for a new one.", status: .unauthorized)
            }
            return try await startSession(grant.identity, until: Date(milliseconds: grant.sessionExpiresAt))
        }
        guard let token = form["token"]?.trimmingCharacters(in: .whitespacesAndNewlines), !token.isEmpty else {
            return try signInResponse(error: "Enter an organizer token.", status: .badRequest)
        }
        switch try await secrets.bearer(token, now: date) {
        case .valid(let identity, let expires): return try await startSession(identity, until: expires)
        case .invalid: return try signInResponse(error: "That token is invalid or expired.", status: .unauthorized)
        case .keysUnavailable: throw OutpostHTTPError.keysUnavailable
        }
    }

    /// `GET /admin/session?code=…`: a sign-in link. It only asks whom to sign in as: a link another site
    /// opens in the organizer's browser signs nobody in, and the code is used by the form it shows.
    @Sendable func signInLink(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        guard let code = (try? RequestDecoding.optional("code", in: request)) ?? nil, !code.isEmpty else {
            return Response.redirect(to: "/admin/sign-in", type: .normal)
        }
        guard let grant = try await storage.grant(.code, hash: AdminSecret.hash(code), now: now().milliseconds) else {
            return try signInResponse(error: "That sign-in link has expired or was used. Ask for a new one.", status: .unauthorized)
        }
        let identity = grant.identity
        return try signInResponse(
            error: nil, confirm: .init(code: code, tenant: identity.tenant, name: identity.name, role: identity.role.rawValue))
    }

    /// Stores a session for `identity` and sends its id; organizers only.
    private func startSession(_ identity: Identity, until expires: Date) async throws -> Response {
        guard identity.role >= .organizer else {
            return try signInResponse(error: "The sync monitor needs an organizer token.", status: .forbidden)
        }
        let date = now()
        // A session never outlives the token it started from, so a token that leaks cannot be renewed for ever.
        let lifetime = Self.sessionLifetime(until: expires, now: date)
        let id = AdminSecret.make()
        let end = date.milliseconds + lifetime.milliseconds
        try await storage.storeGrant(
            AdminGrant(
                kind: .session, hash: AdminSecret.hash(id), identity: identity, csrf: AdminSecret.make(), expiresAt: end,
                sessionExpiresAt: end),
            now: date.milliseconds)
        var response = Response.redirect(to: "/admin/monitor", type: .normal)
        response.setCookie(Self.cookie(Self.cookieName, id, maxAge: max(Int(lifetime.components.seconds), 1)))
        response.setCookie(Self.cookie(Self.csrfCookieName, "", maxAge: 0))
        Self.secure(&response.headers)
        return response
    }

    static func cookie(_ name: String, _ value: String, maxAge: Int) -> Cookie {
        Cookie(name: name, value: value, maxAge: maxAge, path: "/admin", secure: true, httpOnly: true, sameSite: .strict)
    }

    /// ``sessionLifetime``, or less when the token signed in with expires sooner.
    static func sessionLifetime(until expires: Date, now: Date) -> Duration {
        let left = expires.timeIntervalSince(now)
        guard left < Double(sessionLifetime.components.seconds) else { return sessionLifetime }
        return .milliseconds(Int64(max(left, 0) * 1000))
    }

    /// `POST /admin/sign-out`: ends the session, from this server's page only. Anything else changes nothing,
    /// cookies included: a form from another site arrives without the session cookie, and clearing it then
    /// would sign the organizer out all the same.
    @Sendable func signOut(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let buffer = try await RequestDecoding.collectBody(of: request, maxBytes: 16 * 1024, timeout: configuration.bodyTimeout)
        let form = AdminForm(String(buffer: buffer))
        let date = now().milliseconds
        guard Self.isSameOrigin(request), let id = request.cookies[Self.cookieName]?.value, !id.isEmpty,
            let session = try await storage.grant(.session, hash: AdminSecret.hash(id), now: date),
            let csrf = form["csrf"], AdminSecret.equal(csrf, session.csrf)
        else {
            return try signInResponse(error: "That sign-out did not come from the monitor page.", status: .forbidden)
        }
        _ = try await storage.takeGrant(.session, hash: session.hash, now: date)
        var response = Response.redirect(to: "/admin/sign-in", type: .normal)
        response.setCookie(Self.cookie(Self.cookieName, "", maxAge: 0))
        return response
    }

    /// Whether a form comes from this server's own pages: its `Origin` (which browsers send with every POST)
    /// names the host the request was sent to.
    static func isSameOrigin(_ request: Request) -> Bool {
        guard let origin = request.headers[.origin], let url = URL(string: origin), let host = url.host,
            let target = request.head.authority ?? request.headers[HTTPField.Name("Host")!]
        else { return false }
        let port = url.port.map { ":\($0)" } ?? ""
        return (host + port).lowercased() == target.lowercased()
            || (url.host.map { "[\($0)]" + port }?.lowercased() == target.lowercased())
    }

    /// The session the cookie names, if it is an organizer's and has not ended.
    private func session(_ request: Request) async throws -> AdminGrant? {
        guard let id = request.cookies[Self.cookieName]?.value, !id.isEmpty,
            let session = try await storage.grant(.session, hash: AdminSecret.hash(id), now: now().milliseconds),
            session.identity.role >= .organizer
        else { return nil }
        return session
    }

    @Sendable func monitor(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        // A malformed address is refused as such, signed in or not.
        let refresh = try Self.refresh(in: request)
        let event = try RequestDecoding.optionalIdentifier("event", in: request)
        guard let session = try await session(request) else {
            return Response.redirect(to: "/admin/sign-in", type: .normal)
        }
        return try await page(refresh: refresh, event: event, session: session)
    }

    private func page(
        refresh: Duration, event: String?, session: AdminGrant, notice: String? = nil, status: HTTPResponse.Status = .ok
    )
        async throws -> Response
    {
        let report = try await load(event: event, identity: session.identity)
        var notifications: EventNotification?
        if let shown = report.event {
            notifications = try await storage.notification(tenant: session.identity.tenant, event: shown)
        }
        return Self.html(
            try templates().page(report, refresh: refresh, csrf: session.csrf, notifications: notifications, notice: notice),
            status: status)
    }

    /// `POST /admin/notifications`: the event's notifications from the monitor's form (its Origin and CSRF token
    /// checked as sign-out's are): `action=set` with `url` and `format`, or `action=stop`.
    @Sendable func setNotifications(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let buffer = try await RequestDecoding.collectBody(of: request, maxBytes: 16 * 1024, timeout: configuration.bodyTimeout)
        let form = AdminForm(String(buffer: buffer))
        guard let session = try await session(request), Self.isSameOrigin(request), let csrf = form["csrf"],
            AdminSecret.equal(csrf, session.csrf)
        else {
            throw OutpostHTTPError.forbidden("that form did not come from the monitor page")
        }
        guard let event = form["event"], Identifier.isValid(event) else {
            throw OutpostHTTPError.badRequest("the event must be an identifier")
        }
        let tenant = session.identity.tenant
        switch form["action"] {
        case "stop":
            _ = try await storage.removeNotification(tenant: tenant, event: event)
            return try await page(refresh: Self.defaultRefresh, event: event, session: session, notice: "Notifications stopped.")
        case "set":
            let url = form["url"] ?? ""
            if let problem = NotificationURL.problem(url: url, allowingLoopback: configuration.allowsLoopbackReceivers) {
                return try await page(
                    refresh: Self.defaultRefresh, event: event, session: session, notice: "Not saved: \(problem).",
                    status: .badRequest)
            }
            // Slack's incoming webhook unless the form names a format; a format it names must be one there is.
            let named = form["format"].flatMap { $0.isEmpty ? nil : $0 }
            guard let format = named.map(NotificationFormat.init(rawValue:)) ?? .slack else {
                return try await page(
                    refresh: Self.defaultRefresh, event: event, session: session, notice: "Not saved: the format must be slack or json.",
                    status: .badRequest)
            }
            try await storage.setNotification(EventNotification(tenant: tenant, event: event, url: url, format: format))
            return try await page(refresh: Self.defaultRefresh, event: event, session: session, notice: "Notifications saved.")
        default:
            throw OutpostHTTPError.badRequest("action must be set or stop")
        }
    }

    @Sendable func fragment(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let refresh = try Self.refresh(in: request)
        let event = try RequestDecoding.optionalIdentifier("event", in: request)
        guard let session = try await session(request) else {
            throw OutpostHTTPError.unauthorized(.unauthorized, "sign in at /admin/sign-in")
        }
        let report = try await load(event: event, identity: session.identity)
        return Self.html(try templates().body(report, refresh: refresh))
    }

    /// A CSV download linked from the monitor: `collection`, within `event` when given (see ``ExportController``).
    @Sendable func export(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let event = try RequestDecoding.optionalIdentifier("event", in: request)
        guard let session = try await session(request) else {
            throw OutpostHTTPError.unauthorized(.unauthorized, "sign in at /admin/sign-in")
        }
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        return try await ExportController.csv(
            policy: policy, scope: event, for: session.identity, storage: storage, gate: gate, logger: context.logger,
            links: try FileLinks.of(configuration, secrets: secrets), now: now())
    }

    private func load(event: String?, identity: Identity) async throws -> MonitorResponse {
        var event = event
        if event == nil {
            event = try await storage.events(tenant: identity.tenant).first?.id
        }
        return try await MonitorReport.load(
            tenant: identity.tenant, event: event, storage: storage, secrets: secrets, relay: configuration.relay, now: now())
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
    /// no referrer to other sites (a sign-in link's code never leaves in one). Within the site the origin is
    /// sent: with `no-referrer` browsers send `Origin: null` on the page's own forms, which the CSRF check refuses.
    static func secure(_ headers: inout HTTPFields) {
        headers[.contentSecurityPolicy] =
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
        headers[.xContentTypeOptions] = "nosniff"
        headers[HTTPField.Name("Referrer-Policy")!] = "same-origin"
    }
}

/// A form's body (`application/x-www-form-urlencoded`): its fields, percent-decoded; the first of a repeated one.
struct AdminForm {
    private var fields: [String: String] = [:]

    init(_ body: String) {
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let name = String(parts[0]).removingPercentEncoding, fields[name] == nil else { continue }
            fields[name] = String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
        }
    }

    subscript(name: String) -> String? { fields[name] }
}

/// The monitor's random secrets (session ids, sign-in codes, CSRF tokens) and how they are stored and compared.
enum AdminSecret {
    /// 32 random bytes, base64url.
    static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Base64URL.encode(bytes)
    }

    /// What is stored of a secret: its SHA-256, hex.
    static func hash(_ secret: String) -> String {
        SHA256.hash(data: Data(secret.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// Compares in time that does not depend on where the two differ.
    static func equal(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count, !x.isEmpty else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

extension Date {
    /// Whole milliseconds since 1970.
    var milliseconds: Int64 { Int64((timeIntervalSince1970 * 1000).rounded(.down)) }

    init(milliseconds: Int64) { self.init(timeIntervalSince1970: Double(milliseconds) / 1000) }
}
