import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import OutpostProtocol

/// The relay's line to the server upstream, with the relay's token.
struct RelayUpstream: Sendable {
    let configuration: RelayConfiguration

    /// Why a request upstream did not get an answer the relay can use: said without the token or any payload.
    struct Failure: Error, CustomStringConvertible {
        var description: String
        /// The server's HTTP status, when it answered.
        var status: Int? = nil
    }

    /// Forwards `request` and returns the server's results.
    func forward(_ request: RelayForwardRequest) async throws -> RelayForwardResponse {
        let body = Data(try request.jsonBytes())
        let answer = try await send(.POST, path: "/v1/relay/forward", body: body)
        do {
            return try RelayForwardResponse(jsonBytes: answer)
        } catch {
            throw Failure(description: "the server's answer to a forward is not one this relay reads")
        }
    }

    /// Tells the server the relay's backlog and its devices' heartbeats.
    func report(_ status: RelayStatusReport) async throws {
        _ = try await send(.POST, path: "/v1/relay/status", body: try JSONEncoder().encode(status))
    }

    /// GETs `path` (with its query) and returns the body of a 2xx answer.
    func get(_ path: String) async throws -> Data {
        try await send(.GET, path: path, body: nil)
    }

    private func send(_ method: HTTPMethod, path: String, body: Data?) async throws -> Data {
        let base =
            configuration.upstream.absoluteString.hasSuffix("/")
            ? String(configuration.upstream.absoluteString.dropLast()) : configuration.upstream.absoluteString
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(configuration.token)")
        request.headers.add(name: "User-Agent", value: "outpost-relay")
        request.headers.add(name: ProtocolFeature.header, value: ProtocolFeature.allNames)
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(data: body))
        }
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        do {
            response = try await HTTPClient.shared.execute(
                request, deadline: .now() + .nanoseconds(Int64(configuration.timeout / .nanoseconds(1))))
            bytes = try await response.body.collect(upTo: 64 * 1024 * 1024)
        } catch {
            throw Failure(description: "the server at \(configuration.upstream.host ?? "upstream") cannot be reached")
        }
        guard (200..<300).contains(response.status.code) else {
            let wire = try? JSONDecoder().decode(WireError.self, from: Data(buffer: bytes))
            let detail = wire.map { "\($0.code.rawValue): \($0.message)" } ?? "no error body"
            throw Failure(description: "the server answered \(response.status.code) (\(detail))", status: Int(response.status.code))
        }
        return Data(buffer: bytes)
    }
}
