import Foundation
import Logging
import OutpostProtocol
import ServiceLifecycle

/// Brings a relay's events down from the server and keeps them current: every collection with a scope (the
/// rosters, and the check-ins made elsewhere), pulled by delta from a cursor the relay keeps, while the line is up.
///
/// Each change is applied as a write of the server's (device `upstream`), through the same record rules as a
/// door's write, and is not journaled: it came from the server and does not go back. Its idempotency key names
/// the record and its version upstream, so a page pulled again after a restart changes nothing twice. Its time
/// is the record's last change upstream, for every field it carries: a field the venue edited later than that
/// keeps the venue's value, one edited earlier takes the server's. A guest scanned at two places keeps the
/// first scan. The relay's copy takes the server's version number when it is behind, so that a door moving
/// between server and relay finds each record at the version it knows.
struct RelayMirror<Storage: RelayJournalStorage>: Service {
    let storage: Storage
    let configuration: RelayConfiguration
    let server: ServerConfiguration
    let clock: any Clock<Duration>
    let now: @Sendable () -> Date
    let logger: Logger
    let get: @Sendable (String) async throws -> Data
    /// How often a relay whose copy is current asks again.
    var interval: Duration = .seconds(1)

    /// The device id of the server's writes at the relay.
    static var upstreamDevice: String { "upstream" }
    /// How the idempotency keys of the server's writes at the relay begin; no device's may.
    static var keyPrefix: String { "upstream:" }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var failures = 0
            while !Task.isCancelled {
                do {
                    try await refresh()
                    failures = 0
                } catch is CancellationError {
                    return
                } catch {
                    failures += 1
                    if failures == 1 || failures.isMultiple(of: 20) {
                        let reason = (error as? RelayUpstream.Failure)?.description ?? "the relay's store could not be written"
                        logger.warning("relay: its events could not be brought down; tried again later", metadata: ["reason": "\(reason)"])
                    }
                }
                do { try await clock.sleep(for: interval * min(max(failures, 1), 30)) } catch { return }
            }
        }
    }

    /// The collections the relay keeps a copy of, reference ones first, so that a check-in finds its guest.
    var collections: [CollectionPolicy] {
        server.collections.policies.values.filter { $0.scopeField != nil }.sorted {
            ($0.kind == .reference ? 0 : 1, $0.name) < ($1.kind == .reference ? 0 : 1, $1.name)
        }
    }

    /// Pulls each collection of each event to the newest change.
    func refresh() async throws {
        for scope in configuration.scopes {
            for policy in collections {
                try await refresh(policy.name, scope: scope)
            }
        }
    }

    private func refresh(_ collection: String, scope: String) async throws {
        var cursor = try await storage.relayCursor(collection: collection, scope: scope)
        while true {
            var query = "/v1/pull?collection=\(collection)&scope=\(scope)&limit=500"
            if let cursor { query += "&cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? cursor)" }
            let page: PullResponse
            do {
                page = try JSONDecoder().decode(PullResponse.self, from: try await get(query))
            } catch let error as RelayUpstream.Failure {
                throw error
            } catch {
                throw RelayUpstream.Failure(description: "the server's answer to a pull is not one this relay reads")
            }
            if !page.changes.isEmpty { try await apply(page.changes) }
            try await storage.setRelayCursor(page.cursor, collection: collection, scope: scope)
            cursor = page.cursor
            if !page.hasMore { return }
        }
    }

    /// Applies the server's changes as the server's writes.
    func apply(_ changes: [Change]) async throws {
        let identity = Identity(
            tenant: configuration.tenant, userId: Self.upstreamDevice, role: .organizer, name: "Server")
        let validator = MutationValidator(
            collections: server.collections, earliest: server.earliestTimestamp, maxClockSkew: server.maxClockSkew)
        let received = now()
        let items = changes.map { change in
            let mutation = Mutation(
                idempotencyKey: "\(Self.keyPrefix)\(change.collection):\(change.scope):\(change.recordId):v\(change.version)",
                collection: change.collection, recordId: change.recordId, scope: change.scope.isEmpty ? nil : change.scope,
                op: change.tombstone ? .delete : .upsert, fields: change.tombstone ? [:] : change.fields,
                clientTimestamp: change.updatedAt)
            return validator.item(for: mutation, by: identity, now: received)
        }
        var context = PushContext(
            tenant: configuration.tenant, deviceId: Self.upstreamDevice, userId: identity.userId, userName: identity.name,
            role: .organizer, receivedAt: Timestamp(received))
        context.serverVersions = Dictionary(
            changes.map { (RecordKey(collection: $0.collection, recordId: $0.recordId, scope: $0.scope), $0.version) },
            uniquingKeysWith: max)
        let results = try await storage.push(items, context: context, collections: server.collections)
        let refused = results.filter { $0.status == .rejected }
        if !refused.isEmpty {
            logger.notice(
                "relay: some of the server's changes do not apply here",
                metadata: ["count": "\(refused.count)", "code": "\(refused[0].error?.code.rawValue ?? "")"])
        }
    }
}
