import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import Logging
import NIOCore
import OutpostProtocol

/// Builds the Outpost server. `main` and the tests call this same function.
///
/// - Parameters:
///   - storage: the engine; it runs as one of the application's services.
///   - now: the server's clock, for receive times, token expiry and the monitor's device states.
///   - metrics: where the server counts; served at `GET /metrics`.
///   - onListening: called with the bound port once the server accepts connections.
package func buildApplication<Storage: SyncStorage>(
    configuration: ServerConfiguration,
    storage: Storage,
    now: @escaping @Sendable () -> Date = { Date() },
    metrics: ServerMetrics = ServerMetrics(),
    logger: Logger,
    onListening: @escaping @Sendable (Int) async -> Void = { _ in }
) throws -> some ApplicationProtocol {
    let secrets = ServerSecrets(configuration: configuration, logger: logger)
    let router = buildRouter(
        configuration: configuration, storage: storage, secrets: secrets, metrics: metrics, now: now)
    let idle = TimeAmount.nanoseconds(Int64(configuration.idleTimeout / .nanoseconds(1)))
    let tally = ConnectionTally(limit: configuration.maxConnectionsPerAddress)
    let server: HTTPServerBuilder =
        if let tls = configuration.tls {
            try .http2Upgrade(
                tlsConfiguration: tls,
                configuration: .init(idleTimeout: configuration.idleTimeout, streamConfiguration: .init(idleTimeout: idle)))
        } else {
            .http1(
                configuration: .init(
                    additionalChannelHandlers: [
                        ConnectionGuard(tally: tally, headTimeout: .nanoseconds(Int64(configuration.requestHeadTimeout / .nanoseconds(1)))),
                        ParserErrorResponder(),
                    ], idleTimeout: idle))
        }
    var app = Application(
        router: router,
        server: server,
        configuration: .init(
            address: .hostname(configuration.host, port: configuration.port), serverName: "outpost"),
        services: [
            storage,
            NotificationWatch(
                storage: storage, clock: ContinuousClock(), now: now, logger: logger,
                deliver: { url, body in try await NotificationWatch<Storage>.post(url: url, body: body) }),
            UploadExpiry(
                storage: storage, lifetime: configuration.uploadLifetime, clock: ContinuousClock(), now: now, logger: logger,
                metrics: metrics),
        ],
        onServerRunning: { channel in await onListening(channel.localAddress?.port ?? configuration.port) },
        logger: logger
    )
    if configuration.deliversConnectors {
        var delivery = ConnectorDelivery(
            storage: storage, clock: ContinuousClock(), now: now, logger: logger, metrics: metrics,
            send: { connector, body, delivery in
                try await ConnectorMessage.post(
                    connector, body: body, delivery: delivery, timeout: configuration.connectorTimeout, now: Date())
            },
            sealer: { try secrets.cursorSealer() },
            lease: configuration.connectorTimeout * 2 + .seconds(10))
        delivery.links = { try FileLinks.of(configuration, secrets: secrets) }
        app.addServices(delivery)
    }
    if let relay = configuration.relay {
        guard let journal = storage as? SQLiteStorage else {
            throw StorageError(.configuration, "a venue relay keeps its journal on SQLite; run it without --postgres")
        }
        let upstream = RelayUpstream(configuration: relay)
        app.addServices(
            RelayForwarder(
                storage: journal, configuration: relay, clock: ContinuousClock(), now: now, logger: logger, metrics: metrics,
                forward: { try await upstream.forward($0) }),
            RelayMirror(
                storage: journal, configuration: relay, server: configuration, clock: ContinuousClock(), now: now,
                logger: logger, get: { try await upstream.get($0) }),
            RelayReporter(
                storage: journal, configuration: relay, clock: ContinuousClock(), now: now,
                report: { try await upstream.report($0) }))
    }
    app.beforeServerStarts {
        try await storage.migrate()
        // Writes a relay took and has not forwarded are answered as held only by a relay: a server would tell
        // their devices they are on the server.
        if configuration.relay == nil, let journal = storage as? SQLiteStorage {
            let waiting = try await journal.relayWaiting().count
            guard waiting == 0 else {
                throw StorageError(
                    .configuration,
                    "this data folder holds \(waiting) writes of a venue relay not yet on the server: start it with --upstream to forward them")
            }
        }
        if let secret = configuration.jwtSecret {
            try await secrets.load(secret: secret)
        } else {
            try await secrets.load(
                secret: try await storage.signingSecret(creatingWith: { TokenAuthority.generateSecret() }))
        }
        // The provider's keys before the first request; should it be down, requests wait for a later fetch.
        try? await secrets.identityProvider?.load(now: now())
    }
    return app
}

