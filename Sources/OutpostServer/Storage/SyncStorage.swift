import OutpostProtocol
import ServiceLifecycle

/// Where a pull continues: a position in the server's change order.
///
/// On SQLite, writes are serial and `seq` alone orders them. On PostgreSQL, `xid` is the writing
/// transaction's id and `seq` breaks ties; a reader only delivers changes of transactions older than every
/// transaction still running, so a slow writer's change is never skipped (the DocC article *Sync*, "Gap-free pulls", says why).
package struct PullCursor: Sendable, Hashable, Comparable {
    package var xid: Int64
    package var seq: Int64

    package init(xid: Int64, seq: Int64) {
        self.xid = xid
        self.seq = seq
    }

    package static let start = PullCursor(xid: 0, seq: 0)

    package static func < (lhs: PullCursor, rhs: PullCursor) -> Bool { (lhs.xid, lhs.seq) < (rhs.xid, rhs.seq) }

    /// The opaque wire form.
    package var token: String { "c1.\(xid).\(seq)" }

    /// Parses the wire form; `nil` for anything a server never issued.
    package init?(token: String) {
        // Exactly `c1.<digits>.<digits>`, 1 to 18 digits each: no sign, no spaces, nothing to overflow.
        func number(_ part: Substring) -> Int64? {
            guard (1...18).contains(part.utf8.count), part.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                return nil
            }
            return Int64(part)
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "c1", let xid = number(parts[1]), let seq = number(parts[2]) else {
            return nil
        }
        self.init(xid: xid, seq: seq)
    }
}

/// One page of a pull, straight from storage.
package struct PulledChanges: Sendable {
    /// As stored: their fields text goes into the page as it is.
    package var changes: [RecordRow]
    /// The cursor after the last record, or the request's cursor when there was none.
    package var cursor: PullCursor
    package var hasMore: Bool
}

/// The last record a snapshot page sent: the next page starts after it.
package struct RecordPosition: Sendable, Hashable {
    package var recordId: String
    package var scope: String

    package init(recordId: String, scope: String) {
        self.recordId = recordId
        self.scope = scope
    }
}

/// Where a snapshot starts: the pull cursor that covers every change the pages might miss, and the size.
package struct SnapshotStart: Sendable, Hashable {
    package var cursor: PullCursor
    package var total: Int
}

/// The server's storage: one protocol, two engines (embedded SQLite and PostgreSQL), one behaviour suite.
///
/// Every method is scoped to a tenant and filters by it. A storage is a `Service`: run it in the
/// application's service group for as long as it is used.
package protocol SyncStorage: Service, MonitorStorage, SessionStorage, NotificationStorage, ConnectorStorage, FileStorage {
    /// Which engine and where, for the start-up log line; never a password.
    var summary: String { get }

    /// Brings the schema to the newest version; safe to run from several processes at once.
    func migrate() async throws

    /// The JWT signing secret kept by this storage, created by `make` on first use.
    func signingSecret(creatingWith make: @Sendable () -> [UInt8]) async throws -> [UInt8]

    /// Applies a validated push in one transaction and returns one result per item, in order.
    func push(
        _ items: [PushItem], context: PushContext, collections: CollectionRegistry
    ) async throws
        -> [MutationResult]

    /// Changes after `cursor`, in commit order; `scope` narrows to one scope and `owner` to the records one user
    /// created. A page holds at most `limit` records and ends, with `hasMore`, at the first record that takes
    /// its stored fields to `maxBytes` or past: a page of large records stays bounded in memory, on the server
    /// and on the device. Records filtered out are passed over, never skipped: the cursor moves only past
    /// records the page returns. `through`, when given, leaves out changes past it: a connector sends a batch
    /// that was not taken again with no change beyond the batch's end.
    func pull(
        tenant: String, collection: String, scope: String?, owner: String?, after cursor: PullCursor,
        through: PullCursor?, limit: Int, maxBytes: Int
    ) async throws -> PulledChanges

    /// The cursor and record count a new snapshot starts from.
    func snapshotStart(tenant: String, collection: String, scope: String?) async throws -> SnapshotStart

    /// Live records after `position`, ordered by record id (then scope, when `scope` is nil), their fields as
    /// stored: at most `limit`, and none after the first that takes their stored fields to `maxBytes` or past.
    func snapshotPage(
        tenant: String, collection: String, scope: String?, after position: RecordPosition?, limit: Int,
        maxBytes: Int
    ) async throws -> [RecordRow]

    /// Every processed mutation of one record id, in client-time order: in one scope, or in every scope when
    /// `scope` is nil.
    func audit(tenant: String, collection: String, recordId: String, scope: String?) async throws -> [AuditEntry]

    /// Conflicts kept for review, newest first.
    func conflicts(tenant: String, collection: String?, limit: Int) async throws -> [ConflictRecord]

    /// Throws ``StorageError`` with code `unavailable` when the database cannot be reached.
    func checkHealth() async throws
}

extension SyncStorage {
    /// ``pull(tenant:collection:scope:owner:after:through:limit:maxBytes:)`` to the newest change.
    package func pull(
        tenant: String, collection: String, scope: String?, owner: String?, after cursor: PullCursor, limit: Int,
        maxBytes: Int
    ) async throws -> PulledChanges {
        try await pull(
            tenant: tenant, collection: collection, scope: scope, owner: owner, after: cursor, through: nil, limit: limit,
            maxBytes: maxBytes)
    }

    /// ``pull(tenant:collection:scope:owner:after:through:limit:maxBytes:)`` of every owner's records, to the newest change.
    package func pull(
        tenant: String, collection: String, scope: String?, after cursor: PullCursor, limit: Int, maxBytes: Int
    ) async throws -> PulledChanges {
        try await pull(
            tenant: tenant, collection: collection, scope: scope, owner: nil, after: cursor, limit: limit,
            maxBytes: maxBytes)
    }

    /// ``audit(tenant:collection:recordId:scope:)`` of the record id in every scope.
    package func audit(tenant: String, collection: String, recordId: String) async throws -> [AuditEntry] {
        try await audit(tenant: tenant, collection: collection, recordId: recordId, scope: nil)
    }

    /// Runs `body` with this storage running as a service, for commands and tests outside an application.
    package func withRunning<T: Sendable>(_ body: @Sendable (Self) async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await self.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await body(self)
        }
    }
}
