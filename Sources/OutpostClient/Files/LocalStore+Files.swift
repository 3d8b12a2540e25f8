import Crypto
import Foundation
import GRDB
import OutpostProtocol

/// The files records carry (``FileReference``), sealed on the device: attached with a local write, read back a
/// range at a time for their upload, and downloaded on demand.
extension LocalStore {
    /// The size of the chunks a file's bytes are sealed and stored in: a read for an upload or a screen opens
    /// only the chunks it needs.
    package static let fileChunkBytes = 512 * 1024

    /// Stores `file`, named by `field` of `record`, within a local write's transaction: its bytes are read
    /// again, sealed chunk by chunk and checked against the digest the write names, so that the record and
    /// its file are committed together or not at all. A file the device already holds whole is not stored twice.
    ///
    /// - Throws: ``ClientError`` `invalidInput` when the file changed since it was staged.
    static func storeAttached(
        _ file: StagedFile, field: String, of record: RecordKey, at time: Int64, sealer: Sealer, _ db: Database
    ) throws {
        let reference = file.reference
        if var existing = try FileRow.find(reference.sha256, db), existing.isWhole {
            if existing.uploadState == .refused {
                // Attached again: it is tried again, under the collection's limits as they are now.
                existing.uploadState = .pending
                existing.uploadError = nil
            }
            existing.usedAt = time
            try existing.update(db)
        } else {
            try FileChunks.deleteAll(reference.sha256, db)
            var hasher = SHA256()
            var start: Int64 = 0
            try StagedFile.forEachPiece(of: file.source) { piece in
                hasher.update(data: piece)
                try FileChunks.insert(reference.sha256, start: start, bytes: piece, sealer: sealer, db)
                start += Int64(piece.count)
            }
            guard start == reference.size, hasher.finalize().hexString == reference.sha256 else {
                throw ClientError(.invalidInput, "the file changed while it was being saved; attach it again")
            }
            var row = FileRow(reference: reference, state: .pending, at: time)
            row.stored = reference.size
            try row.save(db)
        }
        try FileUses.insert(reference.sha256, field: field, of: record, db)
    }

    /// The file `sha256` as the device holds it, or nil.
    func file(_ sha256: String) async throws -> FileRow? {
        try await perform { try await read { db in try FileRow.find(sha256, db) } }
    }

    /// The opened chunks of the file `sha256` that start from `offset` (a chunk's start) up to `count` bytes later,
    /// each as it is stored: an upload reads several at a time, none copied into another.
    func fileChunks(_ sha256: String, from offset: Int64, count: Int) async throws -> [Data] {
        let sealer = self.sealer
        return try await perform {
            try await read { db in try FileChunks.chunks(sha256, from: offset, count: count, sealer: sealer, db) }
        }
    }

    /// At most `count` bytes of the file `sha256` from `offset`, opened.
    func fileBytes(_ sha256: String, from offset: Int64, count: Int) async throws -> Data {
        let sealer = self.sealer
        return try await perform {
            try await read { db in try FileChunks.bytes(sha256, from: offset, count: count, sealer: sealer, db) }
        }
    }

    /// Records what the server said of the upload of `sha256`.
    func noteUpload(_ upload: FileUpload) async throws {
        try await perform {
            try await writeUnflushed { db in
                guard var row = try FileRow.find(upload.sha256, db), row.uploadState == .pending else { return }
                row.uploaded = upload.complete ? row.size : upload.received
                if upload.complete { row.uploadState = .uploaded }
                try row.update(db)
            }
        }
    }

    /// Records that the server refused the file `sha256`, and why: it is not sent again until attached again.
    func noteUploadRefused(_ sha256: String, reason: String) async throws {
        try await perform {
            try await writeUnflushed { db in
                guard var row = try FileRow.find(sha256, db), row.uploadState == .pending else { return }
                row.uploadState = .refused
                row.uploadError = reason
                try row.update(db)
            }
        }
    }

    /// Makes the files `record` names that the server refused wait to upload again.
    func retryRefusedFiles(of record: RecordKey) async throws {
        try await perform {
            try await writeUnflushed { db in
                try db.execute(
                    sql: """
                        UPDATE files SET upload_state = 'pending', upload_error = NULL
                        WHERE upload_state = 'refused' AND sha256 IN (
                          SELECT sha256 FROM file_uses WHERE collection = ? AND scope = ? AND record_id = ?)
                        """, arguments: [record.collection, record.scope, record.recordId])
            }
        }
    }

