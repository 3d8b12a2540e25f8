/// The writes one device made at a venue, as its relay forwards them upstream: in the device's order, in the name
/// of the person whose token the relay verified.
public struct RelayBatch: Sendable, Hashable, Codable {
    public var deviceId: String
    /// The person the device's token named: their id, display name and role.
    public var userId: String
    public var userName: String
    public var role: Role
    /// The mutations as the device sent them: the same keys, fields, scope and client times.
    public var mutations: [Mutation]

    public init(deviceId: String, userId: String, userName: String, role: Role, mutations: [Mutation]) {
        self.deviceId = deviceId
        self.userId = userId
        self.userName = userName
        self.role = role
        self.mutations = mutations
    }
}

/// The body of `POST /v1/relay/forward`: batches applied in order, each in a transaction of its own.
public struct RelayForwardRequest: Sendable, Hashable, Codable {
    public var batches: [RelayBatch]

    public init(batches: [RelayBatch]) {
        self.batches = batches
    }
}

/// The answer to `POST /v1/relay/forward`: one result per mutation, batch by batch, as a push answers.
///
/// A key the server processed before is answered `duplicate`, so a relay that forwards a batch again after a
/// lost answer, or a write that reached the server by another path first, is never applied twice.
public struct RelayForwardResponse: Sendable, Hashable, Codable {
    public var batches: [PushResponse]

    public init(batches: [PushResponse]) {
        self.batches = batches
    }
}

/// The body of `POST /v1/relay-tokens`: an organizer creates a venue relay's credential.
public struct RelayTokenRequest: Sendable, Hashable, Codable {
    /// The relay's id, its token's subject, such as `hall-a`.
    public var relayId: String
    /// What the monitor calls it; the id when absent.
    public var name: String?
    /// The events the relay serves.
    public var scopes: [String]
    /// How long the token lasts, in seconds; 3 days when absent.
    public var lifetimeSeconds: Int?

    public init(relayId: String, name: String? = nil, scopes: [String], lifetimeSeconds: Int? = nil) {
        self.relayId = relayId
        self.name = name
        self.scopes = scopes
        self.lifetimeSeconds = lifetimeSeconds
    }
}

/// The answer to `POST /v1/relay-tokens`.
public struct RelayTokenResponse: Sendable, Hashable, Codable {
    /// The bearer token to give `outpost serve --upstream-token` on the venue's laptop.
    public var token: String
    public var expiresAt: Timestamp

    public init(token: String, expiresAt: Timestamp) {
        self.token = token
        self.expiresAt = expiresAt
    }
}

/// A relay's forwards read and written without Codable, as pushes are (see `Push+JSON.swift`): a relay forwards a
/// venue's whole backlog through them when its line returns.
extension RelayBatch {
    init(json: JSONValue, path: String) throws(JSONSyntaxError) {
        guard case .object(let object) = json else { throw JSONShape.error("\(path.dropLast(1)) must be an object") }
        let role = try JSONShape.string(object, "role", in: path)
        guard let known = Role(rawValue: role) else {
            throw JSONShape.error("\(path)role must be staff, supervisor, organizer or admin")
        }
        self.init(
            deviceId: try JSONShape.string(object, "deviceId", in: path),
            userId: try JSONShape.string(object, "userId", in: path),
            userName: try JSONShape.string(object, "userName", in: path), role: known,
            mutations: try JSONShape.array(object, "mutations", in: path) { (value, path) throws(JSONSyntaxError) in
                try Mutation(json: value, path: path)
            })
    }

    func writeJSON(to output: inout [UInt8]) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("deviceId", first: true, to: &output)
        JSONWriter.string(deviceId, to: &output)
        JSONWriter.key("mutations", to: &output)
        try JSONWriter.array(mutations, to: &output) { (mutation, output: inout [UInt8]) throws(JSONSyntaxError) in
            try mutation.writeJSON(to: &output)
        }
        JSONWriter.key("role", to: &output)
        JSONWriter.string(role.rawValue, to: &output)
        JSONWriter.key("userId", to: &output)
        JSONWriter.string(userId, to: &output)
        JSONWriter.key("userName", to: &output)
        JSONWriter.string(userName, to: &output)
        output.append(UInt8(ascii: "}"))
    }
}

extension RelayForwardRequest {
    /// Parses the body of `POST /v1/relay/forward`; an error names the member, never a value.
    public init(jsonBytes bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        try self.init(json: try JSONValue(parsing: bytes))
    }

    /// Reads the body of `POST /v1/relay/forward` from its parsed JSON.
    public init(json: JSONValue) throws(JSONSyntaxError) {
        guard case .object(let object) = json else { throw JSONShape.error("the body must be an object") }
        self.init(
            batches: try JSONShape.array(object, "batches") { (value, path) throws(JSONSyntaxError) in
                try RelayBatch(json: value, path: path)
            })
    }

