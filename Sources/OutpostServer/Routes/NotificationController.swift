import Foundation
import Hummingbird
import OutpostProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// `PUT`, `GET` and `DELETE /v1/events/{event}/notifications` (organizers): where the event's organizer hears
/// that a device has not synced for 30 minutes, is back, or holds records failing for a day (``NotificationWatch``).
struct NotificationController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration

    /// What `PUT` takes and `GET` gives: `url`, and `format` when given (never null); nothing else.
    struct Setting: Codable {
        var url: String
        var format: NotificationFormat?

        init(url: String, format: NotificationFormat?) {
            self.url = url
            self.format = format
        }

        private struct Member: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: any Decoder) throws {
            let members = try decoder.container(keyedBy: Member.self)
            if let unknown = members.allKeys.first(where: { !["url", "format"].contains($0.stringValue) }) {
                throw DecodingError.dataCorruptedError(
                    forKey: unknown, in: members, debugDescription: "a notification setting has url and format only")
            }
            url = try members.decode(String.self, forKey: Member(stringValue: "url"))
            let format = Member(stringValue: "format")
            self.format = members.contains(format) ? try members.decode(NotificationFormat.self, forKey: format) : nil
        }

        func encode(to encoder: any Encoder) throws {
            var members = encoder.container(keyedBy: Member.self)
            try members.encode(url, forKey: Member(stringValue: "url"))
            try members.encodeIfPresent(format, forKey: Member(stringValue: "format"))
        }
    }

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.put("events/:event/notifications", use: set)
        group.get("events/:event/notifications", use: get)
        group.delete("events/:event/notifications", use: remove)
    }

    @Sendable func set(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (identity, event) = try organizer(context)
        let setting = try await RequestDecoding.decodeBody(
            Setting.self, from: request, maxBytes: 16 * 1024, timeout: configuration.bodyTimeout)
        if let problem = NotificationURL.problem(url: setting.url, allowingLoopback: configuration.allowsLoopbackReceivers) {
            throw OutpostHTTPError.badRequest(problem)
        }
        let notification = EventNotification(
            tenant: identity.tenant, event: event, url: setting.url, format: setting.format ?? .json)
        try await storage.setNotification(notification)
        return try .json(Setting(url: notification.url, format: notification.format))
    }

    @Sendable func get(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (identity, event) = try organizer(context)
        guard let notification = try await storage.notification(tenant: identity.tenant, event: event) else {
            throw OutpostHTTPError(.notFound, .notFound, "event \(event) sends no notifications")
        }
        return try .json(Setting(url: notification.url, format: notification.format))
    }

    @Sendable func remove(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (identity, event) = try organizer(context)
        guard try await storage.removeNotification(tenant: identity.tenant, event: event) else {
            throw OutpostHTTPError(.notFound, .notFound, "event \(event) sends no notifications")
        }
        return Response(status: .noContent)
    }

    private func organizer(_ context: OutpostRequestContext) throws -> (Identity, String) {
        let identity = try context.requireIdentity()
        try identity.require(.organizer)
        guard let event = context.parameters.get("event")?.removingPercentEncoding, Identifier.isValid(event) else {
            throw OutpostHTTPError.badRequest("the event must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        return (identity, event)
    }
}

/// The URLs notifications and connectors go to.
enum NotificationURL {
    /// What such a URL must be, as openapi.yaml says it: https to a host name, whose last label starts with a letter
    /// (an address is not a name: certificates name hosts), or http to this machine (which the server refuses unless
    /// started with `--allow-loopback-receivers`); a port; a path of plain characters (no query: a secret belongs in
    /// the path, as chat webhooks put it).
    static let urlPattern =
        "^(https://([A-Za-z0-9-]+\\.)*[A-Za-z][A-Za-z0-9-]*|http://(127\\.0\\.0\\.1|localhost|\\[::1\\]))(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(/[A-Za-z0-9._~%/+=-]*)?$"

    /// Why `url` cannot receive notifications or batches, or nil. An organizer must not make the server reach into
    /// its own network: http (to this machine) only when `allowingLoopback`, and no https to a private, link-local or
    /// loopback IPv4 address, in any of the forms an address can be written in (`127.1`, `2130706433`, `0x7f.1`).
    /// A name that resolves to such an address is refused when the server connects (``ReceiverClient``).
    static func problem(url text: String, allowingLoopback: Bool) -> String? {
        guard text.count <= 2048, (try? Regex(urlPattern).wholeMatch(in: text)) != nil else {
            return "url must be https to a host name (http only to this machine), with a plain path, at most 2048 characters"
        }
        if text.hasPrefix("http://"), !allowingLoopback {
            return "url must be https: this server takes no http receivers on its own machine"
        }
        if text.hasPrefix("https://"), let host = URL(string: text)?.host?.lowercased(),
            isInternal(host) || host == "localhost" || host.hasSuffix(".localhost")
        {
            return "url must not name a private, link-local or loopback address"
        }
        return nil
    }

    /// Whether `host` is an IPv4 address, written in any form `inet_aton` reads, in 0/8, 10/8, 100.64/10 (shared),
    /// 127/8, 169.254/16, 172.16/12, 192.168/16, or 224/4 and above (multicast and reserved).
    static func isInternal(_ host: String) -> Bool {
        var address = in_addr()
        guard inet_aton(host, &address) != 0 else { return false }
        let value = UInt32(bigEndian: address.s_addr)
        let (a, b) = (value >> 24, (value >> 16) & 0xFF)
        return a == 0 || a == 10 || (a == 100 && (64...127).contains(b)) || a == 127 || (a == 169 && b == 254)
            || (a == 172 && (16...31).contains(b)) || (a == 192 && b == 168) || a >= 224
    }
}
