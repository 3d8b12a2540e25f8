import Foundation
import OutpostProtocol

/// What a UI shows about sync: published by ``SyncEngine`` whenever it changes.
public struct SyncStatus: Sendable, Hashable {
    /// Whether the server answered the last probe or sync; false until one has been tried, see
    /// ``isConnectionKnown``.
    public var isOnline: Bool {
        didSet { isConnectionKnown = true }
    }
    /// False until the engine has tried the server once: until then "offline" would be a guess.
    public var isConnectionKnown: Bool
    public var isSyncing: Bool
    public var pendingCount: Int
    public var failedCount: Int
    /// Records the server refused (or that conflict): they wait for the user, not for the network, and are
    /// not counted as waiting to sync.
    public var refusedCount: Int = 0
    public var lastSyncAt: Date?
    /// Set while the server is reachable but failing: it answered a probe or a push with a server error (a 5xx,
    /// or an answer this SDK cannot read), such as "Server error (500)". Cleared by the next push it takes.
    public var serverProblem: String?
    /// Why the last push failed, such as "The connection to the server broke before it answered", while the
    /// sync that tries again runs or waits; nil once a push is answered.
    public var lastFailure: String?
    /// The bytes of attached files that wait to upload with their records (see ``Attachment``).
    public var pendingUploadBytes: Int64 = 0
    /// The file being uploaded, while a sync sends one: how far it has come.
    public var upload: FileTransfer?
    /// Held while records have failed to sync for over the escalation threshold; cannot be dismissed.
    public var persistentFailureNotice: PersistentFailureNotice?
    /// Whether someone is signed in on the device, and whether their token works: see ``SignInState``.
    public var signIn: SignInState = .signedIn
    /// True once the server refused the token and no fresh one could be had, by whatever sync found it (one the
    /// app started, or a delivery in the background): what is queued waits for the person to sign in again
    /// (``Outpost/signIn(token:)``). Cleared by a sign-in, or when a push is answered.
    public var needsSignIn: Bool {
        get { signIn == .needsSignIn }
        set {
            if newValue {
                signIn = .needsSignIn
            } else if signIn == .needsSignIn {
                signIn = .signedIn
            }
        }
    }

    public init(isOnline: Bool = false, isSyncing: Bool = false, pendingCount: Int = 0, failedCount: Int = 0, lastSyncAt: Date? = nil) {
        self.isOnline = isOnline
        self.isConnectionKnown = isOnline
        self.isSyncing = isSyncing
        self.pendingCount = pendingCount
        self.failedCount = failedCount
        self.lastSyncAt = lastSyncAt
    }

    /// The offline indicator's text, such as "3 records waiting to sync", and the refused ones after it.
    public var offlineIndicatorText: String {
        let waiting = pendingCount + failedCount
        var text: String
        if waiting == 0 {
            text =
                refusedCount > 0 || !isConnectionKnown
                ? "Nothing waiting to sync" : isOnline ? "All records synced" : "Offline — nothing waiting to sync"
        } else {
            text = waiting == 1 ? "1 record waiting to sync" : "\(waiting) records waiting to sync"
        }
        if let refused = refusedText { text += "; " + refused }
        return text
    }

    /// "2 records refused by the server — review them", or nil when none was.
    public var refusedText: String? {
        guard refusedCount > 0 else { return nil }
        return (refusedCount == 1 ? "1 record" : "\(refusedCount) records") + " refused by the server — review them"
    }

    /// "Online", "Offline", "Online — the server is having trouble" or, before the first try, "Checking
    /// connection"; and "syncing" while a sync runs.
    public var connectionText: String {
        let text: String
        switch connection {
        case .unknown: text = "Checking connection"
        case .offline: text = "Offline"
        case .online: text = "Online"
        case .serverTrouble: text = "Online — the server is having trouble"
        }
        return text + (isSyncing ? ", syncing" : "")
    }

    /// Where the connection stands, in one value.
    public var connection: Connection {
        guard isConnectionKnown else { return .unknown }
        guard isOnline else { return .offline }
        return serverProblem.map(Connection.serverTrouble) ?? .online
    }
}

/// Whether the device has someone signed in whose token the server takes.
public enum SignInState: Sendable, Hashable {
    /// Nobody is signed in: nothing can be saved or synced until someone signs in (``Outpost/signIn(token:)``).
    case signedOut
    /// Signed in: the token is sent with every request, and renewed before it expires.
    case signedIn
    /// The app's credentials provider is being asked for a fresh token; requests wait for its answer.
    case renewing
    /// The server refused the token and the provider had no other: what is queued waits, kept, until the person
    /// signs in again.
    case needsSignIn
}

