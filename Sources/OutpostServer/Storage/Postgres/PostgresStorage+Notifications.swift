import Foundation
import PostgresNIO

extension PostgresStorage {
    package func setNotification(_ notification: EventNotification) async throws {
        try await committed { connection in
            try await connection.query(
                """
                INSERT INTO event_notifications (tenant, event, url, format)
                VALUES (\(notification.tenant), \(notification.event), \(notification.url), \(notification.format.rawValue))
                ON CONFLICT (tenant, event) DO UPDATE SET url = excluded.url, format = excluded.format
                """, logger: logger)
        }
    }

    package func removeNotification(tenant: String, event: String) async throws -> Bool {
        try await changedRow("DELETE FROM event_notifications WHERE tenant = \(tenant) AND event = \(event) RETURNING event")
    }

    package func notification(tenant: String, event: String) async throws -> EventNotification? {
        try await guarded {
            let rows = try await client.query(
                "SELECT tenant, event, url, format FROM event_notifications WHERE tenant = \(tenant) AND event = \(event)",
                logger: logger)
            return try await Self.notifications(rows).first
        }
    }

    package func allNotifications() async throws -> [EventNotification] {
        try await guarded {
            let rows = try await client.query(
                "SELECT tenant, event, url, format FROM event_notifications ORDER BY tenant, event", logger: logger)
            return try await Self.notifications(rows)
        }
    }

    package func openEpisode(
        tenant: String, event: String, fingerprint: String, kind: EpisodeKind, at time: Int64
    ) async throws
        -> Bool
    {
        try await changedRow(
            """
            INSERT INTO notification_episodes (tenant, event, fingerprint, kind, opened_at)
            VALUES (\(tenant), \(event), \(fingerprint), \(kind.rawValue), \(time))
            ON CONFLICT DO NOTHING RETURNING kind
            """)
    }

    package func closeEpisode(tenant: String, event: String, fingerprint: String, kind: EpisodeKind) async throws -> Bool {
        try await changedRow(
            """
            DELETE FROM notification_episodes
            WHERE tenant = \(tenant) AND event = \(event) AND fingerprint = \(fingerprint) AND kind = \(kind.rawValue)
            RETURNING kind
            """)
    }

    private static func notifications(_ rows: PostgresRowSequence) async throws -> [EventNotification] {
        var found: [EventNotification] = []
        for try await (tenant, event, url, format) in rows.decode((String, String, String, String).self) {
            guard let format = NotificationFormat(rawValue: format) else { continue }
            found.append(EventNotification(tenant: tenant, event: event, url: url, format: format))
        }
        return found
    }
}
