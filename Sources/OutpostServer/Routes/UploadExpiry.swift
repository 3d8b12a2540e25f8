import Foundation
import Logging
import OutpostProtocol
import ServiceLifecycle

/// Forgets uploads that took no byte for longer than the configuration's ``ServerConfiguration/uploadLifetime``,
/// unfinished, with their bytes, so that abandoned uploads do not hold disk for ever. A device that comes back for one finds
/// none (`GET /v1/uploads` answers 404) and sends the file again from its start.
///
/// It looks every ``interval``; with several servers on one database each looks, and a file is forgotten once.
struct UploadExpiry<Storage: SyncStorage>: Service {
    let storage: Storage
    let lifetime: Duration
    let clock: any Clock<Duration>
    let now: @Sendable () -> Date
    let logger: Logger
    let metrics: ServerMetrics
    var interval: Duration = .seconds(3600)

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await look()
                do { try await clock.sleep(for: interval) } catch { return }
            }
        }
    }

    /// Forgets the unfinished uploads that took no byte for ``lifetime``; how many.
    @discardableResult
    func look() async -> Int {
        let before = Timestamp(now()).millisecondsSince1970 - lifetime.milliseconds
        do {
            let forgotten = try await storage.discardStaleUploads(before: before)
            if forgotten > 0 {
                logger.info("unfinished uploads expired", metadata: ["count": "\(forgotten)"])
                metrics.uploads[.expired]?.increment(by: Int64(forgotten))
            }
            return forgotten
        } catch {
            // A storage error says what failed, never a query or a stored value.
            let reason = (error as? StorageError)?.description ?? "storage failure"
            logger.warning("unfinished uploads could not be expired", metadata: ["reason": "\(reason)"])
            return 0
        }
    }
}
