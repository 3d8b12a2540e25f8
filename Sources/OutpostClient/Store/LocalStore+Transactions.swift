import Foundation
import GRDB

/// The store's kinds of transaction: a local write's, flushed and taking the lock at once; the ones without a
/// flush of their own, for what the server can give again; and reads.
extension LocalStore {
    /// Runs `reads` in one read-only transaction on one of the pool's reader connections, beside the writer: a
    /// read never waits for a write.
    func read<T: Sendable>(_ reads: @Sendable (Database) throws -> T) async throws -> T {
        try await pool.read(reads)
    }

    /// ``read(_:)`` on the caller's thread, for the short reads a person waits on at every keystroke (a roster
    /// search, a lookup): the hop to a reader's queue and back costs such a read more than its query (a search
    /// took 0.20 ms that way against 0.13 ms on the caller's thread, `bench roster`).
    ///
    /// These reads have a read-only connection of their own, which nothing else uses: the caller waits only
    /// while this read or another such read runs its statements. In WAL mode a reader never waits for a writer
    /// or another process's lock. Never the pool's readers: GRDB frees a reader of an async read only once its
    /// task resumes, so a cooperative thread waiting here for one of them could wait for itself, and with every
    /// cooperative thread waiting so, the whole process would stop.
    ///
    /// A live list's first read runs here too (``firstRecords(in:)``), so that a screen's first frame shows it.
    func readOnCaller<T>(_ reads: (Database) throws -> T) throws -> T {
        try callerReader.read(reads)
    }

    /// Runs `updates` in one flushed transaction that takes the write lock at once (`BEGIN IMMEDIATE`).
    ///
    /// Rolls back and rethrows when `updates` or the commit fails.
    /// - Parameter collections: the collections whose records `updates` may change, the only tables it writes
    ///   besides the outbox; nil when it may change anything.
    /// - Parameter records: the records `updates` may change, all of them; nil when it does not name them.
    func writeImmediate<T: Sendable>(
        changing collections: Set<String>? = nil, records: Set<RecordKey>? = nil,
        _ updates: @escaping @Sendable (Database) throws -> T
    ) async throws -> T {
        let value = try await onWriter { db in try Self.immediate(db, updates) }
        commits.signal(changing: collections, records: records)
        return value
    }

    /// ``writeImmediate(changing:records:_:)`` of one local action on `record`, in ``LocalWritePath``'s
    /// transaction.
    func writeLocal<T: Sendable>(_ record: RecordKey, _ updates: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let value = try await onWriter { db in try LocalWritePath.transaction(db, updates) }
        commits.signal(changing: [record.collection], records: [record])
        return value
    }

    /// Runs `work` on the writer's queue, the caller suspended meanwhile: no cooperative thread waits on a lock
    /// another process holds, or on the flush. Queued work runs to its end whatever becomes of the calling task
    /// (GRDB's async `write` refuses every statement but a rollback once the task is cancelled, which could
    /// leave a commit half-made, or the connection unflushed for the local writes after it).
    private func onWriter<T: Sendable>(_ work: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            pool.asyncWriteWithoutTransaction { db in continuation.resume(with: Result { try work(db) }) }
        }
    }

    /// One immediate transaction through GRDB, which rolls back when `updates` or the commit fails.
    private static func immediate<T>(_ db: Database, _ updates: (Database) throws -> T) throws -> T {
        var value: T?
        try db.inTransaction(.immediate) {
            value = try updates(db)
            return .commit
        }
        return value!
    }

    /// Runs `updates` in one transaction that commits without a flush of its own: for what the server can give
    /// again, such as the results of a push, or a page of reference data.
    ///
    /// The commit is in the write-ahead log at once, so a crash of the process loses nothing; the next durable
    /// commit (any local write) or checkpoint flushes it with everything before it. A power cut before then may
    /// lose it, never reorder it: the engine then sends those mutations again and the server answers them as
    /// duplicates, and a page of reference data is fetched again. A pushed chunk's results must not cost a drain
    /// a flush of their own.
    ///
    /// - Parameter collections: as in ``writeImmediate(changing:records:_:)``.
    func writeUnflushed<T: Sendable>(
        changing collections: Set<String>? = nil, _ updates: @escaping @Sendable (Database) throws -> T
    ) async throws -> T {
        let durable = durableCommits
        let value = try await perform { try await self.onWriter { db in try Self.unflushed(db, durable: durable, updates) } }
        commits.signal(changing: collections)
        return value
    }

    /// One transaction as ``writeImmediate(changing:records:_:)`` runs it, its commit not flushed.
    private static func unflushed<T>(_ db: Database, durable: Bool, _ updates: (Database) throws -> T) throws -> T {
        guard durable else { return try immediate(db, updates) }
        try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute()
        let outcome = Result { try immediate(db, updates) }
        // Local writes must flush again whatever happened above.
        try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
        return try outcome.get()
    }
}

extension LocalStore {
    /// Closes the store's connections, once every read and write under way has ended. Any later call on it
    /// fails as ``ClientError/Code/storeUnavailable``.
    ///
    /// The wait runs on a thread of its own, never a cooperative one: the pool takes back the reader of an
    /// async read only once that read's task resumes, on a cooperative thread, so closes waiting on all of them
    /// would wait for ever.
    public func close() async throws {
        try await offCooperativeThreads { try self.close() }
    }

    /// ``close()`` from code that is not async: it blocks the calling thread until every read and write under
    /// way has ended.
    public func close() throws {
        do {
            try callerReader.close()
            try pool.close()
        } catch {
            throw ClientError(.storeUnavailable, "the device store could not be closed", underlying: error)
        }
    }

    /// Closes the store and deletes it: its file, its write-ahead log and shared memory, and its key, so that
    /// nothing of it can be read again, even from a copy or a backup (AES-GCM without the key). A store opened
    /// at the same place afterwards starts empty, with a new key.
    ///
    /// What waits to sync is lost with it: see ``Device/wipe(discardingUnsynced:)``, which checks first. Waits as
    /// ``close()`` does, on a thread of its own.
    public func wipe() async throws {
        try await offCooperativeThreads { try self.wipe() }
    }

    /// ``wipe()`` from code that is not async: it blocks the calling thread until every read and write under way
    /// has ended.
    public func wipe() throws {
        try close()
        try keys.destroy()
        for suffix in ["", "-wal", "-shm"] {
            do {
                try FileManager.default.removeItem(atPath: url.path + suffix)
            } catch CocoaError.fileNoSuchFile {
            } catch {
                throw ClientError(.storeUnavailable, "cannot delete \(url.path + suffix)", underlying: error)
            }
        }
    }
}

/// Runs `work`, which blocks its thread, on a dispatch thread while the caller is suspended.
func offCooperativeThreads<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
    }
}
