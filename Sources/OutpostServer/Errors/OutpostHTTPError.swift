import Foundation
import Hummingbird
import OutpostProtocol

/// An error the server answers with `{"error":{"code","message"}}` and a matching HTTP status.
public struct OutpostHTTPError: Error, HTTPResponseError, Sendable, CustomStringConvertible {
    public var status: HTTPResponse.Status
    public var wire: WireError
    public var headers: HTTPFields

    public init(_ status: HTTPResponse.Status, _ code: WireError.Code, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.wire = WireError(code: code, message: message)
        self.headers = headers
    }

    public var description: String { "\(status.code) \(wire.code): \(wire.message)" }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var headers = self.headers
        headers[.contentType] = "application/json; charset=utf-8"
        headers[.cacheControl] = "no-store"
        let body = try encoder.encode(wire)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func badRequest(_ message: String, code: WireError.Code = .invalidRequest) -> Self {
        Self(.badRequest, code, message)
    }

    static func unauthorized(_ code: WireError.Code, _ message: String) -> Self {
        Self(.unauthorized, code, message, headers: [.wwwAuthenticate: "Bearer"])
    }

    static func forbidden(_ message: String) -> Self { Self(.forbidden, .forbidden, message) }

    static let unavailable = Self(
        .serviceUnavailable, .serviceUnavailable, "storage is unavailable; retry later", headers: [.retryAfter: "5"])

    /// The identity provider's keys could not be fetched: a token of it cannot be judged yet.
    static let keysUnavailable = Self(
        .serviceUnavailable, .serviceUnavailable, "the identity provider's keys cannot be fetched; retry later",
        headers: [.retryAfter: "5"])

    /// Too many requests already wait for their turn, or this one waited its longest (see ``AdmissionGate``),
    /// or other writers held what it needed for longer than the database waits.
    static let busy = Self(
        .serviceUnavailable, .serviceUnavailable, "the server is busy; retry later", headers: [.retryAfter: "1"])
}
