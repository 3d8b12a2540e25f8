import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOFoundationCompat
import OutpostProtocol
import ServiceLifecycle

/// Delivers every connector's changes, in commit order, in signed batches (see ``ConnectorBatch``).
///
/// A connector is delivered by the one server process that holds its lease; the others pass it by until the lease
/// runs out (a server that was killed), so several servers on one database deliver each batch once. The cursor
/// moves only after the receiver took a batch, and only from where the batch started: a batch not taken is sent
/// again, after 1, 2, 4 … seconds (at most 5 minutes, less a random part so that receivers coming back are not
/// all met at once), and never passed over.
struct ConnectorDelivery<Storage: SyncStorage>: Service {
    let storage: Storage
    let clock: any Clock<Duration>
    let now: @Sendable () -> Date
    let logger: Logger
    let metrics: ServerMetrics
    /// Sends a batch; throws unless the receiver took it.
    let send: @Sendable (_ connector: Connector, _ body: [UInt8], _ delivery: String) async throws -> Void
    /// Seals the cursors batches carry (see ``CursorSealer``).
    let sealer: @Sendable () throws -> CursorSealer
    /// Signs the links to files that batches carry, when the server has a public address (see ``FileLinks``).
    var links: @Sendable () throws -> FileLinks? = { nil }
    /// This process's name in leases.
    let owner = "server-\(UUID().uuidString)"
    /// How often a caught-up connector looks for new changes.
    var interval: Duration = .milliseconds(250)
    /// How often the list of connectors is read, to start delivering new ones and ones whose lease ran out.
    var listInterval: Duration = .seconds(1)
    /// A lease outlasts a delivery's longest wait, so that it is never taken from a server still sending.
    var lease: Duration = .seconds(20)
    /// The most changes, and stored bytes, a batch carries.
    var batchSize = 100
    var batchBytes = 1 << 20
    static var longestBackoff: Duration { .seconds(300) }

    private struct Key: Hashable, Sendable {
        var tenant: String
        var id: String
    }

