import Crypto
import Foundation
import GRDB
import GRDBSQLite
import NIOConcurrencyHelpers
import OutpostProtocol

/// The device's durable, encrypted store: one SQLite file in WAL mode, every commit flushed to disk.
///
/// Every local action writes the record and its outbox entry in one transaction and returns only once both
/// are durable. Payloads (field values, errors, conflicts, the token) are sealed with AES-GCM; only ids,
/// timestamps and statuses stay in the clear, because queries need them.
///
/// A GRDB `DatabasePool`: reads run on reader connections beside the one writer, and every write runs on the
/// writer's own queue while its caller is suspended, so that a write waiting on another process's lock holds
/// none of Swift's cooperative threads.
///
/// One `LocalStore` per file per process (GRDB: connect to a database file only once).
public final class LocalStore: Sendable {
    let pool: DatabasePool
    /// The read-only connection of ``readOnCaller(_:)``, which nothing else uses.
    let callerReader: DatabaseQueue
    let sealer: Sealer
    /// Where the sealing key comes from: ``wipe()`` destroys it.
    let keys: any KeyProvider
    public let url: URL
    /// What the app declared about its collections: their scopes, and how reference data is searched.
    public let schema: StoreSchema
    /// Whether commits flush (`synchronous = FULL`); false only in simulations.
    let durableCommits: Bool
    /// The latest client time written, in milliseconds (device time only moves forward), and the store's
    /// `data_version` when it was last known to be the latest.
    private let clientTime: NIOLockedValueBox<ClientTime>
    /// How many times rejected entries were put back in the queue through this store, so that a sync that
    /// read its next chunk ahead can tell whether an older entry may now belong in it.
    let requeues = NIOLockedValueBox(0)
    /// Downloads of reference sets under way through this store, one at a time per set.
    let downloads = TurnQueue()
    /// Wakes the live queries of this process after each of its commits (see ``changes(checkingOtherProcessesEvery:clock:)``).
    let commits = CommitSignal()

