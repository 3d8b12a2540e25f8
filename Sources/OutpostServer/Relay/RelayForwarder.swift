import Foundation
import Logging
import NIOConcurrencyHelpers
import OutpostProtocol
import ServiceLifecycle

/// Forwards a relay's journal upstream: the oldest writes first, in batches of consecutive writes of one device,
/// until the journal is empty; then it looks again every ``RelayConfiguration/interval``.
///
/// An entry leaves the journal's waiting list only with the server's answer to it, kept beside it. A forward whose
/// answer never came (the line cut, the relay killed, the server restarted) is sent again, and the server answers
/// the keys it already processed `duplicate`: nothing is applied twice, nothing is passed over, and each device's
/// writes reach the server in the order the device made them. While forwards fail, the relay tries again after
/// 1, 2, 4 … seconds, at most ``RelayConfiguration/longestBackoff``, less a random part.
struct RelayForwarder<Storage: RelayJournalStorage>: Service {
    let storage: Storage
    let configuration: RelayConfiguration
    let clock: any Clock<Duration>
    let now: @Sendable () -> Date
    let logger: Logger
    let metrics: ServerMetrics
    let forward: @Sendable (RelayForwardRequest) async throws -> RelayForwardResponse

    /// How many entries a forward carries now: ``RelayConfiguration/batchSize``, halved after each forward the
    /// server found too large (a server with a smaller `--max-batch-size`, or large records), back to the full size
    /// after the journal empties.
    private let batchSize: NIOLockedValueBox<Int>

    init(
        storage: Storage, configuration: RelayConfiguration, clock: any Clock<Duration>, now: @escaping @Sendable () -> Date,
        logger: Logger, metrics: ServerMetrics, forward: @escaping @Sendable (RelayForwardRequest) async throws -> RelayForwardResponse
    ) {
        self.storage = storage
        self.configuration = configuration
        self.clock = clock
        self.now = now
        self.logger = logger
        self.metrics = metrics
        self.forward = forward
        self.batchSize = NIOLockedValueBox(max(configuration.batchSize, 1))
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var failures = 0
            // Until the journal is first read the schema may still be migrating: such failures are not reported.
            var started = false
            while !Task.isCancelled {
                let wait: Duration
                do {
                    wait = try await forwardNext() ? .zero : configuration.interval
                    started = true
                    if failures > 0 { logger.notice("relay: the line upstream is back", metadata: ["failures": "\(failures)"]) }
                    failures = 0
                } catch is CancellationError {
                    return
                } catch let error as RelayUpstream.Failure where error.status == 413 && batchSize.withLockedValue({ $0 }) > 1 {
                    let smaller = batchSize.withLockedValue { size in
                        size = max(1, size / 2)
                        return size
                    }
                    logger.notice("relay: the server takes smaller forwards", metadata: ["entries": "\(smaller)"])
                    wait = .zero
                } catch let error as RelayUpstream.Failure {
                    failures += 1
                    try? await storage.recordLineFailure(error.description, at: now().milliseconds)
                    if failures == 1 || failures.isMultiple(of: 20) {
                        logger.warning(
                            "relay: a forward failed; tried again later",
                            metadata: ["reason": "\(error.description)", "failures": "\(failures)"])
                    }
                    wait = backoff(after: failures)
                } catch {
                    failures += 1
                    let reason = "the journal could not be read or written"
                    if started && (failures == 1 || failures.isMultiple(of: 20)) {
                        logger.warning("relay: a forward failed; tried again later", metadata: ["reason": "\(reason)", "failures": "\(failures)"])
                    }
                    wait = backoff(after: failures)
                }
                if wait > .zero {
                    do { try await clock.sleep(for: wait) } catch { return }
                }
            }
        }
    }

    /// Forwards the oldest waiting entries; false when there were none.
    func forwardNext() async throws -> Bool {
        let waiting = try await storage.relayWaiting()
        metrics.relayBacklog.set(to: Double(waiting.count))
        metrics.relayBacklogAge.set(to: waiting.oldestAcceptedAt.map { Double(max(0, now().milliseconds - $0)) / 1000 } ?? 0)
        let entries = try await storage.waitingEntries(limit: batchSize.withLockedValue { $0 })
        guard !entries.isEmpty else {
            batchSize.withLockedValue { $0 = max(configuration.batchSize, 1) }
            return false
        }
        let response = try await forward(Self.request(for: entries))
        let results = response.batches.flatMap(\.results)
        guard results.count == entries.count,
            zip(entries, results).allSatisfy({ $0.mutation.idempotencyKey == $1.idempotencyKey })
        else { throw RelayUpstream.Failure(description: "the server's answer does not match the forward") }
        try await storage.recordForwarded(zip(entries.map(\.seq), results).map { ($0, $1) }, at: now().milliseconds)
        let refused = results.count { $0.status == .rejected }
        metrics.relayForwarded.increment(by: Int64(results.count - refused))
        metrics.relayRefused.increment(by: Int64(refused))
        return true
    }

    /// Consecutive entries of one device and person make one batch, so each device's order holds.
    static func request(for entries: [JournalEntry]) -> RelayForwardRequest {
        var batches: [RelayBatch] = []
        for entry in entries {
            if let last = batches.last, last.deviceId == entry.deviceId, last.userId == entry.userId,
                last.role == entry.role, last.userName == entry.userName
            {
                batches[batches.count - 1].mutations.append(entry.mutation)
            } else {
                batches.append(
                    RelayBatch(
                        deviceId: entry.deviceId, userId: entry.userId, userName: entry.userName, role: entry.role,
                        mutations: [entry.mutation]))
            }
        }
        return RelayForwardRequest(batches: batches)
    }

    /// 1 s, 2 s, 4 s … up to the longest, each less up to half at random, so that relays coming back together
    /// do not all meet the server at once.
    func backoff(after failures: Int) -> Duration {
        let ceiling = min(configuration.longestBackoff.milliseconds, 1000 << min(failures - 1, 20))
        return .milliseconds(ceiling - Int64.random(in: 0...(ceiling / 2)))
    }
}
