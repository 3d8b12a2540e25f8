import Crypto
import Foundation
import Logging
import OutpostProtocol

extension Outpost {
    /// What an app decides once, at launch: where the store lives, which server, how requests go, and how often
    /// the device works in the background.
    public struct Configuration: Sendable {
        /// Where the device's store lives: one file, or one per person on a shared device.
        public var location: StoreLocation
        /// The server, such as `https://sync.example.org`; nil to keep the one saved in the store by an earlier
        /// sign-in (or by `outpost device init`). A first sign-in needs one.
        public var server: URL?
        /// Where the device syncs when ``server`` cannot be reached, such as the venue relay of the day
        /// (``FailoverTransport``); nil to keep the one saved in the store, if any.
        public var fallback: URL?
        /// The device's id on the sync monitor, such as `door-1`; a store made by a first sign-in takes it
        /// (with a short random suffix for each person's store on a shared device). Nil: a random one.
        public var deviceId: String?
        /// How the device talks to the server: `.http()` from OutpostHTTP, `.urlSession()` from OutpostURLSession,
        /// or a transport of the app's own.
        public var transport: Transport
        /// How the device learns that the server can be reached.
        public var connectivity: Connectivity = .standard
        /// The key that seals a store, from its location; by default a file beside the store, mode 0600
        /// (``LocalStore/defaultKeys(for:)``). On iOS, give a ``KeychainKeyProvider``.
        public var keys: @Sendable (URL) -> any KeyProvider = { LocalStore.defaultKeys(for: $0) }
        /// What the app declares of its collections: scopes and searchable fields.
        public var schema = StoreSchema()
        /// Sent with every heartbeat, such as `attendance-ios/2.3.0`.
        public var appVersion = "unknown"
        /// When records that have not synced raise the notice that cannot be dismissed.
        public var escalation = EscalationPolicy()
        /// How records saved under a provisional id are renamed once the user's keys arrive.
        public var recordIdSettlements: [RecordIdSettlement] = []
        /// Reference sets the device keeps current once downloaded, whatever the open event.
        public var referenceSets: [ReferenceSet] = []
        /// Collections whose reference data, scoped by the open event (``Outpost/setCurrentEvent(_:)``), the device
        /// keeps current once downloaded: an event's roster.
        public var eventReferenceCollections: [String] = []
        /// How often a running device tries again what waits, and brings the escalation notice up to date.
        public var retryInterval: Duration = .seconds(60)
        /// How often a running device reports to the sync monitor while online.
        public var heartbeatInterval: Duration = .seconds(60)
        /// How often a running device looks for records failing for too long (it also looks at every start).
        public var escalationInterval: Duration = .seconds(3600)
        /// How often a running device refreshes its reference data while online (delta only).
        public var referenceRefreshInterval: Duration = .seconds(900)
        /// Where the runtime logs, under the label `outpost.client` by default: sign-in changes, starts and
        /// stops, refresh failures. It never logs a token or a record's fields.
        public var logger = Logger(label: "outpost.client")
        /// The clock that times waits (tests give a test clock).
        public var clock: any Clock<Duration> = ContinuousClock()
        /// The device's time, stamped on every write (tests give a fixed one).
        public var now: @Sendable () -> Date = { Date() }

        public init(location: StoreLocation, server: URL?, transport: Transport) {
            self.location = location
            self.server = server
            self.transport = transport
        }
    }

    /// Where a device keeps its store.
    public enum StoreLocation: Sendable, Hashable {
        /// One store, for one person: another person who signs in is refused (``ClientError/Code/otherUser``)
        /// until the first signs out with a wipe.
        case file(URL)
        /// A store for each person who signs in, in a directory of its own under `directory`: on a shared
        /// device, each person's records wait for them, sealed with their own key, and a wipe deletes theirs
        /// alone.
        case perUser(directory: URL)

