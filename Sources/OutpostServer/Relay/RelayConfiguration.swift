import Foundation
import OutpostProtocol

/// A server that runs as a venue relay: the venue's devices sync with it, and it forwards what they write to the
/// server upstream, exactly once each, and brings its events' records down.
public struct RelayConfiguration: Sendable {
    /// The server's base URL, such as `https://sync.example.org`.
    public var upstream: URL
    /// The relay token the organizer created upstream (`outpost token --role relay --scope E`).
    public var token: String
    /// The tenant the token names: the relay serves that organization's devices only.
    public var tenant: String
    /// The events the relay serves: a subset of its token's scopes.
    public var scopes: [String]
    /// The most mutations one forward carries.
    public var batchSize = 500
    /// How long one forward may take before it counts as failed and is sent again.
    public var timeout: Duration = .seconds(30)
    /// How often a relay with nothing to forward looks again, and brings its events' records down.
    public var interval: Duration = .milliseconds(250)
    /// How often the relay tells the server its backlog and the heartbeats of its devices, for the server's monitor.
    public var reportInterval: Duration = .seconds(15)
    /// The longest wait between two tries while the line upstream is down: short, because a venue has one relay,
    /// and the doors wait on it once the line is back.
    public var longestBackoff: Duration = .seconds(5)

    public struct Error: Swift.Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Reads the tenant and scopes from `token`'s claims; `scopes`, when given, narrows them.
    ///
    /// The token is not verified here (the relay need not hold the upstream's secret): upstream verifies it on
    /// every request, and a relay started with a token that is not a relay's is refused before it serves anyone.
    public init(upstream: URL, token: String, scopes: [String] = []) throws {
        guard let scheme = upstream.scheme?.lowercased(), scheme == "http" || scheme == "https", upstream.host != nil else {
            throw Error(description: "--upstream must be an http or https URL")
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
            let claims = try? JSONDecoder().decode(Claims.self, from: Data(payload))
        else { throw Error(description: "the upstream token is not a JWT") }
        guard claims.role == "relay", let granted = claims.scopes, !granted.isEmpty, Identifier.isValid(claims.tenant)
        else {
            throw Error(description: "the upstream token is not a relay's: create one with outpost token --role relay --scope EVENT")
        }
        if let outside = scopes.first(where: { !granted.contains($0) }) {
            throw Error(description: "the upstream token does not name \(outside) among its scopes")
        }
        self.upstream = upstream
        self.token = token
        self.tenant = claims.tenant
        self.scopes = scopes.isEmpty ? granted : scopes
    }

    private struct Claims: Decodable {
        var tenant: String
        var role: String
        var scopes: [String]?
    }

    /// Why the relay does not take `mutation` from `person`, or nil: the relay takes only what it can forward.
    /// Its answer is `not_carried_by_relay`, which a device keeps queued for the server; a key that names the
    /// server's own writes at the relay (`upstream:`) is refused for good.
    func refusal(of mutation: Mutation, by person: Identity) -> MutationResult? {
        let key = mutation.idempotencyKey
        guard !key.hasPrefix(RelayMirror<SQLiteStorage>.keyPrefix) else {
            return .rejected(key, .invalidIdempotencyKey, "idempotency keys starting \"upstream:\" name the server's writes at a relay")
        }
        guard person.tenant == tenant else {
            return .rejected(key, .notCarriedByRelay, "this venue relay serves another organization; sync with the server")
        }
        guard person.role <= RelayGrant.highestForwardedRole else {
            return .rejected(key, .notCarriedByRelay, "a venue relay carries no admin's writes; sync with the server")
        }
        guard let scope = mutation.scope, scopes.contains(scope) else {
            return .rejected(
                key, .notCarriedByRelay,
                "this venue relay carries \(scopes.joined(separator: ", ")) only; it goes when the server can be reached")
        }
        return nil
    }
}
