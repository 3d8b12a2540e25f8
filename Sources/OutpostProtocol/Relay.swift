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