    /// The request as JSON, keys sorted.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(16 + batches.reduce(0) { $0 + 128 + $1.mutations.count * 256 })
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("batches", first: true, to: &output)
        try JSONWriter.array(batches, to: &output) { (batch, output: inout [UInt8]) throws(JSONSyntaxError) in
            try batch.writeJSON(to: &output)
        }
        output.append(UInt8(ascii: "}"))
        return output
    }
}

extension RelayForwardResponse {
    /// Parses the answer of `POST /v1/relay/forward`.
    public init(jsonBytes bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        guard case .object(let object) = try JSONValue(parsing: bytes) else {
            throw JSONShape.error("a forward's answer must be an object")
        }
        self.init(
            batches: try JSONShape.array(object, "batches") { (value, path) throws(JSONSyntaxError) in
                try PushResponse(json: value, path: path)
            })
    }

    /// The answer as JSON, keys sorted.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        output.append(UInt8(ascii: "{"))
        JSONWriter.key("batches", first: true, to: &output)
        try JSONWriter.array(batches, to: &output) { (batch, output: inout [UInt8]) throws(JSONSyntaxError) in
            try batch.writeJSON(to: &output)
        }
        output.append(UInt8(ascii: "}"))
        return output
    }
}

extension MutationResult {
    /// One result as JSON, keys sorted: what a relay keeps of the server's answer.
    public func jsonBytes() throws(JSONSyntaxError) -> [UInt8] {
        var output: [UInt8] = []
        try writeJSON(to: &output)
        return output
    }

    /// Parses one result, as ``jsonBytes()`` writes it.
    public init(jsonBytes bytes: some Collection<UInt8>) throws(JSONSyntaxError) {
        try self.init(json: try JSONValue(parsing: bytes), path: "")
    }
}

/// The body of `POST /v1/relay/status`: what a relay tells the server of the venue, every 15 seconds while the
/// line is up: its backlog, and the venue's devices as it last heard from them.
public struct RelayStatusReport: Sendable, Hashable, Codable {
    /// Writes the relay holds that the server has not answered yet, and since when the oldest waits.
    public var waiting: Int
    public var oldestWaitingSince: Timestamp?
    /// Why the relay's last forward failed, if it did.
    public var lastError: String?
    public var devices: [RelayDeviceReport]
    /// What the venue's devices reported to the relay as failing for over a day, or refused: the server's
    /// monitor lists them as the relay's own does.
    public var failures: [RelayFailureReport]?

    public init(
        waiting: Int, oldestWaitingSince: Timestamp?, lastError: String?, devices: [RelayDeviceReport],
        failures: [RelayFailureReport]? = nil
    ) {
        self.waiting = waiting
        self.oldestWaitingSince = oldestWaitingSince
        self.lastError = lastError
        self.devices = devices
        self.failures = failures
    }
}

/// A record a venue device reported to its relay: failing to sync for over a day, or refused with a reason.
public struct RelayFailureReport: Sendable, Hashable, Codable {
    public var fingerprint: String
    public var userId: String
    public var collection: String
    public var recordId: String
    public var firstAttempt: Timestamp
    public var lastError: String
    public var kind: SyncFailure.Kind

    public init(
        fingerprint: String, userId: String, collection: String, recordId: String, firstAttempt: Timestamp,
        lastError: String, kind: SyncFailure.Kind
    ) {
        self.fingerprint = fingerprint
        self.userId = userId
        self.collection = collection
        self.recordId = recordId
        self.firstAttempt = firstAttempt
        self.lastError = lastError
        self.kind = kind
    }
}

/// A venue device's latest heartbeat, as the relay took it: under its fingerprint, never its id (the relay and the
/// server derive the same fingerprints from their shared secret).
public struct RelayDeviceReport: Sendable, Hashable, Codable {
    public var fingerprint: String
    public var userId: String
    public var staffName: String
    public var event: String
    public var pendingCount: Int
    public var failedCount: Int
    public var rejectedCount: Int
    public var lastRosterFetch: Timestamp?
    public var appVersion: String
    /// When the relay last heard from the device.
    public var lastSeen: Timestamp

    public init(
        fingerprint: String, userId: String, staffName: String, event: String, pendingCount: Int, failedCount: Int,
        rejectedCount: Int, lastRosterFetch: Timestamp?, appVersion: String, lastSeen: Timestamp
    ) {
        self.fingerprint = fingerprint
        self.userId = userId
        self.staffName = staffName
        self.event = event
        self.pendingCount = pendingCount
        self.failedCount = failedCount
        self.rejectedCount = rejectedCount
        self.lastRosterFetch = lastRosterFetch
        self.appVersion = appVersion
        self.lastSeen = lastSeen
    }
}