    /// Opens (creating when needed) the store at `url`, sealing with the key `keys` provides.
    ///
    /// - Parameters:
    ///   - schema: what the app declares about its collections; the same each time the store is opened.
    ///   - durableCommits: flush every commit to disk (the default). Pass false only in simulations that model
    ///     process crashes, never power loss, and want speed.
    /// - Throws: ``ClientError`` with `storeUnavailable` or `keyUnavailable`.
    public init(url: URL, keys: some KeyProvider, schema: StoreSchema = StoreSchema(), durableCommits: Bool = true) throws {
        self.url = url
        self.schema = schema
        self.durableCommits = durableCommits
        do {
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        } catch {
            throw ClientError(.storeUnavailable, "cannot create the folder \(url.deletingLastPathComponent().path)")
        }
        try Self.restrictToOwner(url)
        self.keys = keys
        self.sealer = Sealer(key: try keys.key())
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(TimeInterval(Self.busyTimeoutMilliseconds) / 1000)
            configuration.prepareDatabase { db in
                // Durable at commit: WAL with a flush per transaction. On Apple platforms fullfsync too.
                try db.execute(sql: durableCommits ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = OFF")
                // Checkpoints copy the WAL into the database; a large threshold keeps them off almost every
                // write (the engine checkpoints after each sync instead).
                try db.execute(sql: "PRAGMA wal_autocheckpoint = 4000")
                // Keep the WAL file when the store closes. A commit that overwrites frames already on disk
                // flushes only its data; one that extends the file must also flush the file's new size,
                // which on ext4 costs about 1.7× the flush (measured). After each checkpoint SQLite writes
                // the kept file again from its start. (A session's first commits follow the frames of the
                // last one until its first checkpoint, and extend the file if those reached its end.)
                var persist: Int32 = 1
                guard sqlite3_file_control(db.sqliteConnection, "main", SQLITE_FCNTL_PERSIST_WAL, &persist) == SQLITE_OK
                else { throw ClientError(.storeUnavailable, "cannot keep the store's write-ahead log") }
                #if canImport(Darwin)
                    try db.execute(sql: "PRAGMA fullfsync = ON")
                #endif
            }
            self.pool = try DatabasePool(path: url.path, configuration: configuration)
            // The pool sets the writer's `synchronous` to NORMAL when it turns WAL on, after `prepareDatabase`.
            try pool.writeWithoutTransaction { db in
                try db.execute(sql: durableCommits ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = OFF")
            }
            try Self.migrator.migrate(pool)
            // Records kept from before scopes move into the scopes their fields name, once; the check is a read,
            // so that every later opening costs no commit.
            let sealer = self.sealer
            if try !pool.read(Self.scopesFilled) {
                try pool.writeWithoutTransaction { db in
                    try db.inTransaction(.immediate) {
                        try Self.fillScopes(db, sealer: sealer, schema: schema)
                        return .commit
                    }
                }
            }
            let time = try pool.read { db in
                ClientTime(
                    last: max(
                        try RecordRow.select(max(RecordRow.Columns.updatedAt), as: Int64.self).fetchOne(db) ?? 0,
                        try OutboxRow.select(max(Column("client_ts")), as: Int64.self).fetchOne(db) ?? 0),
                    dataVersion: try Self.dataVersion(db))
            }
            self.clientTime = NIOLockedValueBox(time)
            var callerConfiguration = configuration
            callerConfiguration.readonly = true
            self.callerReader = try DatabaseQueue(path: url.path, configuration: callerConfiguration)
        } catch let error as ClientError {
            throw error
        } catch {
            throw ClientError(.storeUnavailable, "cannot open the device store at \(url.path)", underlying: error)
        }
    }

    /// Creates the store's file readable by its owner only (0600), or makes an existing one so, with its
    /// write-ahead log and shared memory: SQLite creates those with the database file's mode.
    static func restrictToOwner(_ url: URL) throws {
        let descriptor = open(url.path, O_RDWR | O_CREAT, 0o600)
        guard descriptor >= 0 else {
            throw ClientError(.storeUnavailable, "cannot create the device store at \(url.path)")
        }
        closeDescriptor(descriptor)
        for path in [url.path, url.path + "-wal", url.path + "-shm"] where FileManager.default.fileExists(atPath: path) {
            guard chmod(path, 0o600) == 0 else {
                throw ClientError(.storeUnavailable, "cannot make the device store at \(url.path) private to its owner")
            }
        }
    }

    /// How long a statement waits for another process's lock on the store before it fails.
    static let busyTimeoutMilliseconds = 10_000

    /// The default key file for a store: beside it, named after it, mode 0600.
    public static func defaultKeys(for url: URL) -> KeyFileProvider {
        KeyFileProvider(url: url.deletingPathExtension().appendingPathExtension("key"))
    }

    // MARK: Local writes

    /// What a local action writes.
    public struct Write: Sendable {
        public var collection: String
        /// The scope of the record (the event of a check-in), or nil for a collection without scopes.
        ///
        /// Part of the record's identity: the write reads and replaces the record of this collection, scope
        /// and id, and its mutation names the scope. Empty is the same as nil.
        public var scope: String?
        public var recordId: String
        public var op: MutationOperation
        public var fields: [String: JSONValue]
        /// A field the store sets to the write's client timestamp (ISO 8601), so that a record can carry the
        /// exact time of its action, such as a check-in's `scanned_at`.
        public var timestampField: String?

        /// A write of the record `recordId` in `collection`, within `scope` when the collection has scopes.
        public init(
            collection: String, scope: String? = nil, recordId: String, op: MutationOperation = .upsert,
            fields: [String: JSONValue] = [:], timestampField: String? = nil
        ) {
            self.collection = collection
            self.scope = scope
            self.recordId = recordId
            self.op = op
            self.fields = fields
            self.timestampField = timestampField
        }
    }

    /// Writes a record and its outbox entry in one durable transaction.
    ///
    /// The idempotency key is deviceId + recordId + clientTimestamp; timestamps on a device only move
    /// forward, so two writes never share a key, even of one record id in two scopes.
    ///
    /// - Parameter offline: whether the device is offline now; a record created offline is flagged
    ///   `isOfflineEntry` and the flag travels to the server as a field.
    /// - Throws: ``ClientError`` `invalidInput` for an id, scope or field the protocol refuses, or a scope that
    ///   differs from the one the write's fields name.
    /// - Parameter files: files to store with the record, by the field that names each (see
    ///   ``storeAttached(_:field:of:at:sealer:_:)``); the write's fields name them.
    @discardableResult
    package func write(
        _ requested: Write, deviceId: String, at date: Date, offline: Bool, files: [String: StagedFile] = [:]
    ) async throws -> LocalRecord {
        guard files.isEmpty || requested.op == .upsert else {
            throw ClientError(.invalidInput, "a delete carries no files")
        }
        var naming = requested
        for (field, file) in files { naming.fields[field] = file.reference.json }
        let write = naming
        try Self.validate(write, schema: schema)
        let sealer = self.sealer
        let clientTime = self.clientTime
        return try await perform {
            try await self.writeLocal(RecordKey(write.collection, write.scope ?? "", write.recordId)) { db in
                // Writes are serial on this queue, and the transaction holds the store's write lock, so neither
                // this process nor another can write between the read and the advance below.
                let time = try Self.nextClientTime(after: clientTime, now: date, db: db)
                let timestamp = Timestamp(millisecondsSince1970: time)

                let scope = write.scope ?? ""
                // Most local writes create their record: a probe of the key alone, and the row read only when
                // there is one.
                let key = RecordKey(write.collection, scope, write.recordId)
                for (field, file) in files {
                    try Self.storeAttached(file, field: field, of: key, at: time, sealer: sealer, db)
                }
                let found = try RecordRow.exists(key, db) ? try RecordRow.find(key, db)?.open(with: sealer) : nil
                let decision = try Self.decide(write, found: found, scope: scope, at: timestamp, offline: offline)
                let record = decision.record
                if decision.resends, let refused = found {
                    try Outbox.archiveRefused(refused, db: db, sealer: sealer, at: time)
                }
                // The mutation's fields are encoded once: a new record's payload wraps the same bytes.
                let fieldsJSON: [UInt8]
                do throws(JSONSyntaxError) {
                    fieldsJSON = try decision.outboxFields.jsonBytes()
                } catch {
                    throw ClientError.unstorableField(error)
                }
                if found == nil && write.op == .upsert {
                    let payload = try sealer.seal(SealedPayload.wrapping(fieldsJSON: fieldsJSON), context: record.payloadContext)
                    try LocalWritePath.insert(RecordRow(record, sealedPayload: payload), db)
                } else {
                    try LocalWritePath.insert(RecordRow(record, sealer: sealer), db)
                }

                let idempotencyKey = Self.idempotencyKey(deviceId: deviceId, at: timestamp)
                try LocalWritePath.insert(
                    OutboxRow(
                        idempotencyKey: idempotencyKey, record: key, op: write.op, clientTime: time, baseVersion: record.version,
                        payload: try sealer.seal(fieldsJSON, context: OutboxRow.payloadContext(idempotencyKey)),
                        timestampField: write.op == .upsert ? write.timestampField : nil), db)
                return record
            }
        }
    }

    /// What a local write makes of the record it finds.
    struct WriteDecision {
        /// The record to store.
        var record: LocalRecord
        /// The fields the outbox entry carries.
        var outboxFields: [String: JSONValue]
        /// Whether the write edits a record the server refused: its refused entries are archived and the new
        /// entry carries the whole record, so that nothing of theirs is lost.
        var resends: Bool
    }

    /// Decides what `write` stores, stamped `timestamp`, over `found` (nil when the record is new); reads and
    /// writes nothing.
    ///
    /// - Throws: ``ClientError`` `invalidInput` when the record would be larger than the server takes.
    static func decide(
        _ write: Write, found: LocalRecord?, scope: String, at timestamp: Timestamp, offline: Bool
    ) throws -> WriteDecision {
        let isNew = found == nil
        let resends = found?.syncStatus == .refused
        var fields = write.fields
        if let field = write.timestampField, write.op == .upsert {
            fields[field] = .string(timestamp.iso8601)
        }
        if isNew && offline && write.op == .upsert {
            fields[LocalRecord.offlineEntryField] = .bool(true)
        }
        let record: LocalRecord
        if var existing = found {
            // The first change to a record the server has keeps the server's record beside it.
            if existing.syncStatus == .synced, existing.version != nil, existing.serverCopy == nil {
                existing.serverCopy = LocalRecord.ServerCopy(
                    fields: existing.fields, tombstone: existing.tombstone, createdAt: existing.createdAt,
                    updatedAt: existing.updatedAt, isOfflineEntry: existing.isOfflineEntry)
            }
            if write.op == .delete {
                existing.fields = [:]
                existing.tombstone = true
            } else {
                existing.fields.merge(fields) { $1 }
                existing.tombstone = false
            }
            existing.updatedAt = timestamp
            existing.syncStatus = .pending
            // A relay holds the earlier writes, not this one: the record waits on the device again.
            if existing.syncErrorCode == WireError.Code.heldAtRelay.rawValue {
                existing.syncError = nil
                existing.syncErrorCode = nil
            }
            if resends {
                existing.syncError = nil
                existing.syncErrorCode = nil
                existing.conflict = nil
            }
            record = existing
        } else {
            record = LocalRecord(
                collection: write.collection, scope: scope, recordId: write.recordId,
                fields: write.op == .delete ? [:] : fields, tombstone: write.op == .delete,
                syncStatus: .pending, lastSyncAttempt: nil, syncError: nil,
                isOfflineEntry: offline, createdAt: timestamp, updatedAt: timestamp, version: nil,
                conflict: nil)
        }
        // What the server would refuse for size is refused here, before anything is queued.
        if write.op == .upsert, let problem = Mutation.sizeProblem(of: record.fields, growingFrom: found?.fields) {
            throw ClientError(.invalidInput, problem)
        }
        let outboxFields = write.op == .delete ? [:] : resends ? record.fields : fields
        return WriteDecision(record: record, outboxFields: outboxFields, resends: resends)
    }

    /// A write's client time: its own clock's, or just after the latest time written, whichever is later, but
    /// never more than ``maxClientTimeLead`` ahead of its own clock. A clock that jumped ahead and came back
    /// leaves its writes' times behind it: later writes are not stamped in the future, where the server would
    /// refuse them (the entries written during the jump are stamped again before they go, see
    /// `restampFutureEntries`).
    ///
    /// The outbox goes out in `seq` order, which is client-time order only while each write's time follows the
    /// one before. Another process on the same store (`outpost device put` beside `outpost device run`) writes
    /// times this one has not seen: when the store changed under it, the newest queued entry's time is read
    /// again, so that an entry never goes out before an older one, and a record written in the same
    /// millisecond by both gets two keys, not one the server would take as a duplicate.
    private static func nextClientTime(after clientTime: NIOLockedValueBox<ClientTime>, now: Date, db: Database) throws -> Int64 {
        let version = try dataVersion(db)
        let seen = clientTime.withLockedValue { $0.dataVersion == version }
        let latest =
            seen
            ? nil
            : try OutboxRow.lastClientTime(db)
        let clock = Timestamp(now).millisecondsSince1970
        let lead = Int64(maxClientTimeLead.components.seconds) * 1000
        return clientTime.withLockedValue { time in
            time.last = max(clock, min(max(time.last, latest ?? 0) + 1, clock + lead))
            time.dataVersion = version
            return time.last
        }
    }

    /// A new write's idempotency key: the device, the write's client time and 64 random bits.
    ///
    /// It never carries the record's id, which may name a person (a provisional attendance id does) and which
    /// the server keeps with the key. The random part keeps two writes apart when their times are equal: a
    /// store opened again after its outbox drained, under a clock set back.
    static func idempotencyKey(deviceId: String, at time: Timestamp) -> String {
        "\(deviceId):\(time.iso8601):\((0..<8).map { _ in UInt8.random(in: .min ... .max) }.hexString)"
    }

    /// Changes whenever another connection commits to the store (SQLite's `PRAGMA data_version`).
    static func dataVersion(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "PRAGMA data_version")) ?? 0
    }

    /// How far a write's client time may run ahead of the device clock to stay after the one before.
    package static let maxClientTimeLead = Duration.seconds(600)

    struct ClientTime {
        var last: Int64
        var dataVersion: Int64
    }

    static func validate(_ write: Write, schema: StoreSchema) throws {
        guard Identifier.isValid(write.collection) else {
            throw ClientError(.invalidInput, "the collection name is not a valid identifier")
        }
        let identifierRule = "1 to 128 characters from A-Z a-z 0-9 . _ : @ -, without '..'"
        guard Identifier.isValid(write.recordId) else {
            throw ClientError(.invalidInput, "record ids are \(identifierRule)")
        }
        if let scope = write.scope, !scope.isEmpty {
            guard Identifier.isValid(scope) else { throw ClientError(.invalidInput, "a scope is \(identifierRule)") }
            // The server refuses a mutation whose scope and scope field differ.
            if let named = schema.scope(of: write.fields, in: write.collection), named != scope {
                throw ClientError(.invalidInput, "the scope differs from the record's \(schema.scopeFields[write.collection] ?? "scope")")
            }
        }
        for name in write.fields.keys + [write.timestampField].compactMap({ $0 }) where !Identifier.isValidFieldName(name) {
            throw ClientError(.invalidInput, "field names are letters, digits and '_', starting with a letter or '_'")
        }
        if write.fields.values.contains(where: \.containsNUL) {
            throw ClientError(.invalidInput, "field values must not contain NUL characters")
        }
        // The server would refuse it, and the write would sit in the outbox as a failure instead.
        if write.fields.values.contains(where: { $0.depth > Mutation.maxValueDepth }) {
            throw ClientError(
                .invalidInput, "field values may nest arrays and objects at most \(Mutation.maxValueDepth) deep")
        }
        for value in write.fields.values {
            if case .failure(let problem) = FileReference.parse(value) { throw ClientError(.invalidInput, problem.description) }
        }
    }

    // MARK: Reads

    /// Which records to list.
    public enum Filter: Sendable {
        case all
        /// Waiting to sync for the first time.
        case pending
        /// Failed, to be tried again.
        case failed
        /// Refused by the server or conflicting: waiting for the user.
        case refused
    }

    /// The record `recordId` of `collection` in `scope` (empty for a collection without scopes), or nil.
    public func record(collection: String, scope: String = "", recordId: String) async throws -> LocalRecord? {
        let sealer = self.sealer
        return try await perform {
            try await self.read { db in
                try RecordRow.find(RecordKey(collection, scope, recordId), db)?.open(with: sealer)
            }
        }
    }

    /// Whether a record with this id is on the device (in `collection` and `scope`, or in any); nothing is
    /// unsealed.
    public func containsRecord(_ recordId: String, collection: String? = nil, scope: String? = nil) async throws -> Bool {
        try await perform {
            try await self.read { db in
                try RecordRow.exists(recordId: recordId, collection: collection, scope: scope, db)
            }
        }
    }

    /// Records, newest change first; `collection`, `scope` and `recordId` narrow the list to those that match.
    public func records(
        _ filter: Filter = .all, collection: String? = nil, scope: String? = nil, recordId: String? = nil
    ) async throws -> [LocalRecord] {
        let sealer = self.sealer
        let (sql, arguments) = Selection(filter, collection: collection, scope: scope, recordId: recordId).sql(columns: "*")
        return try await perform {
            try await self.read { db in
                try RecordRow.fetchAll(db, sql: sql, arguments: arguments).map { try $0.open(with: sealer) }
            }
        }
    }

    /// How many records wait to sync for the first time (`pending`), failed and wait to be tried again
    /// (`failed`), and were refused and wait for the user (`rejected`); in one collection when `collection`
    /// is given.
    public func counts(collection: String? = nil) async throws -> RecordCounts {
        try await perform { try await self.read { db in try RecordRow.counts(collection: collection, db) } }
    }

    // MARK: Device settings

    /// A device setting, sealed at rest (the server token is one).
    package func setting(_ name: String) async throws -> String? {
        let sealer = self.sealer
        return try await perform {
            try await self.read { db in try SettingRow.value(name, sealer: sealer, db) }
        }
    }

    package func setSetting(_ name: String, _ value: String?) async throws {
        let sealer = self.sealer
        try await perform {
            try await self.writeImmediate { db in try SettingRow.save(name, value, sealer: sealer, db) }
        }
    }

    /// The sealed part of a record row.
    struct SealedPayload: Codable {
        var fields: [String: JSONValue]
        var syncError: String?
        var syncErrorCode: String?
        var conflict: ConflictDetail?
        var serverCopy: LocalRecord.ServerCopy? = nil

        /// The JSON `JSONEncoder` would write, without it: every local write and every sync result seals one.
        /// A payload holding a conflict or a server copy, which are rare, goes through Codable.
        func jsonBytes() throws -> [UInt8] {
            if conflict != nil || serverCopy != nil { return Array(try JSONEncoder().encode(self)) }
            var output: [UInt8] = [UInt8(ascii: "{")]
            output.reserveCapacity(256)
            JSONWriter.key("fields", first: true, to: &output)
            try JSONWriter.object(fields, to: &output)
            if let syncError {
                JSONWriter.key("syncError", to: &output)
                JSONWriter.string(syncError, to: &output)
            }
            if let syncErrorCode {
                JSONWriter.key("syncErrorCode", to: &output)
                JSONWriter.string(syncErrorCode, to: &output)
            }
            output.append(UInt8(ascii: "}"))
            return output
        }

        /// ``jsonBytes()`` of a payload of these fields alone (no error, no conflict), from their JSON.
        static func wrapping(fieldsJSON: [UInt8]) -> [UInt8] {
            var output: [UInt8] = [UInt8(ascii: "{")]
            output.reserveCapacity(fieldsJSON.count + 12)
            JSONWriter.key("fields", first: true, to: &output)
            output += fieldsJSON
            output.append(UInt8(ascii: "}"))
            return output
        }

        init(
            fields: [String: JSONValue], syncError: String?, syncErrorCode: String? = nil, conflict: ConflictDetail?,
            serverCopy: LocalRecord.ServerCopy? = nil
        ) {
            self.fields = fields
            self.syncError = syncError
            self.syncErrorCode = syncErrorCode
            self.conflict = conflict
            self.serverCopy = serverCopy
        }

        /// Reads what ``jsonBytes()`` or `JSONEncoder` wrote.
        init(jsonBytes data: Data) throws {
            guard case .object(let object) = try JSONValue(parsing: data) else {
                throw JSONSyntaxError(offset: 0, reason: "expected an object")
            }
            if object["conflict"].map({ $0 != .null }) ?? false || object["serverCopy"].map({ $0 != .null }) ?? false {
                self = try JSONDecoder().decode(Self.self, from: data)
                return
            }
            guard case .object(let fields)? = object["fields"] else {
                throw JSONSyntaxError(offset: 0, reason: "fields is missing")
            }
            func text(_ name: String) throws -> String? {
                switch object[name] {
                case nil, .null?: return nil
                case .string(let value)?: return value
                default: throw JSONSyntaxError(offset: 0, reason: "\(name) must be a string")
                }
            }
            self.init(fields: fields, syncError: try text("syncError"), syncErrorCode: try text("syncErrorCode"), conflict: nil)
        }
    }

    /// Runs GRDB work, turning its errors into ``ClientError`` without SQL or values. Work that stopped because its
    /// task was cancelled throws `CancellationError`: the store is as it was.
    func perform<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw Self.storeError(error)
        }
    }

    /// ``perform(_:)`` of work that runs on the caller's thread.
    func performOnCaller<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw Self.storeError(error)
        }
    }

    private static func storeError(_ error: any Error) -> any Error {
        if error is ClientError { return error }
        if error is CancellationError || Task.isCancelled { return CancellationError() }
        if let database = error as? DatabaseError, database.resultCode == .SQLITE_FULL {
            return ClientError(
                .diskFull, "the device's storage is full: free some space to save more; what was saved is kept",
                underlying: error)
        }
        return ClientError(.storeUnavailable, "the device store failed to read or write", underlying: error)
    }
}