/// Where the device's connection to the server stands: three things a person is told apart.
public enum Connection: Sendable, Hashable {
    /// Not tried yet: "offline" would be a guess.
    case unknown
    /// The server cannot be reached: no network, or none that reaches it.
    case offline
    /// The server answers and takes records.
    case online
    /// The server answers, with an error: records wait for it to recover, not for a network.
    case serverTrouble(String)

    /// Whether the server can be reached.
    public var isReachable: Bool {
        switch self {
        case .online, .serverTrouble: true
        case .unknown, .offline: false
        }
    }
}

/// The outcome of one sync: how many records synced, how many failed, and why.
public struct SyncSummary: Sendable, Hashable, CustomStringConvertible {
    public var synced: Int
    /// Records that failed and will be tried again.
    public var failed: Int
    /// Records the server refused or that conflict: they wait for the user.
    public var refused: Int = 0
    /// Records whose write the server did not take, keeping an earlier one from elsewhere (a guest another door
    /// checked in first): each now shows the server's, and is not counted in ``synced``.
    public var superseded: Int = 0
    /// Records a venue relay holds: saved there, where the venue's other devices see them, and still queued
    /// here until the server has them (the relay answers for the server once it has).
    public var atRelay: Int = 0
    /// Distinct reasons of the failures and refusals, most frequent first.
    public var reasons: [String]
    /// How many chunks went to the server.
    public var chunks: Int
    /// True when another sync was already running, so this call did nothing.
    public var skipped: Bool
    /// True when the server refused the token and no fresh one could be had: what is queued stays queued, failed
    /// with a reason that says to sign in again, and goes out at the first sync after a sign-in.
    public var requiresSignIn: Bool

    public init(
        synced: Int = 0, failed: Int = 0, refused: Int = 0, reasons: [String] = [], chunks: Int = 0, skipped: Bool = false,
        requiresSignIn: Bool = false
    ) {
        self.synced = synced
        self.failed = failed
        self.refused = refused
        self.reasons = reasons
        self.chunks = chunks
        self.skipped = skipped
        self.requiresSignIn = requiresSignIn
    }

    /// True when every record this sync sent reached the server.
    public var isComplete: Bool { failed == 0 && refused == 0 && atRelay == 0 && !skipped }

    /// Such as "3 synced, 1 failed: GPS signal required".
    public var description: String {
        if skipped { return "a sync is already running" }
        var text = "\(synced) synced, \(failed) failed"
        if refused > 0 { text += ", \(refused) refused" }
        if !reasons.isEmpty { text += ": " + reasons.joined(separator: "; ") }
        if superseded > 0 {
            text += "; \(superseded) already recorded on another device first: the server keeps that one"
        }
        if atRelay > 0 {
            text += "; \(atRelay) at the venue relay, waiting for the server"
        }
        return text
    }
}

/// Progress of a running sync, chunk by chunk.
///
/// A sync reports it as it starts (nothing sent yet), after each chunk the server answered, and before each
/// wait to try a chunk again, so that a screen is never silent while a sync runs.
public struct SyncProgress: Sendable, Hashable {
    /// Mutations the server has confirmed so far in this sync.
    public var sent: Int
    /// Mutations queued when the sync started.
    public var total: Int
    public var chunk: Int
    /// While the sync waits to try a chunk again: how long, and why the last try failed.
    public var retrying: Retry?

    /// A wait before a chunk is tried again.
    public struct Retry: Sendable, Hashable {
        /// How long the sync waits.
        public var wait: Duration
        /// Why the last try failed, such as "The server could not be reached".
        public var reason: String

        public init(wait: Duration, reason: String) {
            self.wait = wait
            self.reason = reason
        }
    }

    public init(sent: Int, total: Int, chunk: Int, retrying: Retry? = nil) {
        self.sent = sent
        self.total = total
        self.chunk = chunk
        self.retrying = retrying
    }
}

/// A file on its way to or from the server: how many of its bytes have gone.
public struct FileTransfer: Sendable, Hashable {
    public var file: FileReference
    /// The bytes the server holds (an upload), or the device (a download).
    public var done: Int64

    public init(file: FileReference, done: Int64) {
        self.file = file
        self.done = done
    }

    /// How far it has come, from 0 to 1.
    public var fraction: Double { file.size == 0 ? 1 : Double(done) / Double(file.size) }
}
