/// A failure inside a storage engine. Its description never holds SQL text or a stored value.
public struct StorageError: Error, Sendable, CustomStringConvertible {
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The database cannot be reached; the request may be retried.
        public static let unavailable = Code(rawValue: "unavailable")
        /// A concurrent transaction claimed the same idempotency key; the push is retried.
        public static let concurrentClaim = Code(rawValue: "concurrent_claim")
        /// The stored data does not decode.
        public static let corrupt = Code(rawValue: "corrupt")
        /// The configuration (URL, path, migrations) is unusable.
        public static let configuration = Code(rawValue: "configuration")
    }

    public var code: Code
    /// What the server logs and answers; never the underlying error's text, which may hold a query.
    public var message: String
    /// The error beneath, for diagnostics: PostgresNIO's or GRDB's.
    public var underlying: (any Error)?

    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { "\(message) (\(code))" }
}
