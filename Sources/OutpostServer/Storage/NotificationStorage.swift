import Foundation
import OutpostProtocol

/// How a notification's body is written: Outpost's JSON, or a chat's incoming-webhook message.
package enum NotificationFormat: String, Sendable, Hashable, Codable {
    /// `{"type", "event", "device", "staff", "text", "at"}`.
    case json
    /// `{"text"}`: a Slack (or Mattermost, Rocket.Chat) incoming webhook.
    case slack
}

/// Where an event's organizer hears about its devices: kept on the server, never in the event's record, since a
/// chat's webhook URL is itself a credential.
package struct EventNotification: Sendable, Hashable {
    package var tenant: String
    package var event: String
    package var url: String
    package var format: NotificationFormat

    package init(tenant: String, event: String, url: String, format: NotificationFormat) {
        self.tenant = tenant
        self.event = event
        self.url = url
        self.format = format
    }
}

/// What an open episode is about: a device silent for too long, or holding records that failed for too long.
package enum EpisodeKind: String, Sendable, Hashable {
    case stale
    case persistentFailure = "persistent_failure"
}

/// Events' notification settings, and the episodes already announced: an episode row is claimed by the one
/// server process that announces it, so several servers on one database send each notice once.
package protocol NotificationStorage: Sendable {
    func setNotification(_ notification: EventNotification) async throws
    /// False when the event had none.
    func removeNotification(tenant: String, event: String) async throws -> Bool
    func notification(tenant: String, event: String) async throws -> EventNotification?
    /// Every event's settings, of every tenant: what the watch goes through.
    func allNotifications() async throws -> [EventNotification]
    /// Opens an episode; true when this call opened it (and must announce it), false when it was open.
    func openEpisode(tenant: String, event: String, fingerprint: String, kind: EpisodeKind, at time: Int64) async throws -> Bool
    /// Closes an episode; true when this call closed an open one (and must announce its end).
    func closeEpisode(tenant: String, event: String, fingerprint: String, kind: EpisodeKind) async throws -> Bool
}
