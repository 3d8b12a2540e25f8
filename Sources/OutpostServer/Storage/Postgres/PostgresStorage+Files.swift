import Foundation
import NIOCore
import OutpostProtocol
import PostgresNIO

extension PostgresStorage {
    package func upload(tenant: String, sha256: String) async throws -> FileUpload? {
        try await guarded {
            let rows = try await client.query(
                "SELECT \(unescaped: Self.uploadColumns) FROM files WHERE tenant = \(tenant) AND sha256 = \(sha256)",
                logger: logger)
            return try await Self.uploads(rows).first
        }
    }

    package func appendRange(
        tenant: String, sha256: String, size: Int64, type: String, offset: Int64, bytes: ByteBuffer, at time: Int64
    ) async throws -> RangeAppend {
        try await committed { [logger, files] connection in
            // Committed without waiting for the flush, like the bytes it counts: a count lost with the power is sent
            // again, and the file is complete only once flushed (``FileDirectory``, ``completeUpload``).
            try await connection.query("SET LOCAL synchronous_commit = off", logger: logger)
            let declared = FileUpload(sha256: sha256, size: size, type: type, received: 0, complete: false)
            if offset == 0 {
                try await connection.query(
                    """
                    INSERT INTO files (tenant, sha256, size, type, received, complete, created_at, touched_at)
                    VALUES (\(tenant), \(sha256), \(size), \(type), 0, FALSE, \(time), \(time))
                    ON CONFLICT (tenant, sha256) DO NOTHING
                    """, logger: logger)
            }
            // Locked until the commit: ranges of one upload sent at once are appended one after the other, each
            // to the state the one before left.
            let rows = try await connection.query(
                """
                SELECT \(unescaped: Self.uploadColumns) FROM files WHERE tenant = \(tenant) AND sha256 = \(sha256)
                FOR UPDATE
                """, logger: logger)
            guard let stored = try await Self.uploads(rows).first else { return .refused(declared) }
            guard stored.size == size, stored.type == type, !stored.complete, stored.received == offset else {
                return .refused(stored)
            }
            var began: Int64 = 0
            for try await (created, ) in try await connection.query(
                "SELECT created_at FROM files WHERE tenant = \(tenant) AND sha256 = \(sha256)", logger: logger
            ).decode((Int64,).self) {
                began = created
            }
            guard bytes.readableBytes > 0 else { return .appended(stored, began: began) }
            if let files {
                // Written while the row is locked: one server at a time writes the file, the range the count
                // says comes next.
                do {
                    try await files.appending(bytes, tenant: tenant, sha256: sha256, at: offset)
                } catch  where FileDirectory.isMissingBytes(error) {
                    // The bytes counted are not on disk (or were kept in the database before the directory was
                    // named): the upload starts again from 0.
                    try await connection.query(
                        "DELETE FROM files WHERE tenant = \(tenant) AND sha256 = \(sha256)", logger: logger)
                    try await connection.query(
                        "DELETE FROM file_chunks WHERE tenant = \(tenant) AND sha256 = \(sha256)", logger: logger)
                    return .refused(declared)
                }
            } else {
                try await connection.query(
                    """
                    INSERT INTO file_chunks (tenant, sha256, start, bytes) VALUES (\(tenant), \(sha256), \(offset), \(bytes))
                    """, logger: logger)
            }
            var upload = stored
            upload.received += Int64(bytes.readableBytes)
            try await connection.query(
                """
                UPDATE files SET received = \(upload.received), touched_at = \(time)
                WHERE tenant = \(tenant) AND sha256 = \(sha256)
                """, logger: logger)
            return .appended(upload, began: began)
        }
    }

    package func fileChunk(tenant: String, sha256: String, containing offset: Int64) async throws -> FileChunk? {
        // A file stored before the directory was named is read from the database.
        if let files, let chunk = try await files.read(tenant: tenant, sha256: sha256, at: offset) { return chunk }
        return try await guarded {
            // Ranges follow each other from 0: the one that holds the offset is the last to start at or before it.
            let rows = try await client.query(
                """
                SELECT start, bytes FROM file_chunks WHERE tenant = \(tenant) AND sha256 = \(sha256) AND start <= \(offset)
                ORDER BY start DESC LIMIT 1
                """, logger: logger)
            var chunk: FileChunk?
            for try await (start, bytes) in rows.decode((Int64, ByteBuffer).self) {
                chunk = FileChunk(start: start, bytes: bytes)
            }
            return chunk
        }
    }

