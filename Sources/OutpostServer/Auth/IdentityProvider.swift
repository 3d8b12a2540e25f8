import AsyncHTTPClient
import Foundation
import JWTKit
import Logging
import OutpostProtocol

/// An organization's own identity provider (Firebase Auth, Supabase Auth, Auth0, Keycloak, Entra ID): where
/// it publishes its signing keys, what its tokens must say, and where Outpost's tenant, user, role and name
/// are in them.
public struct IdentityProviderConfiguration: Sendable, Hashable {
    /// Where the provider's JSON Web Key Set is.
    public enum Keys: Sendable, Hashable {
        /// Fetched over HTTP(S), cached, fetched again on a key id it does not hold and every ``refreshInterval``.
        case url(URL)
        /// Read from a file at start-up and every ``refreshInterval``.
        case file(String)
    }

    public var keys: Keys
    /// The `iss` every token must carry.
    public var issuer: String
    /// A value `aud` must carry (a string, or one of an array).
    public var audience: String
    /// The dotted path of the tenant claim, such as `app_metadata.tenant`; ignored when ``tenant`` is set.
    public var tenantClaim: String
    /// One tenant for every token, for a provider that serves a single organization.
    public var tenant: String?
    /// The dotted path of the user id (`sub` by default).
    public var userClaim: String
    /// The dotted path of the role: `staff`, `supervisor`, `organizer` or `admin`, or an array holding some.
    public var roleClaim: String
    /// The role of a token without one; nil refuses such tokens.
    public var defaultRole: Role?
    /// The dotted path of the display name; the user id stands in when it is missing.
    public var nameClaim: String
    /// How often a fetched key set is fetched again while nothing asks sooner.
    public var refreshInterval: Duration
    /// The least time between two fetches caused by an unknown key id, so that tokens with made-up key ids
    /// cannot make the server hammer the provider.
    public var unknownKeyInterval: Duration
    /// Where the last key set fetched from a URL is kept, for a server that must sign people in without the
    /// internet (a venue relay started while the venue's line is down); nil keeps none.
    public var cacheFile: String?

    public init(
        keys: Keys, issuer: String, audience: String, tenantClaim: String = "tenant", tenant: String? = nil,
        userClaim: String = "sub", roleClaim: String = "role", defaultRole: Role? = nil, nameClaim: String = "name",
        refreshInterval: Duration = .seconds(3600), unknownKeyInterval: Duration = .seconds(30)
    ) {
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.tenantClaim = tenantClaim
        self.tenant = tenant
        self.userClaim = userClaim
        self.roleClaim = roleClaim
        self.defaultRole = defaultRole
        self.nameClaim = nameClaim
        self.refreshInterval = refreshInterval
        self.unknownKeyInterval = unknownKeyInterval
    }
}

/// What a bearer token proved.
enum TokenVerdict: Sendable {
    case valid(Identity, expires: Date)
    case invalid
    /// The provider's keys could not be loaded: the token cannot be judged, and the request is retried later.
    case keysUnavailable
}

