/// The error body of every failed request: `{"error":{"code":"…","message":"…"}}`.
///
/// The server sends it; the client decodes the same type back. A message never holds a token, a payload or SQL.
public struct WireError: Error, Sendable, Hashable, Codable, CustomStringConvertible {
    /// A stable, machine-readable error code. Extensible: match on the constants, not on message text.
    public struct Code: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public init(from decoder: any Decoder) throws {
            self.rawValue = try decoder.singleValueContainer().decode(String.self)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(rawValue)
        }

        // Request-level
        public static let invalidRequest = Code("invalid_request")
        public static let invalidJSON = Code("invalid_json")
        public static let payloadTooLarge = Code("payload_too_large")
        public static let batchTooLarge = Code("batch_too_large")
        public static let unauthorized = Code("unauthorized")
        public static let invalidToken = Code("invalid_token")
        public static let forbidden = Code("forbidden")
        /// The device id speaks for another user of the tenant until an organizer releases it: nothing from this
        /// user under it is taken, however often it is sent.
        public static let deviceOwned = Code("device_owned")
        public static let notFound = Code("not_found")
        public static let methodNotAllowed = Code("method_not_allowed")
        public static let invalidCursor = Code("invalid_cursor")
        public static let invalidContinuation = Code("invalid_continuation")
        public static let unknownCollection = Code("unknown_collection")
        public static let serviceUnavailable = Code("service_unavailable")
        /// The request body did not arrive whole in time; send it again.
        public static let requestTimeout = Code("request_timeout")
        public static let internalError = Code("internal_error")
        // Files
        /// A file larger than its collection takes (``FileReference``): refused before any byte is stored.
        public static let fileTooLarge = Code("file_too_large")
        /// A file of a media type its collection does not take, or a collection that takes no files.
        public static let fileTypeRefused = Code("file_type_refused")
        /// The file would take its organization past the bytes the server keeps for its files: refused before any
        /// byte is stored, and a record naming it is refused with it, until the operator raises the bound (or
        /// unfinished uploads expire) and the record is retried.
        public static let fileQuotaExceeded = Code("file_quota_exceeded")
        /// The bytes uploaded do not have the digest they were sent under: nothing of them is kept.
        public static let digestMismatch = Code("digest_mismatch")
        /// A range sent at another offset than the bytes the server holds; the answer says where to go on.
        public static let uploadOffsetMismatch = Code("upload_offset_mismatch")
        /// A mutation names a file the server does not hold whole: it is refused until the file is uploaded.
        public static let fileMissing = Code("file_missing")
        // Mutation-level
        public static let invalidRecordId = Code("invalid_record_id")
        public static let invalidIdempotencyKey = Code("invalid_idempotency_key")
        public static let invalidTimestamp = Code("invalid_timestamp")
        public static let invalidFields = Code("invalid_fields")
        public static let invalidBaseVersion = Code("invalid_base_version")
        public static let idempotencyKeyReused = Code("idempotency_key_reused")
        /// The record's current state forbids the change: a check-out with no check-in, deleting a write-once
        /// record.
        public static let stateConflict = Code("state_conflict")
        /// A check-in for a guest who is not on the event's roster.
        public static let unknownGuest = Code("unknown_guest")
        /// A check-in for a guest whose registration is cancelled.
        public static let guestCancelled = Code("guest_cancelled")
        /// Not a refusal: a venue relay holds the mutation and the server has not answered for it yet. The device
        /// keeps it queued and sends it again; the relay then answers what the server answered. Given only to a
        /// client that names ``ProtocolFeature/relay``.
        public static let heldAtRelay = Code("held_at_relay")
        /// Not a refusal for good: a venue relay does not carry this write (another event, a collection without
        /// events, an admin's write), and the server may take it. The device keeps it queued and sends it when it
        /// reaches the server. Given only to a client that names ``ProtocolFeature/relay``.
        public static let notCarriedByRelay = Code("not_carried_by_relay")
    }

    /// The inner object: code and message.
    public struct Detail: Sendable, Hashable, Codable {
        public var code: Code
        public var message: String

        public init(code: Code, message: String) {
            self.code = code
            self.message = message
        }
    }

    public var error: Detail

    public init(code: Code, message: String) {
        self.error = Detail(code: code, message: message)
    }

    public var code: Code { error.code }
    public var message: String { error.message }
    public var description: String { "\(error.message) (\(error.code))" }
}
