import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
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
                    } catch {
                        logger.warning("connectors: the list could not be read", metadata: ["error": "\(type(of: error))"])
                    }
                    do { try await clock.sleep(for: listInterval) } catch { break }
                }
            }
        }
        // Another server may take them at once instead of when the leases run out.
        try? await storage.releaseConnectors(owner: owner)
    }

    /// Delivers one connector while this process holds its lease and it is neither paused nor removed.
    private func work(_ key: Key) async {
        while !Task.isCancelled {
            do {
                let time = milliseconds(now())
                guard try await storage.leaseConnector(
                    tenant: key.tenant, id: key.id, owner: owner, now: time, until: time + lease.milliseconds),
                    let connector = try await storage.connector(tenant: key.tenant, id: key.id), !connector.paused
                else { return }
                if connector.nextAttemptAt > time {
                    try await clock.sleep(for: min(.milliseconds(connector.nextAttemptAt - time), lease / 4))
                    continue
                }
                guard try await deliverNext(connector) else {
                    try await clock.sleep(for: interval)
                    continue
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

    /// Sends the connector's next batch, when this process holds its lease; false when it has none.
    func deliverNext(_ connector: Connector) async throws -> Bool {
        let page = try await storage.pull(
            tenant: connector.tenant, collection: connector.collection, scope: connector.scope.isEmpty ? nil : connector.scope,
            after: connector.cursor, limit: batchSize, maxBytes: batchBytes)
        guard !page.records.isEmpty else { return false }
        let received = try await storage.receivedTimes(
            tenant: connector.tenant, collection: connector.collection, recordIds: page.records.map(\.recordId))
        let batch = try Self.batch(connector, page, received: received)
        let body = try ConnectorMessage.body(batch, format: connector.format)
        do {
            try await send(connector, body, batch.delivery)
        } catch {
            try await failed(connector, reason: ConnectorMessage.reason(error))
            return true
        }
        let moved = try await storage.connectorDelivered(
            tenant: connector.tenant, id: connector.id, owner: owner, from: connector.cursor, to: page.cursor,
            changes: page.records.count, at: milliseconds(now()))
        metrics.connectorBatches[true]?.increment()
        if moved {
            metrics.connectorChanges.increment(by: Int64(page.records.count))
            if connector.isFailing {
                logger.notice("connector delivering again", metadata: ["connector": "\(connector.id)", "collection": "\(connector.collection)"])
            }
        }
        return true
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

    /// The batch of `page`: its delivery id is a digest of the connector, its replays and the two cursors, so the
    /// same changes sent again carry the same id, and a replay's batches new ones.
    static func batch(_ connector: Connector, _ page: PulledChanges, received: [RecordVersion: Int64]) throws -> ConnectorBatch {
        let from = connector.cursor.token
        let to = page.cursor.token
        let digest = SHA256.hash(data: Array("\(connector.tenant)\u{0}\(connector.id)\u{0}\(connector.replays)\u{0}\(from)\u{0}\(to)".utf8))
        let changes = try page.records.map { row in
            let change = try row.change()
            return ConnectorChange(
                recordId: change.recordId, scope: change.scope, version: change.version, tombstone: change.tombstone,
                fields: change.fields, createdAt: change.createdAt, updatedAt: change.updatedAt,
                receivedAt: received[RecordVersion(recordId: row.recordId, scope: row.scope, version: row.version)]
                    .map(Timestamp.init(millisecondsSince1970:)))
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
        var lines = ["\(batch.collection)\(batch.scope.map { " (\($0))" } ?? ""): \(batch.changes.count) change\(batch.changes.count == 1 ? "" : "s")"]
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

    /// POSTs a batch, signed, within `timeout`; a 2xx answer is delivery.
    static func post(_ connector: Connector, body: [UInt8], delivery: String, timeout: Duration, now: Date) async throws {
        var request = HTTPClientRequest(url: connector.url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "outpost-connector")
        request.headers.add(name: "Outpost-Delivery", value: delivery)
        request.headers.add(name: "Outpost-Signature", value: signature(secret: connector.secret, body: body, at: now))
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await NotificationClient.shared.execute(request, timeout: .milliseconds(timeout.milliseconds))
        // The answer's body is not wanted; it is read (up to 64 KiB) so that the connection can be used again.
        _ = try? await response.body.collect(upTo: 64 * 1024)
        let status = Int(response.status.code)
        guard (200..<300).contains(status) || isAppsScriptAnswer(url: connector.url, status: status, location: response.headers.first(name: "Location"))
        else { throw Refused(status: status) }
    }

    /// Whether an answer is Google Apps Script's to a web app that ran: a POST to `script.google.com` is answered
    /// 302 to the script's output on `script.googleusercontent.com`, after `doPost` has run. Any other redirect is
    /// not taken (and never followed).
    static func isAppsScriptAnswer(url: String, status: Int, location: String?) -> Bool {
        guard status == 302, let location, URL(string: url)?.host == "script.google.com",
            let target = URL(string: location), target.scheme == "https"
        else { return false }
        return target.host == "script.googleusercontent.com"
    }

    struct Refused: Error {
        var status: Int
    }

    /// Why a batch was not taken, for the organizer and the log: a status, or what failed; never the URL.
    static func reason(_ error: any Error) -> String {
        if let refused = error as? Refused { return "the receiver answered \(refused.status)" }
        if let client = error as? HTTPClientError {
            switch client {
            case .deadlineExceeded, .readTimeout, .connectTimeout: return "the receiver did not answer in time"
            default: return "the receiver could not be reached"
            }
        }
        return "the receiver could not be reached"
    }
}