    func run() async throws {
        let working = NIOLockedValueBox<Set<Key>>([])
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                // Until the list is first read the schema may still be migrating: the failures are not reported.
                var listed = false
                let started = ContinuousClock.now
                while !Task.isCancelled {
                    do {
                        for connector in try await storage.activeConnectors() {
                            let key = Key(tenant: connector.tenant, id: connector.id)
                            guard working.withLockedValue({ $0.insert(key).inserted }) else { continue }
                            group.addTask {
                                await work(key)
                                working.withLockedValue { _ = $0.remove(key) }
                            }
                        }
                        listed = true
                    } catch {
                        if listed || ContinuousClock.now - started > .seconds(60) {
                            logger.warning("connectors: the list could not be read", metadata: ["error": "\(type(of: error))"])
                        }
                    }
                    do { try await clock.sleep(for: listInterval) } catch { break }
                }
            }
        }
        // Another server may take them at once instead of when the leases run out.
        try? await storage.releaseConnectors(owner: owner)
    }

    /// Delivers one connector while this process holds its lease and it is neither paused nor removed. The lease
    /// is renewed when half of it is gone, and before each batch for longer than the batch's send can take.
    private func work(_ key: Key) async {
        var leasedUntil: Int64 = 0
        while !Task.isCancelled {
            do {
                let time = milliseconds(now())
                if time >= leasedUntil - lease.milliseconds / 2 {
                    guard
                        try await storage.leaseConnector(
                            tenant: key.tenant, id: key.id, owner: owner, now: time, until: time + lease.milliseconds)
                    else { return }
                    leasedUntil = time + lease.milliseconds
                }
                guard let connector = try await storage.connector(tenant: key.tenant, id: key.id), !connector.paused else {
                    return
                }
                if connector.nextAttemptAt > time {
                    try await clock.sleep(for: min(.milliseconds(connector.nextAttemptAt - time), lease / 4))
                    continue
                }
                switch try await deliverNext(connector) {
                case .sent: leasedUntil = milliseconds(now()) + lease.milliseconds / 2
                case .nothing: try await clock.sleep(for: interval)
                case .notHeld: return
                }
            } catch is CancellationError {
                return
            } catch {
                logger.warning(
                    "connectors: a connector could not be read or moved", metadata: ["connector": "\(key.id)", "error": "\(type(of: error))"])
                do { try await clock.sleep(for: interval) } catch { return }
            }
        }
    }

    /// What ``deliverNext(_:)`` did.
    enum Attempt: Equatable {
        /// A batch was sent, taken or not, or a batch not taken turned out to hold nothing any more.
        case sent
        /// There was nothing to send.
        case nothing
        /// This process does not hold the connector's lease, or the connector moved meanwhile: nothing was sent.
        case notHeld
    }

    /// Sends the connector's next batch, when this process holds its lease. A batch not taken is sent again with
    /// nothing past its first end, so that it carries the same delivery id.
    @discardableResult
    func deliverNext(_ connector: Connector) async throws -> Attempt {
        let page = try await storage.pull(
            tenant: connector.tenant, collection: connector.collection, scope: connector.scope.isEmpty ? nil : connector.scope,
            owner: nil, after: connector.cursor, through: connector.pending, limit: batchSize, maxBytes: batchBytes)
        guard !page.changes.isEmpty else {
            guard let pending = connector.pending else { return .nothing }
            // Every change the batch not taken held has changed again since, past its end: it is sent in a later batch.
            let moved = try await storage.connectorDelivered(
                tenant: connector.tenant, id: connector.id, owner: owner, from: connector.cursor, to: pending, changes: 0,
                at: milliseconds(now()))
            return moved ? .sent : .notHeld
        }
        // A batch not taken ends where it did; a batch cut short by its size ends at its last change.
        let end = connector.pending.map { page.hasMore ? page.cursor : $0 } ?? page.cursor
        let batch: ConnectorBatch
        let body: [UInt8]
        do {
            let received = try await storage.receivedTimes(
                tenant: connector.tenant, collection: connector.collection, recordIds: page.changes.map(\.recordId))
            batch = try Self.batch(
                connector, page, through: end, received: received, sealer: try sealer(), links: try links(), now: now())
            body = try ConnectorMessage.body(batch, format: connector.format)
        } catch let error as StorageError where error.code == .unavailable {
            throw error
        } catch {
            try await failed(connector, reason: "a change could not be read into a batch")
            return .sent
        }
        guard
            try await storage.connectorSending(
                tenant: connector.tenant, id: connector.id, owner: owner, from: connector.cursor, to: end,
                until: milliseconds(now()) + lease.milliseconds)
        else { return .notHeld }
        do {
            try await send(connector, body, batch.delivery)
        } catch {
            // A server stopping is no fault of the receiver's.
            if error is CancellationError || Task.isCancelled { throw CancellationError() }
            try await failed(connector, reason: ConnectorMessage.reason(error))
            return .sent
        }
        let moved = try await storage.connectorDelivered(
            tenant: connector.tenant, id: connector.id, owner: owner, from: connector.cursor, to: end,
            changes: page.changes.count, at: milliseconds(now()))
        metrics.connectorBatches[true]?.increment()
        if moved {
            metrics.connectorChanges.increment(by: Int64(page.changes.count))
            if connector.isFailing {
                logger.notice("connector delivering again", metadata: ["connector": "\(connector.id)", "collection": "\(connector.collection)"])
            }
        }
        return .sent
    }

    private func failed(_ connector: Connector, reason: String) async throws {
        metrics.connectorBatches[false]?.increment()
        let time = milliseconds(now())
        // 1 s, 2 s, 4 s … up to the longest, each less up to half at random.
        let ceiling = min(Self.longestBackoff.milliseconds, 1000 << min(connector.failures, 20))
        let wait = ceiling - Int64.random(in: 0...(ceiling / 2))
        guard
            let failures = try await storage.connectorFailed(
                tenant: connector.tenant, id: connector.id, owner: owner, error: reason, at: time, nextAttemptAt: time + wait)
        else { return }
        let metadata: Logger.Metadata = [
            "connector": "\(connector.id)", "collection": "\(connector.collection)", "failures": "\(failures)", "reason": "\(reason)",
        ]
        if failures == Connector.failingAfter {
            logger.error("connector failing: its receiver has not taken a batch; it is tried again from where it stopped", metadata: metadata)
        } else {
            logger.warning("connector batch not taken; tried again later", metadata: metadata)
        }
    }

    /// The batch of `page`, ending at `end`: its delivery id is a digest of the connector, its replays and the two
    /// positions, so a batch sent again carries the same id, and a replay's batches new ones. Its cursors are sealed
    /// for the tenant, as a pull's are: the change order is every tenant's.
    ///
    /// Each file a change's fields name comes with a link to it from `links`, signed at `now`.
    static func batch(
        _ connector: Connector, _ page: PulledChanges, through end: PullCursor, received: [RecordVersion: Int64],
        sealer: CursorSealer, links: FileLinks? = nil, now: Date = Date()
    ) throws -> ConnectorBatch {
        let positions = "\(connector.cursor.xid).\(connector.cursor.seq)\u{0}\(end.xid).\(end.seq)"
        let digest = SHA256.hash(data: Array("\(connector.tenant)\u{0}\(connector.id)\u{0}\(connector.replays)\u{0}\(positions)".utf8))
        let from = sealer.token(connector.cursor, tenant: connector.tenant)
        let to = sealer.token(end, tenant: connector.tenant)
        let changes = try page.changes.map { row in
            let change = try row.change()
            let files = links.map { links in
                FileReference.references(in: change.fields).mapValues { file in
                    links.link(
                        to: file,
                        of: FileLinks.Target(
                            tenant: connector.tenant, collection: connector.collection, scope: change.scope,
                            recordId: change.recordId, sha256: file.sha256),
                        now: now)
                }
            }
            return ConnectorChange(
                recordId: change.recordId, scope: change.scope, version: change.version, tombstone: change.tombstone,
                fields: change.fields, createdAt: change.createdAt, updatedAt: change.updatedAt,
                receivedAt: received[RecordVersion(recordId: row.recordId, scope: row.scope, version: row.version)]
                    .map(Timestamp.init(millisecondsSince1970:)),
                files: files?.isEmpty == false ? files : nil)
        }
        return ConnectorBatch(
            delivery: "dlv_" + digest.prefix(16).map { String(format: "%02x", $0) }.joined(), connector: connector.id,
            collection: connector.collection, scope: connector.scope.isEmpty ? nil : connector.scope,
            sequence: connector.delivered + 1, from: from, to: to, changes: changes)
    }

    private func milliseconds(_ date: Date) -> Int64 { Timestamp(date).millisecondsSince1970 }
}

