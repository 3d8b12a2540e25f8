import Foundation
import GRDB
import OutpostProtocol

extension SQLiteStorage {
    package func storeGrant(_ grant: AdminGrant, now: Int64) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM admin_grants WHERE expires_at <= ?", arguments: [now])
            try db.execute(
                sql: """
                    INSERT INTO admin_grants (kind, hash, tenant, user_id, role, name, csrf, expires_at, session_expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    grant.kind.rawValue, grant.hash, grant.identity.tenant, grant.identity.userId, grant.identity.role.rawValue,
                    grant.identity.name, grant.csrf, grant.expiresAt, grant.sessionExpiresAt,
                ])
        }
    }

    package func grant(_ kind: AdminGrant.Kind, hash: String, now: Int64) async throws -> AdminGrant? {
        try await pool.read { db in
            try Row.fetchOne(
                db, sql: "SELECT * FROM admin_grants WHERE kind = ? AND hash = ? AND expires_at > ?",
                arguments: [kind.rawValue, hash, now]
            ).flatMap(Self.grant)
        }
    }

    package func takeGrant(_ kind: AdminGrant.Kind, hash: String, now: Int64) async throws -> AdminGrant? {
        try await pool.write { db in
            let row = try Row.fetchOne(
                db, sql: "DELETE FROM admin_grants WHERE kind = ? AND hash = ? RETURNING *", arguments: [kind.rawValue, hash])
            guard let row, let grant = Self.grant(row), grant.expiresAt > now else { return nil }
            return grant
        }
    }

    private static func grant(_ row: Row) -> AdminGrant? {
        guard let kind = AdminGrant.Kind(rawValue: row["kind"]), let role = Role(rawValue: row["role"]) else { return nil }
        return AdminGrant(
            kind: kind, hash: row["hash"],
            identity: Identity(tenant: row["tenant"], userId: row["user_id"], role: role, name: row["name"]), csrf: row["csrf"],
            expiresAt: row["expires_at"], sessionExpiresAt: row["session_expires_at"])
    }
}
