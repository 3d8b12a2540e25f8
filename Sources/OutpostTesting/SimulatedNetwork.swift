import Foundation
import NIOConcurrencyHelpers
import OutpostClient
import OutpostProtocol

/// A deterministic pseudo-random generator (SplitMix64): the same seed gives the same run.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) {
        self.state = seed
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A faulty network in front of an ``InMemoryServer``: it drops requests, drops responses after the server
/// applied them, and delays (by yielding to other tasks), all decided by a seeded generator.
public final class SimulatedNetwork: SyncTransport, Sendable {
    public struct Faults: Sendable {
        public var dropRequest: Double
        public var dropResponse: Double
        public var delay: Double

        public init(dropRequest: Double = 0.2, dropResponse: Double = 0.2, delay: Double = 0.3) {
            self.dropRequest = dropRequest
            self.dropResponse = dropResponse
            self.delay = delay
        }

        public static let none = Faults(dropRequest: 0, dropResponse: 0, delay: 0)
    }

    public let server: InMemoryServer
    private struct State {
        var generator: SeededGenerator
        var faults: Faults
    }

    private let state: NIOLockedValueBox<State>

    public init(server: InMemoryServer, seed: UInt64, faults: Faults = Faults()) {
        self.server = server
        self.state = NIOLockedValueBox(State(generator: SeededGenerator(seed: seed), faults: faults))
    }

    /// Ends (or starts) the faults.
    public func setFaults(_ faults: Faults) {
        state.withLockedValue { $0.faults = faults }
    }

    private func roll(_ probability: KeyPath<Faults, Double>) -> Bool {
        state.withLockedValue { Double.random(in: 0..<1, using: &$0.generator) < $0.faults[keyPath: probability] }
    }

    private func maybeDelay() async {
        if roll(\.delay) {
            let yields = state.withLockedValue { Int.random(in: 1...5, using: &$0.generator) }
            for _ in 0..<yields { await Task.yield() }
        }
    }

    public func push(_ request: PushRequest) async throws -> PushResponse {
        await maybeDelay()
        if roll(\.dropRequest) { throw TransportError(kind: .network, message: "request dropped") }
        let response = await server.push(request)
        await maybeDelay()
        if roll(\.dropResponse) { throw TransportError(kind: .network, message: "response dropped") }
        return response
    }

    public func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
        if roll(\.dropRequest) { throw TransportError(kind: .network, message: "request dropped") }
        return PullResponse(changes: [], cursor: cursor ?? "", hasMore: false)
    }

    public func snapshot(
        collection: String, scope: String?, continuation: String?, limit: Int?
    ) async throws
        -> SnapshotResponse
    {
        if roll(\.dropRequest) { throw TransportError(kind: .network, message: "request dropped") }
        return SnapshotResponse(records: [], total: 0, continuation: nil, cursor: "")
    }

    public func health() async throws -> HealthResponse {
        if roll(\.dropRequest) { throw TransportError(kind: .network, message: "request dropped") }
        return HealthResponse(status: "ok", storage: "ok")
    }
}