/// How a batch is written, signed and sent.
enum ConnectorMessage {
    /// The batch as JSON, or for `slack` a readable incoming-webhook message.
    static func body(_ batch: ConnectorBatch, format: NotificationFormat) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        switch format {
        case .json:
            return Array(try encoder.encode(batch))
        case .slack:
            return Array(try encoder.encode(["text": text(batch)]))
        }
    }

    /// "builds: 3 changes", then a line per record (at most 20).
    static func text(_ batch: ConnectorBatch) -> String {
        let shown = 20
        var lines = [
            "\(batch.collection)\(batch.scope.map { " (\($0))" } ?? ""): \(batch.changes.count) change\(batch.changes.count == 1 ? "" : "s")"
        ]
        for change in batch.changes.prefix(shown) {
            let summary = change.fields.keys.sorted().prefix(4).map { "\($0): \(change.fields[$0]!.displayText)" }.joined(separator: ", ")
            lines.append("• \(change.recordId) \(change.tombstone ? "deleted" : "v\(change.version)")\(summary.isEmpty ? "" : " — \(summary)")")
        }
        if batch.changes.count > shown { lines.append("and \(batch.changes.count - shown) more") }
        return lines.joined(separator: "\n")
    }

    /// `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
    static func signature(secret: String, body: [UInt8], at time: Date) -> String {
        let seconds = String(Int64(time.timeIntervalSince1970))
        let code = HMAC<SHA256>.authenticationCode(for: Array("\(seconds).".utf8) + body, using: SymmetricKey(data: Array(secret.utf8)))
        return "t=\(seconds),v1=" + code.map { String(format: "%02x", $0) }.joined()
    }

    /// POSTs a batch, signed; a 2xx answer within `timeout` (its body included) is delivery.
    static func post(_ connector: Connector, body: [UInt8], delivery: String, timeout: Duration, now: Date) async throws {
        try await within(timeout) {
            var request = HTTPClientRequest(url: connector.url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "User-Agent", value: "outpost-connector")
            request.headers.add(name: "Outpost-Delivery", value: delivery)
            request.headers.add(name: "Outpost-Signature", value: signature(secret: connector.secret, body: body, at: now))
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await ReceiverClient.execute(request, timeout: .milliseconds(timeout.milliseconds))
            // Read (up to 64 KiB) so that the connection can be used again.
            _ = try await response.body.collect(upTo: 64 * 1024)
            let status = Int(response.status.code)
            if (200..<300).contains(status) { return }
            let location = response.headers.first(name: "Location")
            guard isAppsScriptAnswer(url: connector.url, status: status, location: location), let location else {
                throw Refused(status: status)
            }
            try await checkAppsScriptOutput(location, delivery: delivery, timeout: timeout)
        }
    }

    /// Runs `work`, failing with ``TimedOut`` once `timeout` has passed: an answer whose body trickles in counts as
    /// none.
    static func within(_ timeout: Duration, _ work: @escaping @Sendable () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await work()
                return true
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return false
            }
            defer { group.cancelAll() }
            guard try await group.next() == true else { throw TimedOut() }
        }
    }

    /// Reads the output of Apps Script's `doPost`, which its 302 points to: the batch was taken only when the output
    /// says so, `{"taken": "<delivery id>"}` (deploy/google-sheets/Code.gs). A script that failed answers an error page.
    static func checkAppsScriptOutput(_ location: String, delivery: String, timeout: Duration) async throws {
        var request = HTTPClientRequest(url: location)
        request.headers.add(name: "User-Agent", value: "outpost-connector")
        let response = try await ReceiverClient.execute(request, timeout: .milliseconds(timeout.milliseconds))
        let output = try await response.body.collect(upTo: 64 * 1024)
        guard response.status.code == 200,
            let answer = try? JSONDecoder().decode([String: String].self, from: Data(buffer: output)),
            answer["taken"] == delivery
        else { throw NotTakenByScript() }
    }

    /// Whether an answer is Google Apps Script's to a web app that ran: a POST to `script.google.com` is answered
    /// 302 to the script's output on `script.googleusercontent.com`. Any other redirect is not taken (and never
    /// followed).
    static func isAppsScriptAnswer(url: String, status: Int, location: String?) -> Bool {
        guard status == 302, let location, URL(string: url)?.host == "script.google.com",
            let target = URL(string: location), target.scheme == "https"
        else { return false }
        return target.host == "script.googleusercontent.com"
    }

    /// The receiver did not answer in time.
    struct TimedOut: Error {}

    /// Apps Script ran, but its output does not say it took the batch.
    struct NotTakenByScript: Error {}

    struct Refused: Error {
        var status: Int
    }

    /// Why a batch was not taken, for the organizer and the log: a status, or what failed; never the URL.
    static func reason(_ error: any Error) -> String {
        if let refused = error as? Refused { return "the receiver answered \(refused.status)" }
        if error is TimedOut { return "the receiver did not answer in time" }
        if error is NotTakenByScript { return "the sheet's script did not take the batch" }
        if error is ReceiverClient.InternalAddress { return ReceiverClient.InternalAddress.reason }
        if let client = error as? HTTPClientError {
            switch client {
            case .deadlineExceeded, .readTimeout, .connectTimeout: return "the receiver did not answer in time"
            default: return "the receiver could not be reached"
            }
        }
        return "the receiver could not be reached"
    }
}
