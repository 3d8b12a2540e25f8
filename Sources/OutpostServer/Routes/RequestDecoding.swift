import Foundation
import Hummingbird
import NIOConcurrencyHelpers
import OutpostConcurrency
import OutpostProtocol

/// Reads and decodes request bodies and query parameters, turning every failure into a clear 4xx.
enum RequestDecoding {
    /// Collects at most `maxBytes` of body, within `timeout`, and decodes it as `T`.
    static func decodeBody<T: Decodable>(
        _ type: T.Type, from request: Request, maxBytes: Int, timeout: Duration
    ) async throws -> T {
        let buffer = try nonEmpty(try await collectBody(of: request, maxBytes: maxBytes, timeout: timeout))
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer: buffer))
        } catch let error as DecodingError {
            throw OutpostHTTPError.badRequest(describe(error), code: .invalidJSON)
        } catch {
            throw OutpostHTTPError.badRequest("the request body is not valid JSON", code: .invalidJSON)
        }
    }

    /// Collects at most `maxBytes` of body, parses it, and reads it with `read`: for the bodies read without
    /// Codable (see `PushRequest.init(json:)`). Errors name the byte or the member, never a value.
    static func parseBody<T>(
        from request: Request, maxBytes: Int, timeout: Duration, checking check: ((ByteBuffer) throws -> Void)? = nil,
        as read: (JSONValue) throws(JSONSyntaxError) -> T
    ) async throws -> T {
        let buffer = try nonEmpty(try await collectBody(of: request, maxBytes: maxBytes, timeout: timeout))
        try check?(buffer)
        let value: JSONValue
        do {
            value = try JSONValue(parsing: buffer.readableBytesView)
        } catch {
            throw OutpostHTTPError.badRequest(
                "the request body is not valid JSON: \(error.reason) at byte \(error.offset)", code: .invalidJSON)
        }
        do {
            return try read(value)
        } catch {
            throw OutpostHTTPError.badRequest(error.reason, code: .invalidJSON)
        }
    }

    /// The request's body, once ``AdmissionMiddleware`` has read it whole.
    @TaskLocal static var arrivedBody: ByteBuffer?

    /// The request's place at the gate, when ``AdmissionMiddleware`` left its body for the route to read.
    @TaskLocal static var arrivingBody: ArrivingBody?

    /// Collects the whole body, at most `maxBytes` of it, and gives up once `timeout` has passed since it
    /// started: a client that trickles its body must not hold a place of the admission gate for longer. The
    /// read is cancelled, which also ends the connection, and waited for, so that nothing else reads the body
    /// while it does. A body ``AdmissionMiddleware`` has read is taken as it is; one it left to the route is read
    /// giving the request's place back while it arrives, as the middleware reads one.
    static func collectBody(
        of request: Request, maxBytes: Int, timeout: Duration, watch: DeadlineWatch = .shared
    ) async throws -> ByteBuffer {
        if let body = arrivedBody {
            guard body.readableBytes <= maxBytes else {
                throw OutpostHTTPError(
                    .contentTooLarge, .payloadTooLarge, "the request body is larger than \(maxBytes) bytes")
            }
            return body
        }
        if let arriving = arrivingBody {
            return try await $arrivingBody.withValue(nil) {
                try await arriving.collect { try await collectBody(of: request, maxBytes: maxBytes, timeout: timeout, watch: watch) }
            }
        }
        let reading = Task {
            var request = request
            return try await request.collectBody(upTo: maxBytes)
        }
        let expired = NIOLockedValueBox(false)
        let deadline = watch.schedule(after: timeout) {
            expired.withLockedValue { $0 = true }
            reading.cancel()
        }
        let result = await withTaskCancellationHandler {
            await reading.result
        } onCancel: {
            reading.cancel()
        }
        watch.cancel(deadline)
        // Checked first: a read cut short by the deadline may end as if the body were complete.
        if expired.withLockedValue({ $0 }) {
            throw OutpostHTTPError(
                .requestTimeout, .requestTimeout,
                "the request body did not arrive within \(timeout.components.seconds) s; send it again",
                headers: [.connection: "close"])
        }
        guard case .success(let buffer) = result else {
            throw OutpostHTTPError(
                .contentTooLarge, .payloadTooLarge, "the request body is larger than \(maxBytes) bytes")
        }
        return buffer
    }

    private static func nonEmpty(_ buffer: ByteBuffer) throws -> ByteBuffer {
        guard buffer.readableBytes > 0 else {
            throw OutpostHTTPError.badRequest("the request body is empty; expected JSON", code: .invalidJSON)
        }
        return buffer
    }

    /// Says where and what, never echoing the offending value.
    static func describe(_ error: DecodingError) -> String {
        func path(_ codingPath: [any CodingKey]) -> String {
            var text = ""
            for key in codingPath {
                if let index = key.intValue {
                    text += "[\(index)]"
                } else {
                    text += text.isEmpty ? key.stringValue : "." + key.stringValue
                }
            }
            return text.isEmpty ? "body" : text
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = path(context.codingPath)
            return parent == "body" ? "missing field '\(key.stringValue)'" : "\(parent): missing field '\(key.stringValue)'"
        case .typeMismatch(let type, let context):
            return "\(path(context.codingPath)): expected \(describe(type))"
        case .valueNotFound(let type, let context):
            return "\(path(context.codingPath)): expected \(describe(type)), found null"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty { return "the request body is not valid JSON" }
            return "\(path(context.codingPath)): \(context.debugDescription)"
        @unknown default:
            return "the request body does not match the schema"
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Int64.Type, is Int.Type: return "an integer"
        case is Double.Type: return "a number"
        case is Bool.Type: return "a boolean"
        case is [Any].Type: return "an array"
        default:
            let name = String(describing: type)
            if name.hasPrefix("Array") { return "an array" }
            if name.hasPrefix("Dictionary") { return "an object" }
            return "a value of another type"
        }
    }

    /// A required, non-empty query parameter, given once.
    static func required(_ name: String, in request: Request) throws -> String {
        guard let value = try optional(name, in: request) else {
            throw OutpostHTTPError.badRequest("the query parameter '\(name)' is required")
        }
        return value
    }

    /// An optional query parameter. Given, it must be given once and not be empty: an address that says
    /// two things, or nothing, is refused rather than guessed at.
    static func optional(_ name: String, in request: Request) throws -> String? {
        let values = request.uri.queryParameters[values: name[...]]
        guard let value = values.first else { return nil }
        guard values.count == 1 else {
            throw OutpostHTTPError.badRequest("the query parameter '\(name)' is given more than once")
        }
        guard !value.isEmpty else {
            throw OutpostHTTPError.badRequest("the query parameter '\(name)' is empty; leave it out instead")
        }
        return String(value)
    }

    /// A page size between 1 and `max`, or `defaultValue` when absent.
    static func limit(in request: Request, default defaultValue: Int, max: Int) throws -> Int {
        guard let text = try optional("limit", in: request) else { return defaultValue }
        guard let value = Int(text), value >= 1, value <= max else {
            throw OutpostHTTPError.badRequest("limit must be a whole number from 1 to \(max)")
        }
        return value
    }

    /// How many pages a pull streams (`pages`): nil for an ordinary answer of one page. More than `max` streams
    /// `max`: the last page then says `hasMore`, and the client pulls again from its cursor.
    static func pages(in request: Request, max: Int) throws -> Int? {
        guard let text = try optional("pages", in: request) else { return nil }
        if let value = Int(text), value >= 1 { return min(value, max) }
        // A whole number too large for 64 bits is still a whole number from 1, as the schema says: it streams `max`.
        let digits = text.hasPrefix("+") ? text.utf8.dropFirst() : text.utf8[...]
        if Int(text) == nil, !digits.isEmpty, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) { return max }
        throw OutpostHTTPError.badRequest("pages must be a whole number from 1")
    }

    /// A known collection named by the `collection` query parameter.
    static func collection(in request: Request, registry: CollectionRegistry) throws -> CollectionPolicy {
        let name = try required("collection", in: request)
        guard let policy = registry[name] else {
            throw OutpostHTTPError(.notFound, .unknownCollection, "unknown collection")
        }
        return policy
    }

    /// A scope: an identifier, or absent.
    static func scope(in request: Request) throws -> String? {
        try optionalIdentifier("scope", in: request)
    }

    /// A query parameter that must be an identifier when present.
    static func optionalIdentifier(_ name: String, in request: Request) throws -> String? {
        guard let value = try optional(name, in: request) else { return nil }
        guard Identifier.isValid(value) else {
            throw OutpostHTTPError.badRequest("\(name) must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        return value
    }
}

extension Response {
    /// A JSON response with sorted keys, never cached.
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return json(bytes: try encoder.encode(value), status: status)
    }

    /// A JSON response from bytes already written, never cached.
    static func json(bytes: some Sequence<UInt8>, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status,
            headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
