import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

/// The monitor's sessions, through the real router on both engines: kept by the server, opaque, ended by
/// signing out, never a bearer token; sign-in and sign-out only from the server's own page; sign-in links as
/// single-use codes that only ask.
@Suite("Monitor sessions")
struct MonitorSessionTests {
    /// The test client sends every request to `localhost`.
    static let origin = "http://localhost"

    /// A browser of one: the cookies it holds for `/admin`, and what it sends.
    final class Browser: @unchecked Sendable {
        let client: any TestClientProtocol
        var cookies: [String: String] = [:]

        init(_ client: any TestClientProtocol) { self.client = client }

        @discardableResult
        func send(
            _ method: HTTPRequest.Method, _ uri: String, form: String? = nil, origin: String? = MonitorSessionTests.origin
        )
            async throws -> TestResponse
        {
            var headers: HTTPFields = [:]
            if let origin { headers[.origin] = origin }
            if !cookies.isEmpty { headers[.cookie] = cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ") }
            if form != nil { headers[.contentType] = "application/x-www-form-urlencoded" }
            let response = try await client.executeRequest(
                uri: uri, method: method, headers: headers, body: form.map { ByteBuffer(string: $0) })
            for header in response.headers[values: .setCookie] {
                let pair = header.split(separator: ";")[0].split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let (name, value) = (String(pair[0]), String(pair[1]))
                if value.isEmpty || header.contains("Max-Age=0") { cookies[name] = nil } else { cookies[name] = value }
            }
            return response
        }

        /// Opens the sign-in page and returns its form's CSRF token.
        func csrf(_ uri: String = "/admin/sign-in") async throws -> String {
            let page = String(buffer: try await send(.get, uri).body)
            return try #require(Self.field("csrf", in: page))
        }

        static func field(_ name: String, in page: String) -> String? {
            guard let range = page.range(of: #"name="\#(name)" value=""#) else { return nil }
            return String(page[range.upperBound...].prefix { $0 != "\"" })
        }

        func signIn(token: String) async throws -> TestResponse {
            let csrf = try await csrf()
            return try await send(.post, "/admin/session", form: "csrf=\(csrf)&token=\(token)")
        }

        var signedIn: Bool {
            get async throws { try await send(.get, "/admin/monitor").status == .ok }
        }
    }

    static func maxAge(_ response: TestResponse) -> Int? {
        response.headers[values: .setCookie].first { $0.hasPrefix("outpost_session=") }?.split(separator: ";")
            .map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.hasPrefix("Max-Age=") }.flatMap { Int($0.dropFirst(8)) }
    }

    @Test(
        "a session is an opaque id the server keeps: it signs in to the monitor only, and signing out ends it for every copy",
        arguments: StorageKind.allCases)
    func sessionKeptByServer(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let browser = Browser(client)
            let organizer = try await Fixtures.token(user: "olga", role: .organizer, lifetime: .seconds(24 * 3600))
            let signIn = try await browser.signIn(token: organizer)
            #expect(signIn.status == .seeOther || signIn.status == .found)
            #expect(Self.maxAge(signIn) == 8 * 3600)
            let session = try #require(browser.cookies["outpost_session"])
            #expect(session.split(separator: ".").count == 1 && !session.contains(organizer))
            #expect(browser.cookies["outpost_csrf"] == nil)
            #expect(try await browser.signedIn)

            // The cookie is no bearer token.
            #expect(try await client.send(.get, "/v1/monitor", token: session).status == .unauthorized)

            // Signing out needs the page's token; without it the session goes on.
            let page = String(buffer: try await browser.send(.get, "/admin/monitor").body)
            let csrf = try #require(Browser.field("csrf", in: page))
            #expect(try await browser.send(.post, "/admin/sign-out", form: "csrf=wrong").status == .forbidden)
            #expect(try await browser.send(.post, "/admin/sign-out", form: "csrf=\(csrf)", origin: "http://evil.test").status == .forbidden)
            #expect(try await browser.signedIn)
            // A form from another site comes without the session cookie: nothing is cleared either.
            let stranger = try await Browser(client).send(.post, "/admin/sign-out", form: "csrf=\(csrf)", origin: "http://evil.test")
            #expect(stranger.status == .forbidden)
            #expect(!stranger.headers[values: .setCookie].contains { $0.hasPrefix("outpost_session=") })
            let copy = Browser(client)
            copy.cookies = browser.cookies
            #expect(try await browser.send(.post, "/admin/sign-out", form: "csrf=\(csrf)").status == .seeOther)
            // The server forgot the session: a copy of the cookie signs in no more.
            #expect(try await !copy.signedIn)
            #expect(try await !browser.signedIn)
        }
    }

