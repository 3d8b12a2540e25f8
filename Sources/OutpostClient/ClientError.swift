import OutpostProtocol

/// A failure of the device SDK. Its message never holds a token or a record's payload.
public struct ClientError: Error, Sendable, CustomStringConvertible {
    /// A stable code; extensible.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The store file cannot be opened or written.
        public static let storeUnavailable = Code(rawValue: "store_unavailable")
        /// The device's storage is full: nothing more can be saved until space is freed; what was saved stays.
        public static let diskFull = Code(rawValue: "disk_full")
        /// Sealed data does not open: wrong key or tampered file.
        public static let cannotDecrypt = Code(rawValue: "cannot_decrypt")
        /// The encryption key cannot be read or created.
        public static let keyUnavailable = Code(rawValue: "key_unavailable")
        /// The caller passed something the protocol does not accept.
        public static let invalidInput = Code(rawValue: "invalid_input")
        /// No record with that id.
        public static let notFound = Code(rawValue: "not_found")
        /// The device was never initialised with a server and a token.
        public static let notConfigured = Code(rawValue: "not_configured")
        /// The store holds a value this version cannot read: it is never replaced by a default.
        public static let storeCorrupt = Code(rawValue: "store_corrupt")
        /// A token names another tenant or user than the device's: a device store holds one person's work.
        public static let otherUser = Code(rawValue: "other_user")
        /// Another process did the same work on this store meanwhile (such as downloading the same set, past this
        /// call); calling again goes on from where it left things.
        public static let busy = Code(rawValue: "busy")
        /// Records wait to sync, or were refused and wait for the person: deleting the store would lose them.
        public static let unsyncedRecords = Code(rawValue: "unsynced_records")
        /// Nobody is signed in on the device: a person signs in before anything is saved or synced.
        public static let signedOut = Code(rawValue: "signed_out")
    }

    public var code: Code
    public var message: String
    /// The error that caused this one (a GRDB `DatabaseError`, say), for logs and diagnosis: never shown in
    /// ``message``, which is the user's.
    public var underlying: (any Error)?

    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }

    /// A field value JSON cannot hold (a number that is not finite).
    static func unstorableField(_ error: JSONSyntaxError) -> ClientError {
        ClientError(.invalidInput, "a field value cannot be stored: \(error.reason)")
    }
}
