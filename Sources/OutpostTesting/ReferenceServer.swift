import Foundation
import NIOConcurrencyHelpers
import OutpostClient
import OutpostProtocol

/// A reference collection held in memory, served as snapshot pages and pull deltas, with a switch that
/// fails requests from a chosen page on: enough to test downloads, resumes and refreshes.
public final class ReferenceServer: BulkSyncTransport, Sendable {
    private struct State {
        /// The rows as they stand, by scope and record id: the same id in two scopes is two rows.
        var rows: [String: Change] = [:]
        /// Every change in order; a pull cursor is a position in it.
        var log: [Change] = []
        var snapshotCalls = 0
        var failFromCall: Int?
        var pullCalls = 0
        var failPullsFromCall: Int?
        var pagesPerStream: Int?
        var streamCalls = 0
    }

    private let state = NIOLockedValueBox(State())

    public init() {}

    /// Adds or changes a row (a walk-in, an edit) in `scope`.
    public func put(_ recordId: String, _ fields: [String: JSONValue], scope: String) {
        state.withLockedValue { state in
            let key = "\(scope)/\(recordId)"
            let version = (state.rows[key]?.version ?? 0) + 1
            let change = Change(
                collection: "guests", recordId: recordId, scope: scope, version: version, tombstone: false,
                fields: fields, createdAt: Timestamp(millisecondsSince1970: 0), updatedAt: Timestamp(millisecondsSince1970: 0))
            state.rows[key] = change
            state.log.append(change)
        }
    }

    /// Deletes a row (a cancelled registration) in `scope`, or in every scope when nil: a tombstone in the log.
    public func cancel(_ recordId: String, scope: String? = nil) {
        state.withLockedValue { state in
            for key in state.rows.keys.sorted() {
                guard let row = state.rows[key], row.recordId == recordId, scope == nil || row.scope == scope,
                    var change = state.rows.removeValue(forKey: key)
                else { continue }
                change.tombstone = true
                change.fields = [:]
                change.version += 1
                state.log.append(change)
            }
        }
    }

    /// Snapshot requests from number `call` on (0-based) fail as network errors; nil heals.
    public func failSnapshots(fromCall call: Int?) {
        state.withLockedValue { state in
            state.failFromCall = call
            state.snapshotCalls = 0
        }
    }

    public var snapshotRequests: Int { state.withLockedValue { $0.snapshotCalls } }

    /// Pull requests from number `call` on (0-based, counted from this call) fail as network errors; nil heals.
    public func failPulls(fromCall call: Int?) {
        state.withLockedValue { state in
            state.failPullsFromCall = call
            state.pullCalls = 0
        }
    }

    /// Pull requests since the last ``failPulls(fromCall:)``.
    public var pullRequests: Int { state.withLockedValue { $0.pullCalls } }

    /// Streams of pulls carry at most `pages` pages, as from a server with a lower limit than the device asks
    /// for; nil leaves the device's number. Resets ``streamRequests``.
    public func limitStreams(toPages pages: Int?) {
        state.withLockedValue { state in
            state.pagesPerStream = pages
            state.streamCalls = 0
        }
    }

    /// Streams of pulls opened since the last ``limitStreams(toPages:)``.
    public var streamRequests: Int { state.withLockedValue { $0.streamCalls } }

    public func pullPageStream(
        collection: String, scope: String?, cursor: String?, limit: Int, pages: Int
    )
        -> AsyncThrowingStream<PullPage, any Error>
    {
        let pages = state.withLockedValue { state in
            state.streamCalls += 1
            return min(pages, state.pagesPerStream ?? pages)
        }
        return pullPagesOneByOne(collection: collection, scope: scope, cursor: cursor, limit: limit, pages: pages)
    }

    public func snapshot(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotResponse
    {
        try state.withLockedValue { state in
            defer { state.snapshotCalls += 1 }
            if let failFromCall = state.failFromCall, state.snapshotCalls >= failFromCall {
                throw TransportError(kind: .network, message: "connection lost")
            }
            let sorted = state.rows.values.filter { scope == nil || $0.scope == scope }.sorted { $0.recordId < $1.recordId }
            // The continuation: the last id sent and the log position when the snapshot started.
            let parts = continuation?.split(separator: "|", omittingEmptySubsequences: false)
            let after = parts.map { String($0[0]) }
            let start = parts.flatMap { Int($0[1]) } ?? state.log.count
            let remaining = sorted.filter { after == nil || $0.recordId > after! }
            let page = Array(remaining.prefix(limit ?? 500))
            let isLast = remaining.count <= (limit ?? 500)
            return SnapshotResponse(
                records: page, total: sorted.count,
                continuation: isLast ? nil : "\(page.last!.recordId)|\(start)", cursor: isLast ? String(start) : nil)
        }
    }

    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        try state.withLockedValue { state in
            defer { state.pullCalls += 1 }
            if let failPullsFromCall = state.failPullsFromCall, state.pullCalls >= failPullsFromCall {
                throw TransportError(kind: .network, message: "connection lost")
            }
            // The cursor is the log position after the last change sent; changes of other scopes are passed over.
            var position = min(cursor.flatMap(Int.init) ?? 0, state.log.count)
            var page: [Change] = []
            while position < state.log.count && page.count < (limit ?? 500) {
                if scope == nil || state.log[position].scope == scope { page.append(state.log[position]) }
                position += 1
            }
            let hasMore = state.log[position...].contains { scope == nil || $0.scope == scope }
            return PullResponse(changes: page, cursor: String(position), hasMore: hasMore)
        }
    }

    public func push(_ request: PushRequest) async throws -> PushResponse {
        throw TransportError(kind: .server, status: 403, message: "read-only")
    }

    public func health() async throws -> HealthResponse { HealthResponse(status: "ok", storage: "ok") }
}
