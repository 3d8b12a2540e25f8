import Crypto
import Foundation
import Hummingbird
import OutpostProtocol

/// `/v1/connectors` (organizers): connectors that deliver a collection's changes to a URL outside
/// (``ConnectorDelivery``). Supervisors and staff are refused: a connector sends the whole tenant's records.
/// `/v1/deliveries` tells anyone who may read records whether the connectors have delivered them, and
/// `/v1/deliveries/retry` has the failing ones try them again soon.
struct ConnectorController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration
    let secrets: ServerSecrets
    let now: @Sendable () -> Date

    /// The most connectors one tenant may have.
    static var maxConnectors: Int { 20 }

    /// What `POST /v1/connectors` takes: `collection` and `url`; `scope`, `secret` and `format` when wanted; nothing else.
    struct NewConnector: Decodable {
        var collection: String
        var url: String
        var scope: String?
        var secret: String?
        var format: NotificationFormat?

        private enum Member: String, CodingKey, CaseIterable {
            case collection, url, scope, secret, format
        }

        init(from decoder: any Decoder) throws {
            let members = try decoder.container(keyedBy: AnyMember.self)
            let known = Set(Member.allCases.map(\.rawValue))
            if let unknown = members.allKeys.first(where: { !known.contains($0.stringValue) }) {
                throw DecodingError.dataCorruptedError(
                    forKey: unknown, in: members, debugDescription: "a connector has collection, url, scope, secret and format only")
            }
            let named = try decoder.container(keyedBy: Member.self)
            collection = try named.decode(String.self, forKey: .collection)
            url = try named.decode(String.self, forKey: .url)
            // Present means a value: null is refused, as the schema says.
            scope = named.contains(.scope) ? try named.decode(String.self, forKey: .scope) : nil
            secret = named.contains(.secret) ? try named.decode(String.self, forKey: .secret) : nil
            format = named.contains(.format) ? try named.decode(NotificationFormat.self, forKey: .format) : nil
        }
    }

    /// What `POST /v1/connectors/{id}/replay` takes: the cursor to deliver after, or `start`.
    struct Replay: Decodable {
        var from: String

        init(from decoder: any Decoder) throws {
            let members = try decoder.container(keyedBy: AnyMember.self)
            if let unknown = members.allKeys.first(where: { $0.stringValue != "from" }) {
                throw DecodingError.dataCorruptedError(forKey: unknown, in: members, debugDescription: "a replay has from only")
            }
            from = try members.decode(String.self, forKey: AnyMember(stringValue: "from"))
        }
    }

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.post("connectors", use: add)
        group.get("connectors", use: list)
        group.get("connectors/:connector", use: get)
        group.delete("connectors/:connector", use: remove)
        group.post("connectors/:connector/pause", use: pause)
        group.post("connectors/:connector/resume", use: resume)
        group.post("connectors/:connector/replay", use: replay)
        group.get("deliveries", use: deliveries)
        group.post("deliveries/retry", use: retryDeliveries)
    }

    /// The most record ids one `GET /v1/deliveries` asks about.
    static var maxDeliveryIds: Int { 200 }
    /// How soon after a connector's last failure a retry asked for by a device may try it again, in milliseconds:
    /// asking many times does not flood the receiver.
    static var retrySpacing: Int64 { 5_000 }

    /// `GET /v1/deliveries?collection=C&ids=a,b[&scope=S]` (anyone who may read the records): whether the tenant's
    /// connectors have delivered each record's version the server has, and why the last attempt of one that has
    /// not failed. Records the caller may not read, and ones the server does not have, are left out.
    @Sendable func deliveries(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (records, _) = try await recordDeliveries(request, context: context)
        return try .json(RecordDeliveries(records: records.map(\.delivery)))
    }

    /// `POST /v1/deliveries/retry?collection=C&ids=a,b[&scope=S]` (anyone who may read the records): the failing
    /// connectors that have not delivered these records try again now, or as soon after their last failure as
    /// ``retrySpacing`` allows, instead of at the end of their backoff. Answers as `GET /v1/deliveries` does.
    @Sendable func retryDeliveries(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        let (records, connectors) = try await recordDeliveries(request, context: context)
        let time = Timestamp(now()).millisecondsSince1970
        var moved = false
        for connector in connectors where connector.failures > 0 && !connector.paused {
            let behind = records.contains { record in
                (connector.scope.isEmpty || connector.scope == record.delivery.scope) && connector.cursor < record.position
            }
            if behind {
                moved =
                    try await storage.retryConnectorSoon(
                        tenant: identity.tenant, id: connector.id, at: time, spacing: Self.retrySpacing) || moved
            }
        }
        guard moved else { return try .json(RecordDeliveries(records: records.map(\.delivery))) }
        let (again, _) = try await recordDeliveries(request, context: context)
        return try .json(RecordDeliveries(records: again.map(\.delivery)))
    }

    /// The records `request` asks about that the caller may read, each with where its connectors stand, and the
    /// connectors that send them.
    private func recordDeliveries(
        _ request: Request, context: OutpostRequestContext
    ) async throws -> (records: [(delivery: RecordDelivery, position: PullCursor)], connectors: [Connector]) {
        let identity = try context.requireIdentity()
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        let scope = try RequestDecoding.scope(in: request)
        if let refusal = policy.readRefusal(for: identity, scope: scope) { throw OutpostHTTPError.forbidden(refusal) }
        let ids = try RequestDecoding.required("ids", in: request).split(separator: ",", omittingEmptySubsequences: false)
            .map(String.init)
        guard ids.count <= Self.maxDeliveryIds, ids.allSatisfy(Identifier.isValid) else {
            throw OutpostHTTPError.badRequest("ids are 1 to \(Self.maxDeliveryIds) record ids, separated by commas")
        }
        let positions = try await storage.changePositions(
            tenant: identity.tenant, collection: policy.name, scope: scope, owner: policy.readOwner(for: identity),
            recordIds: ids)
        // Connectors that send batches, the kind a sheet or a system takes; a chat's messages are not counted.
        let connectors = try await storage.connectors(tenant: identity.tenant).filter {
            $0.collection == policy.name && $0.format == .json
        }
        let records = positions.map { record in
            let receivers = connectors.filter { $0.scope.isEmpty || $0.scope == record.scope }
            let behind = receivers.filter { $0.cursor < record.position }
            // The reason is the connector's own, which names no host or URL: the person who made the record may
            // read it.
            let failing = behind.filter { $0.failures > 0 }.min { $0.nextAttemptAt < $1.nextAttemptAt }
            let delivery = RecordDelivery(
                recordId: record.recordId, scope: record.scope, version: record.version, receivers: receivers.count,
                delivered: !receivers.isEmpty && behind.isEmpty, lastError: failing?.lastError,
                nextAttemptAt: failing.map { Timestamp(millisecondsSince1970: $0.nextAttemptAt) })
            return (delivery, record.position)
        }
        return (records, connectors)
    }

    @Sendable func add(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try organizer(context)
        let new = try await RequestDecoding.decodeBody(
            NewConnector.self, from: request, maxBytes: 16 * 1024, timeout: configuration.bodyTimeout)
        guard configuration.collections[new.collection] != nil else {
            throw OutpostHTTPError(.notFound, .unknownCollection, "unknown collection")
        }
        if let scope = new.scope, !Identifier.isValid(scope) {
            throw OutpostHTTPError.badRequest("scope must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        if let problem = NotificationURL.problem(url: new.url, allowingLoopback: configuration.allowsLoopbackReceivers) {
            throw OutpostHTTPError.badRequest(problem)
        }
        if let secret = new.secret, !Self.isAcceptable(secret: secret) {
            throw OutpostHTTPError.badRequest("secret must be 16 to 256 printable ASCII characters")
        }
        guard try await storage.connectors(tenant: identity.tenant).count < Self.maxConnectors else {
            throw OutpostHTTPError(.conflict, .invalidRequest, "a tenant has at most \(Self.maxConnectors) connectors; remove one first")
        }
        let connector = Connector(
            tenant: identity.tenant, id: "con_" + Self.hex(count: 10), collection: new.collection, scope: new.scope ?? "",
            url: new.url, secret: new.secret ?? "osk_" + Self.hex(count: 32), format: new.format ?? .json,
            createdAt: Timestamp(now()).millisecondsSince1970)
        try await storage.addConnector(connector)
        var status = Self.status(connector, sealer: try secrets.cursorSealer())
        // Shown once, when the server chose it: the organizer gives it to the receiver.
        if new.secret == nil { status.secret = connector.secret }
        return try .json(status, status: .created)
    }

    @Sendable func list(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try organizer(context)
        let sealer = try secrets.cursorSealer()
        return try .json(try await storage.connectors(tenant: identity.tenant).map { Self.status($0, sealer: sealer) })
    }

    @Sendable func get(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (identity, id) = try organizerAndConnector(context)
        guard let connector = try await storage.connector(tenant: identity.tenant, id: id) else { throw Self.notFound(id) }
        return try .json(Self.status(connector, sealer: try secrets.cursorSealer()))
    }

    @Sendable func remove(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (identity, id) = try organizerAndConnector(context)
        guard try await storage.removeConnector(tenant: identity.tenant, id: id) else { throw Self.notFound(id) }
        return Response(status: .noContent)
    }

    @Sendable func pause(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        try await setPaused(true, context)
    }

    @Sendable func resume(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        try await setPaused(false, context)
    }

    @Sendable func replay(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let (identity, id) = try organizerAndConnector(context)
        let replay = try await RequestDecoding.decodeBody(
            Replay.self, from: request, maxBytes: 1024, timeout: configuration.bodyTimeout)
        let sealer = try secrets.cursorSealer()
        guard let cursor = replay.from == "start" ? .start : sealer.cursor(replay.from, tenant: identity.tenant) else {
            throw OutpostHTTPError.badRequest(
                "from must be start or a cursor from one of this tenant's batches", code: .invalidCursor)
        }
        guard try await storage.replayConnector(tenant: identity.tenant, id: id, from: cursor),
            let connector = try await storage.connector(tenant: identity.tenant, id: id)
        else { throw Self.notFound(id) }
        return try .json(Self.status(connector, sealer: sealer))
    }

    private func setPaused(_ paused: Bool, _ context: OutpostRequestContext) async throws -> Response {
        let (identity, id) = try organizerAndConnector(context)
        guard try await storage.setConnectorPaused(tenant: identity.tenant, id: id, paused: paused),
            let connector = try await storage.connector(tenant: identity.tenant, id: id)
        else { throw Self.notFound(id) }
        return try .json(Self.status(connector, sealer: try secrets.cursorSealer()))
    }

    private func organizer(_ context: OutpostRequestContext) throws -> Identity {
        let identity = try context.requireIdentity()
        try identity.require(.organizer)
        return identity
    }

    private func organizerAndConnector(_ context: OutpostRequestContext) throws -> (Identity, String) {
        let identity = try organizer(context)
        guard let id = context.parameters.get("connector")?.removingPercentEncoding, Identifier.isValid(id) else {
            throw OutpostHTTPError.badRequest("the connector must be an id such as con_…")
        }
        return (identity, id)
    }

    private static func notFound(_ id: String) -> OutpostHTTPError {
        OutpostHTTPError(.notFound, .notFound, "no connector \(id)")
    }

    /// The organizer's view: the URL's host only (the whole URL can hold a credential), never the secret, and the
    /// cursor sealed for the tenant.
    static func status(_ connector: Connector, sealer: CursorSealer) -> ConnectorStatus {
        ConnectorStatus(
            id: connector.id, collection: connector.collection, scope: connector.scope.isEmpty ? nil : connector.scope,
            host: URL(string: connector.url)?.host ?? "", format: connector.format.rawValue,
            state: connector.paused ? "paused" : connector.isFailing ? "failing" : "active",
            cursor: sealer.token(connector.cursor, tenant: connector.tenant),
            delivered: connector.delivered, deliveredChanges: connector.deliveredChanges, failures: connector.failures,
            lastError: connector.lastError, lastDeliveredAt: connector.lastDeliveredAt.map(Timestamp.init(millisecondsSince1970:)),
            lastFailedAt: connector.lastFailedAt.map(Timestamp.init(millisecondsSince1970:)),
            nextAttemptAt: connector.failures > 0 ? Timestamp(millisecondsSince1970: connector.nextAttemptAt) : nil,
            createdAt: Timestamp(millisecondsSince1970: connector.createdAt))
    }

    static func isAcceptable(secret: String) -> Bool {
        (16...256).contains(secret.utf8.count) && secret.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// `count` random bytes as hex.
    static func hex(count: Int) -> String {
        SymmetricKey(size: SymmetricKeySize(bitCount: count * 8)).withUnsafeBytes { $0.map { String(format: "%02x", $0) }.joined() }
    }
}

/// Any member name, to find the ones a body must not have.
struct AnyMember: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
