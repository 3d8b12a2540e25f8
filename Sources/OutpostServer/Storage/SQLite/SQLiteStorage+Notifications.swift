import Foundation
import GRDB

extension SQLiteStorage {
    package func setNotification(_ notification: EventNotification) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO event_notifications (tenant, event, url, format) VALUES (?, ?, ?, ?)
                    ON CONFLICT (tenant, event) DO UPDATE SET url = excluded.url, format = excluded.format
                    """,
                arguments: [notification.tenant, notification.event, notification.url, notification.format.rawValue])
        }
    }

    package func removeNotification(tenant: String, event: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM event_notifications WHERE tenant = ? AND event = ?", arguments: [tenant, event])
            return db.changesCount > 0
        }
    }

    package func notification(tenant: String, event: String) async throws -> EventNotification? {
        try await pool.read { db in
            try Row.fetchOne(
                db, sql: "SELECT * FROM event_notifications WHERE tenant = ? AND event = ?", arguments: [tenant, event]
            ).flatMap(Self.notification)
        }
    }

    package func allNotifications() async throws -> [EventNotification] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM event_notifications ORDER BY tenant, event").compactMap(Self.notification)
        }
    }

    package func openEpisode(
        tenant: String, event: String, fingerprint: String, kind: EpisodeKind, at time: Int64
    ) async throws
        -> Bool
    {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO notification_episodes (tenant, event, fingerprint, kind, opened_at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT DO NOTHING
                    """, arguments: [tenant, event, fingerprint, kind.rawValue, time])
            return db.changesCount > 0
        }
    }

    package func closeEpisode(tenant: String, event: String, fingerprint: String, kind: EpisodeKind) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM notification_episodes WHERE tenant = ? AND event = ? AND fingerprint = ? AND kind = ?",
                arguments: [tenant, event, fingerprint, kind.rawValue])
            return db.changesCount > 0
        }
    }

    private static func notification(_ row: Row) -> EventNotification? {
        guard let format = NotificationFormat(rawValue: row["format"]) else { return nil }
        return EventNotification(tenant: row["tenant"], event: row["event"], url: row["url"], format: format)
    }
}
