import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import OutpostProtocol

/// Gives the HTTP parser's refusals the API's error document. Hummingbird answers a request it cannot parse
/// (a repeated `Content-Length`, both `Content-Length` and `Transfer-Encoding`, headers or an address over
/// its limits) with a bare 400 and closes the connection; this handler sits between the parser and
/// Hummingbird, sees the parser's error go by, and writes that 400 with `{"error":{"code","message"}}`.
final class ParserErrorResponder: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// The parser's error, until its answer goes out.
    private var failure: HTTPParserError?

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? HTTPParserError { failure = error }
        context.fireErrorCaught(error)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard let failure, case .head(var head) = unwrapOutboundIn(data), head.status == .badRequest else {
            context.write(data, promise: promise)
            return
        }
        self.failure = nil
        let body = Self.document(for: failure)
        head.headerFields[.contentType] = "application/json"
        head.headerFields[.contentLength] = String(body.readableBytes)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: promise)
    }

    /// The error document for a parser's refusal: what was wrong, in words, never the bytes.
    static func document(for error: HTTPParserError) -> ByteBuffer {
        let reason: String
        switch error {
        case .headerOverflow: reason = "its address or headers are longer than the server reads"
        case .invalidContentLength, .unexpectedContentLength: reason = "its Content-Length is invalid or repeated"
        case .invalidChunkSize: reason = "its chunked body is malformed"
        case .invalidURL, .invalidPath, .invalidQueryString, .invalidFragment, .invalidHost, .invalidPort: reason = "its address is malformed"
        case .invalidHeaderToken, .invalidCharactersUsed, .lfExpected: reason = "a header is malformed"
        case .invalidMethod: reason = "its method is malformed"
        case .invalidVersion: reason = "its HTTP version is not one the server speaks"
        // Content-Length beside Transfer-Encoding, among others, comes as `unknown`.
        default: reason = "it is not valid HTTP/1.1"
        }
        let message = "the request could not be read: \(reason)"
        return ByteBuffer(string: #"{"error":{"code":"\#(WireError.Code.invalidRequest.rawValue)","message":"\#(message)"}}"#)
    }
}
