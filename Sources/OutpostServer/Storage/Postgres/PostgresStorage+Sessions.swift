import Foundation
import OutpostProtocol
import PostgresNIO

extension PostgresStorage {
    package func storeGrant(_ grant: AdminGrant, now: Int64) async throws {
        try await committed { connection in
            try await connection.query("DELETE FROM admin_grants WHERE expires_at <= \(now)", logger: logger)
            let identity = grant.identity
            try await connection.query(
                """
                INSERT INTO admin_grants (kind, hash, tenant, user_id, role, name, csrf, expires_at, session_expires_at)
                VALUES (\(grant.kind.rawValue), \(grant.hash), \(identity.tenant), \(identity.userId), \(identity.role.rawValue),
                        \(identity.name), \(grant.csrf), \(grant.expiresAt), \(grant.sessionExpiresAt))
                """, logger: logger)
        }
    }

    package func grant(_ kind: AdminGrant.Kind, hash: String, now: Int64) async throws -> AdminGrant? {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT kind, hash, tenant, user_id, role, name, csrf, expires_at, session_expires_at FROM admin_grants
                WHERE kind = \(kind.rawValue) AND hash = \(hash) AND expires_at > \(now)
                """, logger: logger)
            return try await Self.firstGrant(rows)
        }
    }

    package func takeGrant(_ kind: AdminGrant.Kind, hash: String, now: Int64) async throws -> AdminGrant? {
        try await committed { connection in
            let rows = try await connection.query(
                """
                DELETE FROM admin_grants WHERE kind = \(kind.rawValue) AND hash = \(hash)
                RETURNING kind, hash, tenant, user_id, role, name, csrf, expires_at, session_expires_at
                """, logger: logger)
            guard let grant = try await Self.firstGrant(rows), grant.expiresAt > now else { return nil }
            return grant
        }
    }

    /// The first of `rows` (a grant's hash is its key: there is at most one), read to their end so that the
    /// transaction around them can commit.
    private static func firstGrant(_ rows: PostgresRowSequence) async throws -> AdminGrant? {
        var first: AdminGrant??
        for try await (kind, hash, tenant, user, role, name, csrf, expires, sessionExpires) in rows.decode(
            (String, String, String, String, String, String, String, Int64, Int64).self) where first == nil
        {
            guard let kind = AdminGrant.Kind(rawValue: kind), let role = Role(rawValue: role) else {
                first = .some(nil)
                continue
            }
            first = AdminGrant(
                kind: kind, hash: hash, identity: Identity(tenant: tenant, userId: user, role: role, name: name), csrf: csrf,
                expiresAt: expires, sessionExpiresAt: sessionExpires)
        }
        return first ?? nil
    }
}