extension LocalStore {
    /// The size past which a checkpoint also truncates the write-ahead log (64 MiB): the log is kept between
    /// uses so that commits overwrite it in place, but one large transaction should not keep its space for ever.
    package static let walSizeLimit = 64 << 20

    /// Copies the write-ahead log into the database when nothing is reading: called after a sync, so that
    /// local writes rarely pay for it.
    ///
    /// - Parameter limit: when the log file is larger than this many bytes, it is also truncated to zero.
    package func checkpoint(truncatingLogPast limit: Int = LocalStore.walSizeLimit) async throws {
        let log = url.path + "-wal"
        try await perform {
            try await pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)")
                let size = (try? FileManager.default.attributesOfItem(atPath: log)[.size] as? NSNumber)?.intValue ?? 0
                guard size > limit else { return }
                // Truncating waits for readers in other processes (such as `outpost device status`); local
                // writes queue behind it, so it does not wait at all: a busy log is truncated next time.
                try db.execute(sql: "PRAGMA busy_timeout = 0")
                defer { try? db.execute(sql: "PRAGMA busy_timeout = \(Self.busyTimeoutMilliseconds)") }
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            }
        }
    }
}

extension LocalRecord {
    /// The field that tells the server a record was created offline.
    public static let offlineEntryField = "isOfflineEntry"

    /// What a record's sealed payload is bound to: it opens only in its own row.
    ///
    /// A record without a scope keeps the context of stores from before scopes, so that their payloads open
    /// as they are. Collections and record ids hold no `/`, so a scope between the two is unambiguous.
    static func payloadContext(_ collection: String, _ scope: String, _ recordId: String) -> String {
        scope.isEmpty ? "record:\(collection)/\(recordId)" : "record:\(collection)/\(scope)/\(recordId)"
    }

    var payloadContext: String { Self.payloadContext(collection, scope, recordId) }
}

/// The C library's `close`, which ``LocalStore/close()`` hides inside the type.
private func closeDescriptor(_ descriptor: Int32) {
    _ = close(descriptor)
}

extension LocalStore {
    /// When reference data (a roster) was last downloaded or refreshed on this device, if ever.
    package func lastReferenceFetch() async throws -> Date? {
        try await perform {
            try await self.read { db in
                try ReferenceStateRow.lastFetch(db).map { Timestamp(millisecondsSince1970: $0).date }
            }
        }
    }

    /// The setting that names the event opened on this device (`outpost event open`).
    package static let currentEventSetting = "current_event"
}