        /// The store of the person `user` names (of everyone whose token names no one, when nil).
        func storeURL(for user: DeviceUser?) -> URL {
            switch self {
            case .file(let url):
                return url
            case .perUser(let directory):
                return directory.appendingPathComponent(Self.folder(for: user)).appendingPathComponent("device.sqlite")
            }
        }

        /// A user's folder: a digest of who they are, so that no id can name a path.
        static func folder(for user: DeviceUser?) -> String {
            guard let user else { return "anyone" }
            let digest = SHA256.hash(data: Data("\(user.tenant)\n\(user.userId)".utf8))
            return "user-" + digest.prefix(12).hexString
        }

        /// The file that names the signed-in person's store on a shared device.
        var signedInFile: URL? {
            guard case .perUser(let directory) = self else { return nil }
            return directory.appendingPathComponent("signed-in")
        }

        /// The store of whoever signed in last and has not signed out; for one file, that file when it exists.
        func signedInStore() throws -> URL? {
            switch self {
            case .file(let url):
                return FileManager.default.fileExists(atPath: url.path) ? url : nil
            case .perUser(let directory):
                guard let file = signedInFile, let data = FileManager.default.contents(atPath: file.path),
                    let folder = String(data: data, encoding: .utf8), folder.hasPrefix("user-") || folder == "anyone",
                    !folder.contains("/")
                else { return nil }
                let url = directory.appendingPathComponent(folder).appendingPathComponent("device.sqlite")
                return FileManager.default.fileExists(atPath: url.path) ? url : nil
            }
        }

        /// Records `url` as the signed-in person's store, or forgets it with nil.
        func markSignedIn(_ url: URL?) throws {
            guard let file = signedInFile else { return }
            do {
                if let url {
                    let folder = url.deletingLastPathComponent().lastPathComponent
                    try Data(folder.utf8).write(to: file, options: .atomic)
                } else if FileManager.default.fileExists(atPath: file.path) {
                    try FileManager.default.removeItem(at: file)
                }
            } catch {
                throw ClientError(.storeUnavailable, "cannot record who is signed in at \(file.path)", underlying: error)
            }
        }
    }

    /// How the device sends its requests: `.http()` on AsyncHTTPClient (OutpostHTTP), `.urlSession()`
    /// (OutpostURLSession), or a transport of the app's own.
    public struct Transport: Sendable {
        /// Makes the transport for `server`, sending `token` and renewing it through `credentials` (the store's
        /// token store, which asks the app's provider): a transport must pass `credentials` on, so that every
        /// token it takes is the store's.
        public let make: @Sendable (_ server: URL, _ token: String, _ credentials: any CredentialsProvider) -> any SyncTransport

        public init(_ make: @escaping @Sendable (_ server: URL, _ token: String, _ credentials: any CredentialsProvider) -> any SyncTransport) {
            self.make = make
        }
    }

    /// How a running device follows whether the server can be reached.
    public struct Connectivity: Sendable {
        public let make: @Sendable (_ transport: any SyncTransport, _ clock: any Clock<Duration>) -> any ConnectivityMonitor

        public init(_ make: @escaping @Sendable (_ transport: any SyncTransport, _ clock: any Clock<Duration>) -> any ConnectivityMonitor) {
            self.make = make
        }

        /// Asks the server's `/health` every `interval` (``HealthProbeMonitor``).
        public static func healthProbe(every interval: Duration = .seconds(5)) -> Connectivity {
            Connectivity { HealthProbeMonitor(transport: $0, clock: $1, interval: interval) }
        }

        #if canImport(Network)
            /// Follows the network path, and asks the server every `interval` while a path is up (`NetworkPathMonitor`).
            public static func networkPath(probingEvery interval: Duration = .seconds(5)) -> Connectivity {
                Connectivity { NetworkPathMonitor(transport: $0, clock: $1, interval: interval) }
            }

            /// The network path with health probes, on Apple platforms.
            public static var standard: Connectivity { .networkPath() }
        #else
            /// Health probes every 5 seconds.
            public static var standard: Connectivity { .healthProbe() }
        #endif
    }
}