    package func completeUpload(tenant: String, sha256: String) async throws -> Bool {
        try await files?.flushing(tenant: tenant, sha256: sha256)
        return try await changedRow(
            """
            UPDATE files SET complete = TRUE WHERE tenant = \(tenant) AND sha256 = \(sha256) AND received = size
            AND NOT complete
            RETURNING sha256
            """)
    }

    package func discardUpload(tenant: String, sha256: String) async throws -> Bool {
        try await committed { [logger, files] connection in
            let deleted = try await connection.query(
                "DELETE FROM files WHERE tenant = \(tenant) AND sha256 = \(sha256) AND NOT complete RETURNING tenant, sha256",
                logger: logger)
            return try await Self.removeBytes(of: deleted, on: connection, files: files, logger: logger) > 0
        }
    }

    package func discardUpload(
        tenant: String, sha256: String, declaredOtherThan size: Int64, type: String, idleSince time: Int64
    ) async throws -> Bool {
        try await committed { [logger, files] connection in
            let deleted = try await connection.query(
                """
                DELETE FROM files WHERE tenant = \(tenant) AND sha256 = \(sha256) AND NOT complete AND touched_at < \(time)
                AND (size <> \(size) OR type <> \(type))
                RETURNING tenant, sha256
                """, logger: logger)
            return try await Self.removeBytes(of: deleted, on: connection, files: files, logger: logger) > 0
        }
    }

    package func discardStaleUploads(before time: Int64) async throws -> Int {
        try await committed { [logger, files] connection in
            let deleted = try await connection.query(
                "DELETE FROM files WHERE NOT complete AND touched_at < \(time) RETURNING tenant, sha256", logger: logger)
            return try await Self.removeBytes(of: deleted, on: connection, files: files, logger: logger)
        }
    }

    /// Removes the bytes of the uploads whose rows `deleted` returns (their tenant and digest), from the table and
    /// the directory, within the deleting transaction; how many there were.
    private static func removeBytes(
        of deleted: PostgresRowSequence, on connection: PostgresConnection, files: FileDirectory?, logger: Logger
    ) async throws -> Int {
        var uploads: [(String, String)] = []
        for try await row in deleted.decode((String, String).self) { uploads.append(row) }
        for (tenant, sha256) in uploads {
            try await connection.query(
                "DELETE FROM file_chunks WHERE tenant = \(tenant) AND sha256 = \(sha256)", logger: logger)
            files?.remove(tenant: tenant, sha256: sha256)
        }
        return uploads.count
    }

    package func storedFileBytes() async throws -> (complete: Int64, unfinished: Int64) {
        try await guarded {
            let rows = try await client.query(
                """
                SELECT COALESCE(SUM(size) FILTER (WHERE complete), 0)::bigint,
                COALESCE(SUM(received) FILTER (WHERE NOT complete), 0)::bigint
                FROM files
                """, logger: logger)
            for try await (complete, unfinished) in rows.decode((Int64, Int64).self) { return (complete, unfinished) }
            return (0, 0)
        }
    }

    package func tenantFileBytes(tenant: String) async throws -> Int64 {
        try await guarded {
            let rows = try await client.query(
                "SELECT COALESCE(SUM(size), 0)::bigint FROM files WHERE tenant = \(tenant)", logger: logger)
            for try await (bytes, ) in rows.decode((Int64,).self) { return bytes }
            return 0
        }
    }

    package func completeFiles(tenant: String, sha256s: [String]) async throws -> [String: FileUpload] {
        guard !sha256s.isEmpty else { return [:] }
        return try await guarded {
            let rows = try await client.query(
                """
                SELECT \(unescaped: Self.uploadColumns) FROM files
                WHERE tenant = \(tenant) AND sha256 = ANY(\(sha256s)::text[]) AND complete
                """, logger: logger)
            return Dictionary(try await Self.uploads(rows).map { ($0.sha256, $0) }, uniquingKeysWith: { first, _ in first })
        }
    }

    private static let uploadColumns = "sha256, size, type, received, complete"

    /// Every upload of `rows`, read to their end so that a transaction around them can go on.
    private static func uploads(_ rows: PostgresRowSequence) async throws -> [FileUpload] {
        var uploads: [FileUpload] = []
        for try await (sha256, size, type, received, complete) in rows.decode((String, Int64, String, Int64, Bool).self) {
            uploads.append(FileUpload(sha256: sha256, size: size, type: type, received: received, complete: complete))
        }
        return uploads
    }
}
