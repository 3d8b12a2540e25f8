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
        // The writer runs one transaction at a time: the state read here is the one the range is appended to, and
        // the file is written by one range at a time.
        try await pool.writeWithoutTransaction { db in
            // Counted without a flush, like the bytes it counts (see ``FileDirectory``): a flush here would also
            // flush the file's bytes (ext4 writes a file's new blocks before the journal that names them), at every
            // range. A count lost with the power is sent again; the file is flushed before it is complete.
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            defer { try? db.execute(sql: "PRAGMA synchronous = FULL") }
            var outcome: RangeAppend?
            try db.inTransaction(.immediate) {
                outcome = try appendRange(
                    tenant: tenant, sha256: sha256, size: size, type: type, offset: offset, bytes: bytes, at: time, db: db)
                return .commit
            }
            return outcome!
        }
    }

    private func appendRange(
        tenant: String, sha256: String, size: Int64, type: String, offset: Int64, bytes: ByteBuffer, at time: Int64,
        db: Database
    ) throws -> RangeAppend {
        let declared = FileUpload(sha256: sha256, size: size, type: type, received: 0, complete: false)
        guard let stored = try Self.upload(tenant: tenant, sha256: sha256, db: db) else {
            guard offset == 0 else { return .refused(declared) }
            try db.execute(
                sql: """
                    INSERT INTO files (tenant, sha256, size, type, received, complete, created_at, touched_at)
                    VALUES (?, ?, ?, ?, 0, 0, ?, ?)
                    """, arguments: [tenant, sha256, size, type, time, time])
            return .appended(try append(bytes, to: declared, tenant: tenant, at: time, db: db), began: time)
        }
        guard stored.size == size, stored.type == type, !stored.complete, stored.received == offset else {
            return .refused(stored)
        }
        let began =
            try Int64.fetchOne(
                db, sql: "SELECT created_at FROM files WHERE tenant = ? AND sha256 = ?", arguments: [tenant, sha256]) ?? 0
        do {
            return .appended(try append(bytes, to: stored, tenant: tenant, at: time, db: db), began: began)
        } catch  where FileDirectory.isMissingBytes(error) {
            // The bytes counted are not on disk: the upload starts again from 0.
            try db.execute(sql: "DELETE FROM files WHERE tenant = ? AND sha256 = ?", arguments: [tenant, sha256])
            return .refused(declared)
        }
    }

    package func fileChunk(tenant: String, sha256: String, containing offset: Int64) async throws -> FileChunk? {
        try await files.read(tenant: tenant, sha256: sha256, at: offset)
    }

    /// Moves the bytes of files a store kept in its database (table `file_chunks`, made by migration `v11-files`)
    /// to the file directory, then drops the table: once, on the first start that keeps them in a directory.
    func moveFileChunks() async throws {
        try await pool.write { [files] db in
            guard try db.tableExists("file_chunks") else { return }
            let rows = try Row.fetchCursor(
                db, sql: "SELECT tenant, sha256, start, bytes FROM file_chunks ORDER BY tenant, sha256, start")
            var moved: Set<[String]> = []
            while let row = try rows.next() {
                let bytes = try row.withUnsafeData(atIndex: 3) { data in ByteBuffer(bytes: data ?? Data()) }
                try files.append(bytes, tenant: row[0], sha256: row[1], at: row[2])
                moved.insert([row[0], row[1]])
            }
            for file in moved { try files.flush(tenant: file[0], sha256: file[1]) }
            try db.execute(sql: "DROP TABLE file_chunks")
        }
    }

    package func completeUpload(tenant: String, sha256: String) async throws -> Bool {
        try await files.flushing(tenant: tenant, sha256: sha256)
        return try await pool.write { db in
            try db.execute(
                sql: "UPDATE files SET complete = 1 WHERE tenant = ? AND sha256 = ? AND received = size AND NOT complete",
                arguments: [tenant, sha256])
            return db.changesCount > 0
        }
    }

    package func discardUpload(tenant: String, sha256: String) async throws -> Bool {
        try await pool.write { [files] db in
            try db.execute(
                sql: "DELETE FROM files WHERE tenant = ? AND sha256 = ? AND NOT complete", arguments: [tenant, sha256])
            guard db.changesCount > 0 else { return false }
            files.remove(tenant: tenant, sha256: sha256)
            return true
        }
    }

    package func discardUpload(
        tenant: String, sha256: String, declaredOtherThan size: Int64, type: String, idleSince time: Int64
    ) async throws -> Bool {
        try await pool.write { [files] db in
            try db.execute(
                sql: """
                    DELETE FROM files WHERE tenant = ? AND sha256 = ? AND NOT complete AND touched_at < ?
                    AND (size <> ? OR type <> ?)
                    """, arguments: [tenant, sha256, time, size, type])
            guard db.changesCount > 0 else { return false }
            files.remove(tenant: tenant, sha256: sha256)
            return true
        }
    }

    package func discardStaleUploads(before time: Int64) async throws -> Int {
        try await pool.write { [files] db in
            let stale = try Row.fetchAll(
                db, sql: "DELETE FROM files WHERE NOT complete AND touched_at < ? RETURNING tenant, sha256", arguments: [time])
            for row in stale { files.remove(tenant: row[0], sha256: row[1]) }
            return stale.count
        }
    }

    package func storedFileBytes() async throws -> (complete: Int64, unfinished: Int64) {
        try await pool.read { db in
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT COALESCE(SUM(CASE WHEN complete THEN size END), 0), COALESCE(SUM(CASE WHEN NOT complete THEN received END), 0)
                    FROM files
                    """)
            return (row?[0] ?? 0, row?[1] ?? 0)
        }
    }

    package func tenantFileBytes(tenant: String) async throws -> Int64 {
        try await pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT COALESCE(SUM(size), 0) FROM files WHERE tenant = ?", arguments: [tenant]) ?? 0
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

    /// Writes `bytes` on the file at the end of `upload` and counts them received, on the writer's queue: one
    /// range at a time goes on the file, the one the count says comes next.
    private func append(
        _ bytes: ByteBuffer, to upload: FileUpload, tenant: String, at time: Int64, db: Database
    ) throws -> FileUpload {
        guard bytes.readableBytes > 0 else { return upload }
        try files.append(bytes, tenant: tenant, sha256: upload.sha256, at: upload.received)
        var upload = upload
        upload.received += Int64(bytes.readableBytes)
        try db.execute(
            sql: "UPDATE files SET received = ?, touched_at = ? WHERE tenant = ? AND sha256 = ?",
            arguments: [upload.received, time, tenant, upload.sha256])
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