    @Test(
        "signing in only from the server's own page: no Origin, another Origin, no or another CSRF token are refused",
        arguments: StorageKind.allCases)
    func signInOnlyFromOwnPage(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer)
            let browser = Browser(client)
            let csrf = try await browser.csrf()
            for (form, origin) in [
                ("csrf=\(csrf)&token=\(organizer)", nil),
                ("csrf=\(csrf)&token=\(organizer)", "http://evil.test"),
                ("csrf=\(csrf)&token=\(organizer)", "http://localhost.evil.test"),
                ("token=\(organizer)", Self.origin),
                ("csrf=other&token=\(organizer)", Self.origin),
            ] {
                let response = try await browser.send(.post, "/admin/session", form: form, origin: origin)
                #expect(response.status == .forbidden, "\(form) from \(origin ?? "nowhere")")
                #expect(browser.cookies["outpost_session"] == nil)
            }
            // A form from another site carries no CSRF cookie of this one.
            let stranger = Browser(client)
            #expect(try await stranger.send(.post, "/admin/session", form: "csrf=\(csrf)&token=\(organizer)").status == .forbidden)
            // A staff token is refused even from the page.
            #expect(try await Browser(client).signIn(token: try await Fixtures.token()).status == .forbidden)
            #expect(try await browser.signIn(token: organizer).status == .seeOther)
        }
    }

    @Test("a session never outlives the token it started from, and ends on time", arguments: StorageKind.allCases)
    func sessionLifetime(kind: StorageKind) async throws {
        let clock = ManualNow(Fixtures.serverNow.date)
        try await withServer(kind, now: { clock.date }) { client, _ in
            let browser = Browser(client)
            let short = try await TokenAuthority(secret: Fixtures.secret).token(
                for: Identity(tenant: "acme", userId: "olga", role: .organizer, name: "Olga"), lifetime: .seconds(1800), now: clock.date)
            #expect(Self.maxAge(try await browser.signIn(token: short)) == 1800)
            #expect(try await browser.signedIn)
            clock.advance(seconds: 1801)
            #expect(try await !browser.signedIn)
        }
    }

    @Test(
        "a sign-in link is a code for organizers that only asks; its form uses it once, within five minutes",
        arguments: StorageKind.allCases)
    func signInCodes(kind: StorageKind) async throws {
        let clock = ManualNow(Fixtures.serverNow.date)
        try await withServer(kind, now: { clock.date }) { client, _ in
            let organizer = try await Fixtures.token(user: "olga", role: .organizer, name: "Olga", lifetime: .seconds(3600))
            #expect(try await client.send(.post, "/v1/sign-in-codes", token: try await Fixtures.token()).status == .forbidden)
            func code() async throws -> SignInCode {
                let response = try await client.send(.post, "/v1/sign-in-codes", token: organizer)
                #expect(response.status == .created)
                return try JSONDecoder().decode(SignInCode.self, from: response.body)
            }
            let link = try await code()
            #expect(link.path == "/admin/session?code=\(link.code)")
            #expect(link.expiresAt.date == clock.date.addingTimeInterval(300))

            // Opening the link signs nobody in: it asks, and its form carries the code.
            let browser = Browser(client)
            let question = try await browser.send(.get, link.path)
            #expect(question.status == .ok)
            let page = String(buffer: question.body)
            #expect(page.contains("sync-monitor-confirm") && page.contains("Olga") && page.contains("acme"))
            #expect(browser.cookies["outpost_session"] == nil)
            let csrf = try #require(Browser.field("csrf", in: page))
            #expect(Browser.field("code", in: page) == link.code)
            let signedIn = try await browser.send(.post, "/admin/session", form: "csrf=\(csrf)&code=\(link.code)")
            #expect(signedIn.status == .seeOther)
            #expect(Self.maxAge(signedIn) == 3600)
            #expect(try await browser.signedIn)

            // Used once.
            let other = Browser(client)
            let again = try await other.send(.post, "/admin/session", form: "csrf=\(try await other.csrf())&code=\(link.code)")
            #expect(again.status == .unauthorized)
            #expect(try await other.send(.get, link.path).status == .unauthorized)
            // Within five minutes.
            let late = try await code()
            clock.advance(seconds: 301)
            let expired = Browser(client)
            #expect(
                try await expired.send(.post, "/admin/session", form: "csrf=\(try await expired.csrf())&code=\(late.code)").status == .unauthorized)
            #expect(try await !expired.signedIn)
        }
    }
}