    /// Whether the store holds any file.
    func holdsFiles() async throws -> Bool {
        try await perform { try await read { db in try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM files)") ?? false } }
    }

    /// The bytes of attached files that still wait to upload, counted for records that wait to sync.
    package func pendingUploadBytes() async throws -> Int64 {
        try await perform {
            try await read { db in
                try Int64.fetchOne(
                    db,
                    sql: """
                        SELECT COALESCE(SUM(f.size - f.uploaded), 0) FROM files f
                        WHERE f.upload_state = 'pending' AND EXISTS (
                          SELECT 1 FROM file_uses u JOIN records r
                            ON r.collection = u.collection AND r.scope = u.scope AND r.record_id = u.record_id
                          WHERE u.sha256 = f.sha256 AND r.sync_status IN ('pending', 'failed'))
                        """) ?? 0
            }
        }
    }

    // MARK: Downloads

    /// Starts or resumes keeping `reference` on the device, used `at` that time: the bytes already stored, from
    /// the start.
    func beginDownload(_ reference: FileReference, at time: Date) async throws -> Int64 {
        let time = Timestamp(time).millisecondsSince1970
        return try await perform {
            try await writeUnflushed { db in
                if var row = try FileRow.find(reference.sha256, db) {
                    row.usedAt = time
                    try row.update(db)
                    return row.stored
                }
                try FileRow(reference: reference, state: .remote, at: time).insert(db)
                return 0
            }
        }
    }

    /// Gives back the bytes of files the server holds, least recently used first, until those the device keeps
    /// come to at most `limit`: their rows stay, and a screen that asks for one downloads it again. Never those of
    /// a file a record that waits to sync (or that the server refused) names, which the device may need to send,
    /// of one not yet whole (a download on its way), nor of one used since `usedSince` (milliseconds since 1970),
    /// which a screen may be reading. The bytes given back.
    @discardableResult
    package func releaseFileBytes(keeping limit: Int64, usedSince: Int64) async throws -> Int64 {
        let kept = "SELECT COALESCE(SUM(stored), 0) FROM files WHERE upload_state IN ('uploaded', 'remote')"
        let candidates = """
            SELECT sha256, stored FROM files f
            WHERE f.upload_state IN ('uploaded', 'remote') AND f.stored > 0 AND f.stored = f.size AND f.used_at < ?
            AND NOT EXISTS (
              SELECT 1 FROM file_uses u JOIN records r
                ON r.collection = u.collection AND r.scope = u.scope AND r.record_id = u.record_id
              WHERE u.sha256 = f.sha256 AND r.sync_status IN ('pending', 'failed', 'rejected'))
            ORDER BY f.used_at
            """
        /// The files to give back, in order, with their bytes, and the bytes kept after.
        @Sendable func choose(_ db: Database) throws -> [(String, Int64)] {
            var held = try Int64.fetchOne(db, sql: kept) ?? 0
            guard held > limit else { return [] }
            var chosen: [(String, Int64)] = []
            for row in try Row.fetchAll(db, sql: candidates, arguments: [usedSince]) where held > limit {
                chosen.append((row["sha256"], row["stored"]))
                held -= row["stored"]
            }
            return chosen
        }
        // Read first: most syncs find the device under its limit, or nothing it may give back, and write nothing
        // (a write wakes every live query).
        guard try await perform({ try await read { db in try choose(db) } }).isEmpty == false else { return 0 }
        return try await perform {
            try await writeUnflushed { db in
                var released: Int64 = 0
                for (sha256, stored) in try choose(db) {
                    try FileChunks.deleteAll(sha256, db)
                    try db.execute(sql: "UPDATE files SET stored = 0 WHERE sha256 = ?", arguments: [sha256])
                    released += stored
                }
                return released
            }
        }
    }

    /// Stores downloaded bytes of `sha256` at `start`, which is where the bytes stored end: whole chunks, but the
    /// file's last. Unflushed: the server gives them again.
    func storeDownloaded(_ sha256: String, start: Int64, bytes: Data, at time: Date) async throws {
        let sealer = self.sealer
        let time = Timestamp(time).millisecondsSince1970
        try await perform {
            try await writeUnflushed { db in
                guard var row = try FileRow.find(sha256, db), row.stored == start else { return }
                try FileChunks.insert(sha256, start: start, bytes: bytes, sealer: sealer, db)
                row.stored = start + Int64(bytes.count)
                // In use while it arrives: a download longer than the time a file stays in use keeps its bytes.
                row.usedAt = time
                try row.update(db)
            }
        }
    }

    /// Whether the bytes stored of `sha256` have its digest; when they do not, they are deleted, so that the
    /// next download starts again.
    func checkDownloaded(_ sha256: String) async throws -> Bool {
        let sealer = self.sealer
        return try await perform {
            try await writeUnflushed { db in
                guard var row = try FileRow.find(sha256, db) else { return false }
                var hasher = SHA256()
                var offset: Int64 = 0
                while offset < row.stored {
                    let bytes = try FileChunks.bytes(sha256, from: offset, count: Self.fileChunkBytes, sealer: sealer, db)
                    guard !bytes.isEmpty else { break }
                    hasher.update(data: bytes)
                    offset += Int64(bytes.count)
                }
                if offset == row.size, hasher.finalize().hexString == sha256 { return true }
                try FileChunks.deleteAll(sha256, db)
                row.stored = 0
                try row.update(db)
                return false
            }
        }
    }
}
