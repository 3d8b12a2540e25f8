import Foundation
import Hummingbird
import OutpostProtocol
import Prometheus

/// The server's Prometheus metrics, served at `GET /metrics`.
///
/// One registry per application, handed in by the caller: no global metrics system, so two servers in one
/// process (as in tests) never share counts. Counters and histograms are safe to use from any task.
package final class ServerMetrics: Sendable {
    package let registry: PrometheusCollectorRegistry
    let pushes: Counter
    let mutations: [MutationResult.Status: Counter]
    let pulls: Counter
    let snapshots: Counter
    let heartbeats: Counter
    let persistentFailures: Counter
    let rejectedRecords: Counter
    let devices: [DeviceState: Gauge]
    let requestsRunning: Gauge
    let requestsWaiting: Gauge
    let bodiesArriving: Gauge
    /// Connector batches, by whether the receiver took them.
    let connectorBatches: [Bool: Counter]
    let connectorChanges: Counter
    let connectorsFailing: Gauge
    /// A venue relay's writes not yet taken upstream, and the age of the oldest, in seconds.
    let relayBacklog: Gauge
    let relayBacklogAge: Gauge
    /// A venue relay's writes the server took, and those it refused.
    let relayForwarded: Counter
    let relayRefused: Counter
    /// File bytes stored by uploads, and uploads by how they ended.
    let uploadBytes: Counter
    let uploads: [UploadEnd: Counter]
    /// The bytes the tenants' files hold, complete and in uploads not finished (by `complete`).
    let fileBytes: [Bool: Gauge]

    /// How an upload ended.
    enum UploadEnd: String, CaseIterable {
        /// Its last byte in, its digest checked.
        case complete
        /// Its bytes did not have the digest they were sent under: discarded.
        case digestMismatch = "digest_mismatch"
        /// Bytes it counted were gone from the disk at its end (a crash before they were flushed): discarded.
        case bytesMissing = "bytes_missing"
        /// Unfinished past the upload lifetime: forgotten.
        case expired
    }

    static let latencyBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2),
        .seconds(5),
    ]

    package init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        func counter(_ name: String, _ help: String, _ labels: [(String, String)] = []) -> Counter {
            registry.makeCounter(
                descriptor: MetricNameDescriptor(metricName: name, unitName: "total", helpText: help), labels: labels)
        }
        pushes = counter("outpost_pushes", "Push requests accepted")
        let statuses = MutationResult.Status.allCases
        mutations = Dictionary(
            uniqueKeysWithValues: statuses.map {
                ($0, counter("outpost_mutations", "Mutations by outcome", [("status", $0.rawValue)]))
            })
        pulls = counter("outpost_pulls", "Pull requests served")
        snapshots = counter("outpost_snapshots", "Snapshot pages served")
        heartbeats = counter("outpost_heartbeats", "Device heartbeats received")
        persistentFailures = counter(
            "outpost_persistent_sync_failures", "Records reported as failing to sync for over a day (each counted once)")
        rejectedRecords = counter(
            "outpost_rejected_records", "Records devices report the server refused, waiting for a person (each counted once)")
        func gauge(_ name: String, _ help: String, _ labels: [(String, String)] = []) -> Gauge {
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
        }
        devices = Dictionary(
            uniqueKeysWithValues: DeviceState.allCases.map { state in
                let help = "Devices seen in the last day, by state (ok, stale after 10 min, offline after 30 min)"
                return (state, gauge("outpost_devices", help, [("state", state.rawValue)]))
            })
        requestsRunning = gauge("outpost_http_requests_running", "/v1 requests running now")
        requestsWaiting = gauge("outpost_http_requests_waiting", "/v1 requests waiting for their turn now")
        bodiesArriving = gauge(
            "outpost_http_bodies_arriving", "/v1 requests whose body is still arriving, holding no place meanwhile")
        connectorBatches = [
            true: counter("outpost_connector_batches", "Connector batches sent, by outcome", [("result", "delivered")]),
            false: counter("outpost_connector_batches", "Connector batches sent, by outcome", [("result", "failed")]),
        ]
        connectorChanges = counter("outpost_connector_changes", "Changes delivered by connectors")
        connectorsFailing = gauge(
            "outpost_connectors_failing", "Connectors whose last \(Connector.failingAfter) or more batches were not taken")
        relayBacklog = gauge("outpost_relay_backlog", "A venue relay's writes not yet taken by the server upstream")
        relayBacklogAge = gauge(
            "outpost_relay_backlog_age_seconds", "How long the oldest write a venue relay holds has waited for the server")
        relayForwarded = counter("outpost_relay_forwarded", "Writes a venue relay forwarded that the server took")
        relayRefused = counter("outpost_relay_refused", "Writes a venue relay forwarded that the server refused")
        uploadBytes = counter("outpost_upload_bytes", "File bytes stored by uploads")
        uploads = Dictionary(
            uniqueKeysWithValues: UploadEnd.allCases.map {
                ($0, counter("outpost_uploads", "Uploads by how they ended", [("result", $0.rawValue)]))
            })
        fileBytes = Dictionary(
            uniqueKeysWithValues: [true, false].map { complete in
                let help = "Bytes the tenants' files hold: complete, and received by unfinished uploads"
                return (complete, gauge("outpost_file_bytes", help, [("state", complete ? "complete" : "unfinished")]))
            })
    }

    func count(_ results: [MutationResult]) {
        pushes.increment()
        for result in results { mutations[result.status]?.increment() }
    }

    /// The latency histogram of one route, method and status.
    func latency(route: String, method: String, status: Int) -> DurationHistogram {
        registry.makeDurationHistogram(
            descriptor: MetricNameDescriptor(
                metricName: "outpost_http_request_duration", unitName: "seconds", helpText: "Request latency by route"),
            labels: [("route", route), ("method", method), ("status", String(status))],
            buckets: Self.latencyBuckets)
    }

    /// The exposition text, with the device and file gauges read from storage first, so that every server sharing
    /// one database reports the same devices and files.
    func exposition(
        storage: some MonitorStorage & ConnectorStorage & FileStorage, gate: AdmissionGate, now: Date
    ) async throws -> String {
        let counts = try await storage.deviceStateCounts(now: Timestamp(now).millisecondsSince1970)
        for (state, gauge) in devices { gauge.set(to: Double(counts[state] ?? 0)) }
        connectorsFailing.set(to: Double(try await storage.failingConnectorCount()))
        let files = try await storage.storedFileBytes()
        fileBytes[true]?.set(to: Double(files.complete))
        fileBytes[false]?.set(to: Double(files.unfinished))
        let admission = gate.snapshot
        requestsRunning.set(to: Double(admission.running))
        requestsWaiting.set(to: Double(admission.waiting))
        bodiesArriving.set(to: Double(admission.arriving))
        return registry.emitToString()
    }
}

/// Records every request's latency under its route pattern (never its concrete path, which could hold ids).
struct MetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let start = ContinuousClock.now
        var status = 500
        defer {
            metrics.latency(route: context.endpointPath ?? "unmatched", method: request.method.rawValue, status: status)
                .record(ContinuousClock.now - start)
        }
        do {
            let response = try await next(request, context)
            status = response.status.code
            return response
        } catch let error as any HTTPResponseError {
            status = error.status.code
            throw error
        }
    }
}