/// Verifies the tokens of an organization's identity provider against its published keys (RS256, ES256 and
/// EdDSA, and the other asymmetric algorithms of a JWKS), keeping the key set current.
///
/// A token is accepted when its header names a key of the set and that key's own algorithm, its signature
/// verifies, `iss` and `aud` are the configured ones, its times meet the ``TokenRules``, and the mapped claims
/// give a valid tenant, user and role.
package actor IdentityProvider {
    /// The algorithms a provider's token may name. Symmetric ones are never taken from a key set, and `none` never.
    static let algorithms: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
    /// The largest key set read.
    static let maxKeySetBytes = 1 << 20

    let configuration: IdentityProviderConfiguration
    private let rules: TokenRules
    private let fetch: @Sendable () async throws -> Data
    private let logger: Logger
    private var keys: JWTKeyCollection?
    private var keyIds: Set<String> = []
    private var fetchedAt: Date?
    /// When a fetch last failed: until ``IdentityProviderConfiguration/unknownKeyInterval`` has passed, requests
    /// are not held up by another attempt.
    private var failedAt: Date?
    private var unknownKeyFetchAt: Date?
    private var fetching: Task<Bool, any Error>?
    /// The keys of the set the server cannot use, by key id and type, each logged once.
    private var skippedKeys: Set<String> = []
    /// How many times the key set was fetched: for metrics and tests.
    private(set) var fetches = 0

    package init(configuration: IdentityProviderConfiguration, rules: TokenRules, logger: Logger) {
        self.configuration = configuration
        self.rules = rules
        self.logger = logger
        self.fetch = { [keys = configuration.keys] in try await Self.read(keys) }
    }

    /// Loads the key set now: at start-up, so that the first requests do not wait for it.
    package func load(now: Date) async throws {
        try await refresh(now: now)
    }

    func verdict(_ token: String, now: Date) async -> TokenVerdict {
        guard let header = TokenHeader(token: token), Self.algorithms.contains(header.alg) else { return .invalid }
        let due = keys == nil || fetchedAt.map { elapsed(since: $0, now: now) >= configuration.refreshInterval } ?? true
        if due, failedAt.map({ elapsed(since: $0, now: now) >= configuration.unknownKeyInterval }) ?? true {
            try? await refresh(now: now)
        }
        if let kid = header.kid, !keyIds.contains(kid), canFetchForUnknownKey(now: now) {
            unknownKeyFetchAt = now
            try? await refresh(now: now)
        }
        guard let keys else { return .keysUnavailable }
        // A token without a key id is taken only by a set of one key.
        guard let kid = header.kid ?? (keyIds.count == 1 ? keyIds.first : nil), keyIds.contains(kid) else { return .invalid }
        let id = JWKIdentifier(string: kid)
        // The header's algorithm must be the key's own, so that a key is never used under another algorithm.
        guard let key = try? await keys.getKey(for: id, alg: header.alg), key.name == header.alg,
            let claims = try? await keys.verify(token, as: ProviderClaims.self)
        else { return .invalid }
        return identity(from: claims.values, now: now)
    }

    private func canFetchForUnknownKey(now: Date) -> Bool {
        guard case .url = configuration.keys else { return false }
        guard let last = [unknownKeyFetchAt, failedAt].compactMap({ $0 }).max() else { return true }
        return elapsed(since: last, now: now) >= configuration.unknownKeyInterval
    }

    private func elapsed(since then: Date, now: Date) -> Duration {
        .milliseconds(Int64(now.timeIntervalSince(then) * 1000))
    }

    /// Fetches the key set, one fetch at a time: callers that ask while one runs wait for it.
    private func refresh(now: Date) async throws {
        if let fetching {
            _ = try await fetching.value
            return
        }
        let task = Task { [fetch, cacheFile = cacheFile, hasKeys = keys != nil] in
            var data: Data
            var fromCache = false
            do {
                data = try await fetch()
            } catch {
                // Without the provider, and with no keys yet, the set kept on disk stands in until it answers.
                guard !hasKeys, let cacheFile, let kept = FileManager.default.contents(atPath: cacheFile) else { throw error }
                data = kept
                fromCache = true
            }
            // Each key is read on its own: a key the server cannot use (a symmetric key, an unknown type, curve or
            // algorithm) is skipped, never the whole set.
            let set = try JSONDecoder().decode(RawKeySet.self, from: data)
            let collection = JWTKeyCollection()
            var ids: Set<String> = []
            var skipped: [(kid: String, type: String)] = []
            for raw in set.keys {
                let member = { (name: String) -> String? in
                    if case .object(let members) = raw { return members[name]?.stringValue }
                    return nil
                }
                let kid = member("kid")
                let type = member("kty") ?? "?"
                do {
                    let key = try JSONDecoder().decode(JWK.self, from: try JSONEncoder().encode(raw))
                    guard let kid, key.keyIdentifier?.string == kid else {
                        skipped.append((kid ?? "(none)", type))
                        continue
                    }
                    try await collection.add(jwk: key)
                    ids.insert(kid)
                } catch {
                    skipped.append((kid ?? "(none)", type))
                }
            }
            await self.logSkipped(skipped)
            guard !ids.isEmpty else { throw IdentityProviderError("the key set has no usable key with a key id") }
            if let cacheFile, !fromCache { Self.keep(data, at: cacheFile) }
            await self.install(collection, ids: ids, now: now, fromCache: fromCache)
            return fromCache
        }
        fetching = task
        defer { fetching = nil }
        do {
            // Keys read from the cache: the provider was not reached, and is asked again after the interval.
            failedAt = try await task.value ? now : nil
        } catch {
            failedAt = now
            logger.warning("the identity provider's keys could not be loaded", metadata: ["reason": "\(error)"])
            throw error
        }
    }

    /// Logs each key the server cannot use once, by its id and type.
    private func logSkipped(_ skipped: [(kid: String, type: String)]) {
        for key in skipped where skippedKeys.insert("\(key.kid)\u{0}\(key.type)").inserted {
            logger.notice(
                "a key of the identity provider's set is skipped: the server cannot use it", metadata: ["kid": "\(key.kid)", "kty": "\(key.type)"])
        }
    }

    /// A set read from the cache counts as not fetched: the provider is asked again at the next request after
    /// ``IdentityProviderConfiguration/unknownKeyInterval``.
    private func install(_ collection: JWTKeyCollection, ids: Set<String>, now: Date, fromCache: Bool) {
        keys = collection
        keyIds = ids
        fetchedAt = fromCache ? nil : now
        if fromCache {
            logger.notice("the identity provider cannot be reached: its keys kept on disk stand in")
        } else {
            fetches += 1
        }
    }

    /// The cache file of URL keys, when one is configured.
    private var cacheFile: String? {
        guard case .url = configuration.keys else { return nil }
        return configuration.cacheFile
    }

    /// Writes the key set (public keys only) to `path`, replacing the one before at once.
    nonisolated static func keep(_ data: Data, at path: String) {
        let url = URL(fileURLWithPath: path)
        try? data.write(to: url, options: .atomic)
        try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
    }

    /// The claims as Outpost's identity, or `invalid`.
    private func identity(from claims: [String: JSONValue], now: Date) -> TokenVerdict {
        // A time is a number of seconds (RFC 7519 NumericDate); one of another type makes the token invalid,
        // never a token without that time.
        for name in ["exp", "iat", "nbf"] {
            switch claims[name] {
            case nil, .integer?, .number?: continue
            default: return .invalid
            }
        }
        func date(_ name: String) -> Date? {
            switch claims[name] {
            case .integer(let seconds): return Date(timeIntervalSince1970: Double(seconds))
            case .number(let seconds): return Date(timeIntervalSince1970: seconds)
            default: return nil
            }
        }
        guard claims["iss"]?.stringValue == configuration.issuer else { return .invalid }
        switch claims["aud"] {
        case .string(let audience) where audience == configuration.audience: break
        case .array(let audiences) where audiences.contains(.string(configuration.audience)): break
        default: return .invalid
        }
        guard let expires = date("exp"), rules.accepts(expires: expires, issuedAt: date("iat"), notBefore: date("nbf"), now: now)
        else { return .invalid }
        let tenant = configuration.tenant ?? Self.value(at: configuration.tenantClaim, in: claims)?.stringValue
        let role = Self.value(at: configuration.roleClaim, in: claims).map(Self.role(in:)) ?? configuration.defaultRole
        guard let tenant, Identifier.isValid(tenant), let user = Self.value(at: configuration.userClaim, in: claims)?.stringValue,
            Identifier.isValid(user), let role
        else { return .invalid }
        let name = Self.value(at: configuration.nameClaim, in: claims)?.stringValue ?? user
        return .valid(Identity(tenant: tenant, userId: user, role: role, name: name), expires: expires)
    }

    /// The role a claim names: a string, or the highest Outpost role in an array of role names (as Keycloak's
    /// `realm_access.roles` and Entra ID's `roles` carry them, beside roles of other applications). A claim
    /// that names no Outpost role gives none: the token is refused, not given the default.
    static func role(in claim: JSONValue) -> Role? {
        switch claim {
        case .string(let name): return Role(rawValue: name)
        case .array(let names): return names.compactMap { $0.stringValue.flatMap(Role.init(rawValue:)) }.max()
        default: return nil
        }
    }

    /// The value at a dotted path such as `app_metadata.tenant`; a claim whose own name has a dot is found whole first.
    static func value(at path: String, in claims: [String: JSONValue]) -> JSONValue? {
        if let whole = claims[path] { return whole }
        var current: JSONValue = .object(claims)
        for part in path.split(separator: ".") {
            guard case .object(let members) = current, let next = members[String(part)] else { return nil }
            current = next
        }
        return current
    }

    /// Reads a key set from its source.
    static func read(_ keys: IdentityProviderConfiguration.Keys) async throws -> Data {
        switch keys {
        case .file(let path):
            guard let data = FileManager.default.contents(atPath: path) else {
                throw IdentityProviderError("cannot read the key set \(path)")
            }
            return data
        case .url(let url):
            var request = HTTPClientRequest(url: url.absoluteString)
            request.headers.add(name: "Accept", value: "application/json")
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
            guard response.status == .ok else {
                throw IdentityProviderError("the key set answered HTTP \(response.status.code)")
            }
            return Data(buffer: try await response.body.collect(upTo: maxKeySetBytes))
        }
    }
}

/// The identity provider's keys could not be read.
struct IdentityProviderError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A provider's token payload, every claim kept: which ones matter is configuration.
struct ProviderClaims: JWTPayload {
    var values: [String: JSONValue]

    init(from decoder: any Decoder) throws {
        values = try decoder.singleValueContainer().decode([String: JSONValue].self)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(values)
    }

    // Times, issuer and audience are checked against the configuration and the injected clock after.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// A key set as published: its keys read one by one, so that one the server cannot read skips only itself.
private struct RawKeySet: Decodable {
    var keys: [JSONValue]
}
