import ArgumentParser
import Foundation
import HummingbirdHTTP2
import Logging
import NIOSSL
import OutpostServer
import ServiceLifecycle

/// `outpost serve`: runs the sync server until SIGINT or SIGTERM.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the sync server.",
        discussion: """
            Uses an embedded SQLite store in --data-dir unless --database-url (or $OUTPOST_DATABASE_URL) names \
            a PostgreSQL database. Several servers may share one PostgreSQL database. The JWT secret is \
            $OUTPOST_JWT_SECRET, or one generated on first start and kept by the storage. With --jwks-url \
            (or --jwks), bearer tokens are the identity provider's, verified against its keys.
            """)

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Port to listen on (0 picks a free one).")
    var port: Int = 8080

    @OptionGroup var storageOptions: StorageOptions
    @OptionGroup(title: "Signing in") var identity: IdentityOptions

    @Option(name: .customLong("max-batch-size"), help: "Most mutations accepted in one push.")
    var maxBatchSize: Int = 500

    @Option(
        name: .customLong("max-concurrent-requests"),
        help: "Most /v1 requests that run at once; later ones wait their turn, holding only their connection.")
    var maxConcurrentRequests: Int = 64

    @Option(
        name: .customLong("max-waiting-requests"),
        help: "Most /v1 requests that wait for their turn; past that a request is answered 503 with Retry-After.")
    var maxWaitingRequests: Int = 10_000

    @Option(
        name: .customLong("body-timeout"),
        help: "Seconds a request body may take to arrive whole; a slower one is answered 408 and its connection closed.")
    var bodyTimeout: Int = 30

    @Option(
        name: .customLong("max-connections-per-address"),
        help: "Most connections one client address holds at once; more are closed as they connect. 0: no bound (behind a proxy).")
    var maxConnectionsPerAddress: Int = 128

    @Option(
        name: .customLong("request-head-timeout"),
        help: "Seconds a connection may take to send its first request's head; a slower one is closed.")
    var requestHeadTimeout: Int = 10

    @Option(
        name: .customLong("connector-timeout"),
        help: "Seconds a connector's receiver may take to answer a batch; a slower answer is a failed attempt.")
    var connectorTimeout: Int = 10

    @Option(
        name: .customLong("public-url"),
        help:
            "The server's address as people reach it, such as https://sync.example.org: connectors' batches carry links to files there (default $OUTPOST_PUBLIC_URL; none without it)."
    )
    var publicURL: String?

    @Option(
        name: .customLong("file-link-lifetime"), help: "How long a link to a file in a connector's batch works, such as 12h or 7d.")
    var fileLinkLifetime: DurationArgument = DurationArgument(argument: "7d")!

    @Option(
        name: .customLong("upload-lifetime"),
        help: "How long an unfinished upload may take no byte before the server forgets it and its bytes, such as 2d or 7d.")
    var uploadLifetime: DurationArgument = DurationArgument(argument: "7d")!

    @Option(
        name: .customLong("tenant-file-gigabytes"),
        help: ArgumentHelp(
            "The most gigabytes one organization's files may hold (unfinished uploads at their whole size); an upload past it is refused. No bound by default.",
            valueName: "n"))
    var tenantFileGigabytes: Int?

    @Option(
        name: .customLong("collections"),
        help: ArgumentHelp(
            "A YAML or JSON file declaring collections beside the standard ones, with their read and write rules.",
            valueName: "file"))
    var collectionsFile: String?

    @Option(
        name: .customLong("tls-cert"),
        help: ArgumentHelp("A PEM certificate chain: serve HTTPS (HTTP/2 and HTTP/1.1) instead of plain HTTP; needs --tls-key.", valueName: "file"))
    var tlsCertificate: String?

    @Option(name: .customLong("tls-key"), help: ArgumentHelp("The PEM private key of --tls-cert.", valueName: "file"))
    var tlsKey: String?

    @Flag(
        name: .customLong("allow-loopback-receivers"),
        help: "Let notifications and connectors go to http on this machine (development and tests; https only otherwise).")
    var allowLoopbackReceivers = false

    @Flag(
        name: .customLong("no-connector-delivery"),
        help: "Serve the connector API, but leave delivering connectors to the other servers on the database.")
    var noConnectorDelivery = false

    @Option(
        name: .customLong("upstream"),
        help: ArgumentHelp(
            "Run as a venue relay: the server the venue's devices' writes are forwarded to, exactly once each.",
            valueName: "url"))
    var upstream: String?

    @Option(
        name: .customLong("upstream-token"),
        help: "The relay token for --upstream (default $OUTPOST_UPSTREAM_TOKEN): outpost token --role relay --scope EVENT.")
    var upstreamToken: String?

    @Option(
        name: .customLong("upstream-scope"),
        help: "An event the relay serves (repeatable; default: every event its token names).")
    var upstreamScopes: [String] = []

    @Flag(
        name: .customLong("no-escalation"),
        help: "Acknowledge persistent-failure reports without recording them (default $OUTPOST_ESCALATION, else on).")
    var noEscalation = false

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be from 0 to 65535") }
        guard maxBatchSize >= 1 else { throw ValidationError("--max-batch-size must be at least 1") }
        guard maxConcurrentRequests >= 1 else { throw ValidationError("--max-concurrent-requests must be at least 1") }
        guard maxWaitingRequests >= 0 else { throw ValidationError("--max-waiting-requests must not be negative") }
        guard (1...3600).contains(bodyTimeout) else { throw ValidationError("--body-timeout must be from 1 to 3600 seconds") }
        guard maxConnectionsPerAddress >= 0 else { throw ValidationError("--max-connections-per-address must not be negative") }
        guard (1...3600).contains(requestHeadTimeout) else {
            throw ValidationError("--request-head-timeout must be from 1 to 3600 seconds")
        }
        guard (1...300).contains(connectorTimeout) else { throw ValidationError("--connector-timeout must be from 1 to 300 seconds") }
        _ = try publicAddress()
        guard fileLinkLifetime.duration >= .seconds(60), fileLinkLifetime.duration <= .seconds(366 * 24 * 3600) else {
            throw ValidationError("--file-link-lifetime must be from 1 minute to 366 days")
        }
        guard uploadLifetime.duration >= .seconds(3600), uploadLifetime.duration <= .seconds(366 * 24 * 3600) else {
            throw ValidationError("--upload-lifetime must be from 1 hour to 366 days")
        }
        if let tenantFileGigabytes, !(1...1_000_000).contains(tenantFileGigabytes) {
            throw ValidationError("--tenant-file-gigabytes must be from 1 to 1000000")
        }
        guard !host.isEmpty else { throw ValidationError("--host must not be empty") }
        _ = try identity.provider()
        guard (tlsCertificate == nil) == (tlsKey == nil) else { throw ValidationError("give --tls-cert and --tls-key together") }
        if upstream == nil {
            guard upstreamToken == nil, upstreamScopes.isEmpty else {
                throw ValidationError("--upstream-token and --upstream-scope are for a relay: give --upstream")
            }
        } else {
            guard storageOptions.resolvedDatabaseURL == nil else {
                throw ValidationError("a venue relay keeps its journal in --data-dir: leave out --database-url")
            }
        }
    }

    /// The address of --public-url or $OUTPOST_PUBLIC_URL: an http or https URL without query, or nil.
    func publicAddress() throws -> URL? {
        let text = publicURL ?? ProcessInfo.processInfo.environment["OUTPOST_PUBLIC_URL"].flatMap { $0.isEmpty ? nil : $0 }
        guard let text else { return nil }
        guard let url = URL(string: text), ["http", "https"].contains(url.scheme), url.host?.isEmpty == false, url.query == nil
        else { throw ValidationError("--public-url must be an http or https URL such as https://sync.example.org") }
        return url
    }

    /// The relay of --upstream, or nil for a server.
    func relay() throws -> RelayConfiguration? {
        guard let upstream else { return nil }
        let token = upstreamToken ?? ProcessInfo.processInfo.environment["OUTPOST_UPSTREAM_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        guard let token else { throw CLIError("--upstream needs a relay token: --upstream-token or $OUTPOST_UPSTREAM_TOKEN") }
        guard let url = URL(string: upstream) else { throw CLIError("--upstream must be an http or https URL") }
        do {
            return try RelayConfiguration(upstream: url, token: token, scopes: upstreamScopes)
        } catch let error as RelayConfiguration.Error {
            throw CLIError(error.description)
        }
    }

    /// The TLS configuration of --tls-cert and --tls-key, or nil for plain HTTP.
    func tls() throws -> TLSConfiguration? {
        guard let tlsCertificate, let tlsKey else { return nil }
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(tlsCertificate)
        } catch {
            throw CLIError("--tls-cert: \(tlsCertificate) holds no readable PEM certificate")
        }
        guard !chain.isEmpty else { throw CLIError("--tls-cert: \(tlsCertificate) holds no PEM certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: tlsKey, format: .pem)
        } catch {
            throw CLIError("--tls-key: \(tlsKey) holds no readable PEM private key")
        }
        return TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
    }

    func run() async throws {
        let level = Logger.configuredLevel()
        // One JSON object per line on stderr, for log collectors.
        LoggingSystem.bootstrap { label in JSONLogHandler(label: label, level: level) }
        let logger = Logger.cli("outpost")
        var configuration = ServerConfiguration(
            host: host, port: port, maxBatchSize: maxBatchSize, maxConcurrentRequests: maxConcurrentRequests,
            maxWaitingRequests: maxWaitingRequests, bodyTimeout: .seconds(bodyTimeout))
        configuration.connectorTimeout = .seconds(connectorTimeout)
        configuration.publicURL = try publicAddress()
        configuration.fileLinkLifetime = fileLinkLifetime.duration
        configuration.uploadLifetime = uploadLifetime.duration
        configuration.tenantFileBytes = tenantFileGigabytes.map { Int64($0) * 1_000_000_000 }
        configuration.maxConnectionsPerAddress = maxConnectionsPerAddress == 0 ? nil : maxConnectionsPerAddress
        configuration.requestHeadTimeout = .seconds(requestHeadTimeout)
        configuration.deliversConnectors = !noConnectorDelivery
        configuration.allowsLoopbackReceivers = allowLoopbackReceivers
        configuration.escalationEnabled = !noEscalation && ProcessInfo.processInfo.environment["OUTPOST_ESCALATION"] != "off"
        configuration.jwtSecret = try StorageOptions.environmentSecret()
        configuration.tokenRules = identity.rules
        configuration.identityProvider = try identity.provider()
        configuration.tls = try tls()
        configuration.relay = try relay()
        if configuration.relay != nil {
            // A relay restarted while the venue's line is down still signs the doors' people in.
            try? FileManager.default.createDirectory(atPath: storageOptions.dataDirectory, withIntermediateDirectories: true)
            configuration.identityProvider?.cacheFile = storageOptions.dataDirectory + "/identity-provider-keys.json"
        }
        let scheme = configuration.tls == nil ? "http" : "https"
        if let collectionsFile {
            do {
                configuration.collections = try CollectionRegistry.standard(adding: URL(fileURLWithPath: collectionsFile))
            } catch let error as CollectionsFileError {
                throw CLIError("--collections: \(error.description)")
            }
        }
        let storage = try storageOptions.openStorage(logger: logger)
        let summary =
            configuration.relay.map {
                "\(storage.summary); relay for \($0.scopes.joined(separator: ", ")) to \($0.upstream.absoluteString)"
            } ?? storage.summary
        let host = self.host
        let app = try buildApplication(
            configuration: configuration, storage: storage, logger: logger,
            onListening: { port in
                // Scripts wait for this line: flush it, stdout is block-buffered in a pipe.
                FileHandle.standardOutput.write(
                    Data("outpost: listening on \(scheme)://\(host):\(port) (storage: \(summary))\n".utf8))
            })
        let group = ServiceGroup(
            configuration: .init(
                services: [app], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch let error as StorageError {
            throw CLIError(error.message)
        } catch let error as TokenAuthority.Error {
            throw CLIError(error.description)
        }
        FileHandle.standardOutput.write(Data("outpost: stopped\n".utf8))
    }
}