/// The routes, with their middleware. Separate from ``buildApplication`` so that tests can list them.
package func buildRouter<Storage: SyncStorage>(
    configuration: ServerConfiguration,
    storage: Storage,
    secrets: ServerSecrets? = nil,
    metrics: ServerMetrics = ServerMetrics(),
    now: @escaping @Sendable () -> Date = { Date() }
) -> Router<OutpostRequestContext> {
    let secrets = secrets ?? ServerSecrets(configuration: configuration)
    let router = Router(context: OutpostRequestContext.self)
    router.add(middleware: AccessLogMiddleware())
    router.add(middleware: MetricsMiddleware(metrics: metrics))
    router.add(middleware: ErrorMiddleware())
    let routeTable = RouteTable()
    router.add(middleware: MethodNotAllowedMiddleware(table: routeTable))
    let gate = AdmissionGate(
        limit: max(1, configuration.maxConcurrentRequests), maxWaiting: max(0, configuration.maxWaitingRequests))
    MetaController(storage: storage, metrics: metrics, gate: gate, now: now).addRoutes(to: router)
    AdminController(storage: storage, secrets: secrets, now: now, configuration: configuration, gate: gate).addRoutes(
        to: router.group("admin"))
    // Admission comes first, so that a request waiting its turn holds no more than its connection.
    // The token first, so that admission knows whose request it is; one caller holds at most an eighth of the places.
    let callers = CallerGates(share: configuration.maxConcurrentRequests / 8, maxWaiting: max(0, configuration.maxWaitingRequests))
    let v1 = router.group("v1")
        .add(middleware: AuthMiddleware(secrets: secrets, now: now))
        .add(
            middleware: AdmissionMiddleware(
                gate: gate, callers: callers, maxBodyBytes: configuration.maxBodyBytes,
                bodyTimeout: configuration.bodyTimeout))
    let devices = DeviceOwners(storage: storage, secrets: secrets, now: now)
    SyncController(
        storage: storage, configuration: configuration, secrets: secrets, devices: devices, metrics: metrics,
        gate: gate, now: now
    ).addRoutes(to: v1)
    ReviewController(storage: storage, configuration: configuration).addRoutes(to: v1)
    ExportController(storage: storage, configuration: configuration, secrets: secrets, gate: gate, now: now).addRoutes(to: v1)
    NotificationController(storage: storage, configuration: configuration).addRoutes(to: v1)
    ConnectorController(storage: storage, configuration: configuration, secrets: secrets, now: now).addRoutes(to: v1)
    MonitorController(
        storage: storage, configuration: configuration, secrets: secrets, devices: devices, metrics: metrics, now: now
    ).addRoutes(to: v1)
    // Uploads are refused by their query before any byte of their body is read: the routes read their bodies.
    let files = router.group("v1")
        .add(middleware: AuthMiddleware(secrets: secrets, now: now))
        .add(
            middleware: AdmissionMiddleware(
                gate: gate, callers: callers, maxBodyBytes: FileController<Storage>.pieceBytes, bodyTimeout: configuration.bodyTimeout,
                defersBody: true))
    FileController(storage: storage, configuration: configuration, gate: gate, metrics: metrics, now: now).addRoutes(to: files)
    // Signed links to files, for systems that hold no token: outside /v1 and its bearer tokens.
    FileLinkController(storage: storage, configuration: configuration, secrets: secrets, gate: gate, now: now).addRoutes(
        to: router)
    routeTable.load(router.routes.map { ("\($0.path)", $0.method) })
    return router
}
