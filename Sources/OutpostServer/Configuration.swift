import Foundation
import HummingbirdHTTP2
import OutpostProtocol

/// Everything an Outpost server needs to know at start-up. Read by the CLI; the library never reads the environment.
public struct ServerConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// The most mutations one push may carry; a larger batch is refused with 413.
    public var maxBatchSize: Int
    /// The largest request body accepted, in bytes; a larger one is refused with 413.
    public var maxBodyBytes: Int
    public var snapshotDefaultPageSize: Int
    public var snapshotMaxPageSize: Int
    public var pullDefaultLimit: Int
    public var pullMaxLimit: Int
    /// Where a page of a pull or snapshot ends by size: at the first record that takes the page's stored
    /// fields to this many bytes or past, whatever its limit (a record weighs at most 256 KiB).
    public var pageMaxBytes: Int
    /// The most pages one pull streams, whatever its `pages` parameter asks: the last then says `hasMore`, and
    /// the client pulls again from its cursor.
    public var pullMaxPages: Int
    /// How far ahead of the server's clock a device's timestamp may be before it is refused.
    public var maxClockSkew: Duration
    /// Timestamps before this are refused as far-past.
    public var earliestTimestamp: Timestamp
    /// The HS256 secret; when `nil` the storage generates one on first start and keeps it.
    public var jwtSecret: [UInt8]?
    /// The organization's identity provider: when set, bearer tokens are its tokens, verified against its
    /// published keys, and no longer the server's own.
    public var identityProvider: IdentityProviderConfiguration?
    /// Leeway and longest lifetime of every bearer token.
    public var tokenRules: TokenRules
    /// When set, the server speaks HTTPS only, HTTP/2 and HTTP/1.1 chosen by ALPN.
    public var tls: TLSConfiguration?
    public var collections: CollectionRegistry
    /// Whether persistent sync failures reported by devices are recorded, logged and counted. Off lets an
    /// operator roll escalation out gradually: reports are then acknowledged and dropped.
    public var escalationEnabled: Bool
    /// The most `/v1` requests that run at once; later ones wait their turn (see ``AdmissionGate``).
    public var maxConcurrentRequests: Int
    /// The most `/v1` requests that wait for their turn; past that a request is answered 503 at once.
    public var maxWaitingRequests: Int
    /// A connection that neither sends nor receives anything for this long is closed: a device whose network
    /// dropped halfway through a push must not hold one of the ``maxConcurrentRequests`` places for ever.
    /// Longer than a request can legitimately stay silent (20 s waiting its turn, 20 s for the database).
    public var idleTimeout: Duration
    /// A request body must arrive whole within this long, else the request is answered 408 and its connection
    /// closed: a client that trickles its body, and so never idles out, must not hold a place for longer.
    public var bodyTimeout: Duration
    /// The most connections one client address holds at once; a further one is closed as it connects, so that
    /// one address cannot take every descriptor the process has. Nil for no bound: behind a proxy every client
    /// comes from the proxy's address, and the proxy bounds clients. Plain HTTP only (see ``ConnectionGuard``).
    public var maxConnectionsPerAddress: Int? = 128
    /// A connection must send its first request's head whole within this long, else it is closed: a client that
    /// trickles a head, and so never idles out, must not hold a connection for longer. Plain HTTP only.
    public var requestHeadTimeout: Duration = .seconds(10)
    /// How long a connector's receiver may take to answer a batch before the batch counts as not taken.
    public var connectorTimeout: Duration = .seconds(10)
    /// Whether notifications and connectors may go to http on this machine (for development and tests). Off, they
    /// go to https only, so that an organizer cannot make the server reach its own machine's services.
    public var allowsLoopbackReceivers = false
    /// Whether this process delivers connectors. Off, it serves the connector API and leaves delivery to the other
    /// servers on its database (with none, changes wait, in order, for one that delivers).
    public var deliversConnectors = true
    /// The server's address as people and other systems reach it, such as `https://sync.example.org`: links to
    /// files in connectors' batches and exports point there. Nil: they carry no links.
    public var publicURL: URL?
    /// How long a link to a file (``FileLinks``) works.
    public var fileLinkLifetime: Duration = .seconds(7 * 24 * 3600)
    /// How long an unfinished upload may take no byte before the server forgets it and its bytes (``UploadExpiry``).
    public var uploadLifetime: Duration = .seconds(7 * 24 * 3600)
    /// The most bytes one tenant's files may hold, complete and in unfinished uploads (each counted at its whole
    /// size, as it begins): an upload that would take the tenant past it is refused (507 `file_quota_exceeded`)
    /// before any byte is stored. Nil: no bound.
    public var tenantFileBytes: Int64?
    /// Set on a venue relay (`outpost serve --upstream`): the server it forwards to and brings its events from.
    /// A relay takes writes in its events only, journals each, and needs the embedded SQLite storage.
    public var relay: RelayConfiguration?

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        maxBatchSize: Int = 500,
        maxBodyBytes: Int = 8 * 1024 * 1024,
        snapshotDefaultPageSize: Int = 500,
        snapshotMaxPageSize: Int = 5000,
        pullDefaultLimit: Int = 500,
        pullMaxLimit: Int = 5000,
        pullMaxPages: Int = 100,
        pageMaxBytes: Int = 4 * 1024 * 1024,
        maxClockSkew: Duration = .seconds(24 * 3600),
        earliestTimestamp: Timestamp = Timestamp(iso8601: "2000-01-01T00:00:00.000Z")!,
        jwtSecret: [UInt8]? = nil,
        collections: CollectionRegistry = .standard,
        escalationEnabled: Bool = true,
        maxConcurrentRequests: Int = 64,
        maxWaitingRequests: Int = 10_000,
        idleTimeout: Duration = .seconds(60),
        bodyTimeout: Duration = .seconds(30),
        identityProvider: IdentityProviderConfiguration? = nil,
        tokenRules: TokenRules = TokenRules()
    ) {
        self.host = host
        self.port = port
        self.maxBatchSize = maxBatchSize
        self.maxBodyBytes = maxBodyBytes
        self.snapshotDefaultPageSize = snapshotDefaultPageSize
        self.snapshotMaxPageSize = snapshotMaxPageSize
        self.pullDefaultLimit = pullDefaultLimit
        self.pullMaxLimit = pullMaxLimit
        self.pullMaxPages = pullMaxPages
        self.pageMaxBytes = pageMaxBytes
        self.maxClockSkew = maxClockSkew
        self.earliestTimestamp = earliestTimestamp
        self.jwtSecret = jwtSecret
        self.collections = collections
        self.escalationEnabled = escalationEnabled
        self.maxConcurrentRequests = maxConcurrentRequests
        self.maxWaitingRequests = maxWaitingRequests
        self.idleTimeout = idleTimeout
        self.bodyTimeout = bodyTimeout
        self.identityProvider = identityProvider
        self.tokenRules = tokenRules
    }
}
