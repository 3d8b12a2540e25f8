import Foundation
import GRDB
import OutpostProtocol

/// A row of the `files` table: one file the device holds, or is downloading, by digest.
///
/// Its bytes are in `file_chunks`, sealed ``LocalStore/fileChunkBytes`` at a time; `stored` says how many of
/// them, from the start, are there.
struct FileRow: FetchableRecord, PersistableRecord, Sendable, Hashable {
    static let databaseTableName = "files"

    /// Where a file stands with the server.
    enum UploadState: String, Sendable, Hashable {
        /// Attached on this device, and not yet held whole by the server.
        case pending
        /// The server holds it whole.
        case uploaded
        /// The server refused it (too large, a type its collection does not take); `uploadError` says why.
        case refused
        /// Downloaded from the server, which holds it.
        case remote
    }

    enum Columns {
        static let sha256 = Column("sha256")
        static let uploadState = Column("upload_state")
    }

    var sha256: String
    var size: Int64
    var type: String
    var stored: Int64
    var uploadState: UploadState
    /// The bytes the server said it holds, at the last range it took.
    var uploaded: Int64
    var uploadError: String?
    var createdAt: Int64
    /// When the file was last attached, or opened for a screen (milliseconds since 1970).
    var usedAt: Int64

    init(reference: FileReference, state: UploadState, at time: Int64) {
        sha256 = reference.sha256
        size = reference.size
        type = reference.type
        stored = 0
        uploadState = state
        uploaded = 0
        createdAt = time
        usedAt = time
    }

    init(row: Row) throws {
        sha256 = row["sha256"]
        size = row["size"]
        type = row["type"]
        stored = row["stored"]
        let state: String = row["upload_state"]
        guard let uploadState = UploadState(rawValue: state) else {
            throw ClientError(.storeCorrupt, "a file's upload state is not one this version knows")
        }
        self.uploadState = uploadState
        uploaded = row["uploaded"]
        uploadError = row["upload_error"]
        createdAt = row["created_at"]
        usedAt = row["used_at"]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["sha256"] = sha256
        container["size"] = size
        container["type"] = type
        container["stored"] = stored
        container["upload_state"] = uploadState.rawValue
        container["uploaded"] = uploaded
        container["upload_error"] = uploadError
        container["created_at"] = createdAt
        container["used_at"] = usedAt
    }

    /// Whether every byte of the file is on the device.
    var isWhole: Bool { stored == size }

    static func find(_ sha256: String, _ db: Database) throws -> FileRow? {
        try fetchOne(db, key: sha256)
    }
}

/// The `file_chunks` table: a file's bytes, sealed a chunk at a time under a context naming the file and the
/// chunk's place, so that a chunk moved to another file or place no longer opens.
enum FileChunks {
    static func context(_ sha256: String, _ start: Int64) -> String { "file:\(sha256):\(start)" }

    static func insert(_ sha256: String, start: Int64, bytes: Data, sealer: Sealer, _ db: Database) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO file_chunks (sha256, start, data) VALUES (?, ?, ?)")
            .execute(arguments: [sha256, start, try sealer.seal(bytes, context: context(sha256, start))])
    }

    static func deleteAll(_ sha256: String, _ db: Database) throws {
        try db.execute(sql: "DELETE FROM file_chunks WHERE sha256 = ?", arguments: [sha256])
    }

    /// The bytes of the file from `offset`, at most `count` of them, opened; fewer when the device holds fewer.
    /// The opened chunks that start at `offset` (a chunk's start) or after it, before `offset + count`.
    static func chunks(_ sha256: String, from offset: Int64, count: Int, sealer: Sealer, _ db: Database) throws -> [Data] {
        let rows = try Row.fetchCursor(
            db, sql: "SELECT start, data FROM file_chunks WHERE sha256 = ? AND start >= ? AND start < ? ORDER BY start",
            arguments: [sha256, offset, offset + Int64(count)])
        var chunks: [Data] = []
        while let row = try rows.next() {
            let start: Int64 = row["start"]
            chunks.append(try row.withUnsafeData(named: "data") { try sealer.open($0 ?? Data(), context: context(sha256, start)) })
        }
        return chunks
    }

    static func bytes(_ sha256: String, from offset: Int64, count: Int, sealer: Sealer, _ db: Database) throws -> Data {
        let chunk = Int64(LocalStore.fileChunkBytes)
        let first = offset / chunk * chunk
        let end = offset + Int64(count)
        var bytes = Data()
        let rows = try Row.fetchCursor(
            db, sql: "SELECT start, data FROM file_chunks WHERE sha256 = ? AND start >= ? AND start < ? ORDER BY start",
            arguments: [sha256, first, end])
        while let row = try rows.next() {
            let start: Int64 = row["start"]
            // Opened from SQLite's own copy of the sealed bytes, not a copy of it.
            let opened = try row.withUnsafeData(named: "data") { sealed in
                try sealer.open(sealed ?? Data(), context: context(sha256, start))
            }
            let from = Int(max(offset - start, 0))
            let to = Int(min(end - start, Int64(opened.count)))
            guard from < to else { continue }
            // A read of one whole chunk, as an upload reads, is the chunk itself.
            if bytes.isEmpty, from == 0, to == opened.count, end <= start + Int64(opened.count) { return opened }
            if bytes.isEmpty { bytes.reserveCapacity(count) }
            bytes.append(opened[opened.startIndex + from..<opened.startIndex + to])
        }
        return bytes
    }
}

/// The `file_uses` table: which field of which record names which file.
enum FileUses {
    static func insert(_ sha256: String, field: String, of record: RecordKey, _ db: Database) throws {
        try db.cachedStatement(
            sql: "INSERT OR REPLACE INTO file_uses (collection, scope, record_id, field, sha256) VALUES (?, ?, ?, ?, ?)"
        ).execute(arguments: [record.collection, record.scope, record.recordId, field, sha256])
    }

    /// Moves the uses of `record` to the record id `newId`, as the record moves.
    static func move(_ record: RecordKey, to newId: String, _ db: Database) throws {
        try db.execute(
            sql: "UPDATE OR REPLACE file_uses SET record_id = ? WHERE collection = ? AND scope = ? AND record_id = ?",
            arguments: [newId, record.collection, record.scope, record.recordId])
    }
}
