import Foundation
import NIOConcurrencyHelpers
import OutpostClient
import OutpostProtocol

/// The venue's network in the demo: a switch in front of each device's real HTTP transport. Cut, every
/// call fails as a dropped connection does; restored, calls go through to the server over loopback.
final class VenueNetwork: Sendable {
    private let up = NIOLockedValueBox(true)

    var isUp: Bool {
        get { up.withLockedValue { $0 } }
        set { up.withLockedValue { $0 = newValue } }
    }

    func link(_ transport: any SyncTransport) -> any SyncTransport {
        Link(network: self, transport: transport)
    }

    struct Link: BulkSyncTransport, SyncMonitorTransport {
        let network: VenueNetwork
        let transport: any SyncTransport

        private func check() throws {
            guard network.isUp else { throw TransportError(kind: .network, message: "the venue network is down") }
        }

        func push(_ request: PushRequest) async throws -> PushResponse {
            try check()
            return try await transport.push(request)
        }

        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            try check()
            return try await transport.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
        }

        func snapshot(
            collection: String, scope: String?, continuation: String?, limit: Int?
        ) async throws
            -> SnapshotResponse
        {
            try check()
            return try await transport.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }

        func pullPage(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullPage {
            try check()
            return try await transport.bulkPullPage(collection: collection, scope: scope, cursor: cursor, limit: limit)
        }

        func snapshotPage(
            collection: String, scope: String?, continuation: String?, limit: Int?
        ) async throws
            -> SnapshotPage
        {
            try check()
            return try await transport.bulkSnapshotPage(
                collection: collection, scope: scope, continuation: continuation, limit: limit)
        }

        func health() async throws -> HealthResponse {
            try check()
            return try await transport.health()
        }

        func heartbeat(_ heartbeat: Heartbeat) async throws -> HeartbeatResponse {
            try check()
            return try await transport.monitorHeartbeat(heartbeat)
        }

        func reportFailures(_ report: SyncFailureReport) async throws -> SyncFailureReceipt {
            try check()
            return try await transport.monitorReportFailures(report)
        }
    }
}

/// The demo's voice: colour and bold on a terminal, plain lines in a pipe.
struct Narrator {
    let isTerminal = isatty(STDOUT_FILENO) != 0
    let pause: Duration

    func act(_ number: Int, _ title: String) async {
        if pause > .zero { try? await Task.sleep(for: pause) }
        say("")
        say(isTerminal ? "\u{1B}[1;36m\(number). \(title)\u{1B}[0m" : "\(number). \(title)")
    }

    func line(_ text: String) {
        say("   \(text)")
    }

    func good(_ text: String) {
        say(isTerminal ? "   \u{1B}[32m✓\u{1B}[0m \(text)" : "   ✓ \(text)")
    }

    func warn(_ text: String) {
        say(isTerminal ? "   \u{1B}[33m!\u{1B}[0m \(text)" : "   ! \(text)")
    }

    func bad(_ text: String) {
        say(isTerminal ? "   \u{1B}[31m✗\u{1B}[0m \(text)" : "   ✗ \(text)")
    }
}
