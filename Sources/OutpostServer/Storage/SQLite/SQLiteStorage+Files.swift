import Foundation
import GRDB
import NIOCore
import OutpostProtocol

extension SQLiteStorage {
    package func upload(tenant: String, sha256: String) async throws -> FileUpload? {
        try await pool.read { db in try Self.upload(tenant: tenant, sha256: sha256, db: db) }
    }

    package func appendRange(
        tenant: String, sha256: String, size: Int64, type: String, offset: Int64, bytes: ByteBuffer, at time: Int64
    ) async throws -> RangeAppend {
        // The writer runs one transaction at a time: the state read here is the one the range is appended to.
        try await pool.write { db in
            let declared = FileUpload(sha256: sha256, size: size, type: type, received: 0, complete: false)
            guard let stored = try Self.upload(tenant: tenant, sha256: sha256, db: db) else {
                guard offset == 0 else { return .refused(declared) }
                try db.execute(
                    sql: """
                        INSERT INTO files (tenant, sha256, size, type, received, complete, created_at)
                        VALUES (?, ?, ?, ?, 0, 0, ?)
                        """, arguments: [tenant, sha256, size, type, time])
                return .appended(try Self.append(bytes, to: declared, tenant: tenant, db: db))
            }
            guard stored.size == size, stored.type == type, !stored.complete, stored.received == offset else {
                return .refused(stored)
            }
            return .appended(try Self.append(bytes, to: stored, tenant: tenant, db: db))
        }
    }

    package func fileChunk(tenant: String, sha256: String, containing offset: Int64) async throws -> FileChunk? {
        try await pool.read { db in
            // Ranges follow each other from 0: the one that holds the offset is the last to start at or before it.
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT start, bytes FROM file_chunks WHERE tenant = ? AND sha256 = ? AND start <= ?
                    ORDER BY start DESC LIMIT 1
                    """, arguments: [tenant, sha256, offset])
            guard let row = try rows.next() else { return nil }
            // Copied once, from SQLite's buffer into the chunk's.
            let bytes = try row.withUnsafeData(atIndex: 1) { data in ByteBuffer(bytes: data ?? Data()) }
            return FileChunk(start: row[0], bytes: bytes)
        }
    }

    package func completeUpload(tenant: String, sha256: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE files SET complete = 1 WHERE tenant = ? AND sha256 = ? AND received = size",
                arguments: [tenant, sha256])
            return db.changesCount > 0
        }
    }

    package func discardUpload(tenant: String, sha256: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM files WHERE tenant = ? AND sha256 = ? AND NOT complete", arguments: [tenant, sha256])
            guard db.changesCount > 0 else { return false }
            try db.execute(sql: "DELETE FROM file_chunks WHERE tenant = ? AND sha256 = ?", arguments: [tenant, sha256])
            return true
        }
    }

    package func completeFiles(tenant: String, sha256s: [String]) async throws -> [String: FileUpload] {
        guard !sha256s.isEmpty else { return [:] }
        return try await pool.read { db in
            let placeholders = Array(repeating: "?", count: sha256s.count).joined(separator: ", ")
            var arguments: StatementArguments = [tenant]
            arguments += StatementArguments(sha256s)
            var found: [String: FileUpload] = [:]
            for row in try Row.fetchAll(
                db,
                sql: "SELECT \(Self.uploadColumns) FROM files WHERE tenant = ? AND sha256 IN (\(placeholders)) AND complete",
                arguments: arguments)
            {
                let upload = Self.upload(row)
                found[upload.sha256] = upload
            }
            return found
        }
    }

    /// Stores `bytes` as the range of `upload` at its end, and counts them received.
    private static func append(_ bytes: ByteBuffer, to upload: FileUpload, tenant: String, db: Database) throws -> FileUpload {
        guard bytes.readableBytes > 0 else { return upload }
        // Bound as they are: SQLite copies a blob argument as it binds it.
        try bytes.withUnsafeReadableBytes { raw in
            let data = Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: raw.baseAddress!), count: raw.count, deallocator: .none)
            try db.execute(
                sql: "INSERT INTO file_chunks (tenant, sha256, start, bytes) VALUES (?, ?, ?, ?)",
                arguments: [tenant, upload.sha256, upload.received, data])
        }
        var upload = upload
        upload.received += Int64(bytes.readableBytes)
        try db.execute(
            sql: "UPDATE files SET received = ? WHERE tenant = ? AND sha256 = ?",
            arguments: [upload.received, tenant, upload.sha256])
        return upload
    }

    private static func upload(tenant: String, sha256: String, db: Database) throws -> FileUpload? {
        try Row.fetchOne(
            db, sql: "SELECT \(uploadColumns) FROM files WHERE tenant = ? AND sha256 = ?", arguments: [tenant, sha256]
        ).map(upload)
    }

    private static let uploadColumns = "sha256, size, type, received, complete"

    private static func upload(_ row: Row) -> FileUpload {
        FileUpload(
            sha256: row["sha256"], size: row["size"], type: row["type"], received: row["received"], complete: row["complete"])
    }
}
