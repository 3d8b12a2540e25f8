import Foundation
import NIOConcurrencyHelpers
import OutpostConcurrency
import OutpostProtocol
import Testing

@testable import OutpostClient
@testable import OutpostHTTP

/// The pieces of a streamed pull on the device: lines cut from pieces at any boundary, and a refresh's reader
/// that follows one stream while it stands at the cursor asked for, and opens another otherwise.
@Suite("Streamed pulls")
struct PullStreamTests {
    @Test("lines come out whole wherever the pieces are cut; a line without its newline is held back")
    func linesAcrossPieces() {
        let text = Array("{\"a\":1}\n\n{\"b\":\"x\\ny\"}\n{\"c\":".utf8)
        for first in 0...text.count {
            for second in first...text.count {
                var splitter = LineSplitter()
                var lines: [[UInt8]] = []
                for piece in [text[..<first], text[first..<second], text[second...]] {
                    lines += splitter.lines(in: piece)
                }
                #expect(lines == [Array("{\"a\":1}".utf8), Array("{\"b\":\"x\\ny\"}".utf8)])
                #expect(splitter.holdsPartialLine)
            }
        }
        var splitter = LineSplitter()
        #expect(splitter.lines(in: Array("{}\n".utf8)) == [Array("{}".utf8)])
        #expect(!splitter.holdsPartialLine)
    }

    /// Streams of pages numbered from the cursor they start at: page n has cursor "n+1", and the last page says
    /// it is the last.
    final class Streams: @unchecked Sendable {
        private let lock = NSLock()
        private(set) var opened: [String] = []
        let pagesPerStream: Int
        let lastPage: Int

        init(pagesPerStream: Int, lastPage: Int) {
            self.pagesPerStream = pagesPerStream
            self.lastPage = lastPage
        }

        /// From the start (no cursor yet) is from page 0.
        func open(_ cursor: String?) -> AsyncThrowingStream<PullPage, any Error> {
            let cursor = cursor ?? "0"
            lock.withLock { opened.append(cursor) }
            let start = Int(cursor)!
            let pages = (start...lastPage).prefix(pagesPerStream).map { n in
                try! PullPage(PullResponse(changes: [], cursor: String(n + 1), hasMore: n < lastPage))
            }
            return AsyncThrowingStream { continuation in
                for page in pages { continuation.yield(page) }
                continuation.finish()
            }
        }
    }

    @Test("pages follow one stream while it stands at the cursor asked for (none, at first); another opens where it ended or was left")
    func readerFollowsAndReopens() async throws {
        let streams = Streams(pagesPerStream: 2, lastPage: 4)
        let reader = PullStream<PullPage>(cursor: { $0.cursor }) { streams.open($0) }
        // The first pull has no cursor yet.
        var cursor: String? = nil
        var received: [String] = []
        while true {
            let page = try await reader.page(after: cursor)
            received.append(page.cursor)
            guard page.hasMore else { break }
            cursor = page.cursor
        }
        #expect(received == ["1", "2", "3", "4", "5"])
        #expect(streams.opened == ["0", "2", "4"])
        // Asked from another cursor than where the open stream stands (a page not stored, fetched again).
        _ = try await reader.page(after: "3")
        #expect(streams.opened == ["0", "2", "4", "3"])
    }

    /// Streams that yield one page and stay open, held by their producers as a transport's are, and say when
    /// they end.
    final class OpenStreams: @unchecked Sendable {
        private let lock = NSLock()
        private var producers: [AsyncThrowingStream<PullPage, any Error>.Continuation] = []
        /// The cursor of each stream that ended, as it ends.
        let ends: AsyncStream<String>
        private let ending: AsyncStream<String>.Continuation

        init() {
            (ends, ending) = AsyncStream.makeStream()
        }

        func open(_ cursor: String?) -> AsyncThrowingStream<PullPage, any Error> {
            let cursor = cursor ?? ""
            let ending = self.ending
            return AsyncThrowingStream { continuation in
                continuation.yield(try! PullPage(PullResponse(changes: [], cursor: cursor + "+", hasMore: true)))
                self.lock.withLock { self.producers.append(continuation) }
                continuation.onTermination = { _ in ending.yield(cursor) }
            }
        }
    }

    @Test(
        "a stream left for another cursor, or open when the refresh ends, is ended, and with it its request",
        .timeLimit(.minutes(5)))
    func streamsLeftAreEnded() async throws {
        let streams = OpenStreams()
        var ends = streams.ends.makeAsyncIterator()
        let reader = PullStream<PullPage>(cursor: { $0.cursor }) { streams.open($0) }
        #expect(try await reader.page(after: "a").cursor == "a+")
        #expect(try await reader.page(after: "b").cursor == "b+")
        #expect(await ends.next() == "a")
        reader.close()
        #expect(await ends.next() == "b")
    }

    @Test("a stream that failed is let go: asked again from the same cursor, another opens")
    func failedStreamIsReopened() async throws {
        struct Dropped: Error {}
        let opened = NIOLockedValueBox(0)
        let reader = PullStream<PullPage>(cursor: { $0.cursor }) { _ in
            opened.withLockedValue { $0 += 1 }
            // A first page, then the error, again each time it is asked (as an unfolding stream does).
            let calls = NIOLockedValueBox(0)
            return AsyncThrowingStream(unfolding: {
                guard
                    calls.withLockedValue({
                        $0 += 1; return $0
                    }) == 1
                else { throw Dropped() }
                return try PullPage(PullResponse(changes: [], cursor: "1", hasMore: true))
            })
        }
        #expect(try await reader.page(after: nil).cursor == "1")
        await #expect(throws: Dropped.self) { _ = try await reader.page(after: "1") }
        // The first page of a new stream, not the old one's error again.
        #expect(try await reader.page(after: "1").cursor == "1")
        #expect(opened.withLockedValue { $0 } == 2)
    }

    @Test("a stream that ends before its first page is the server's fault, not the end of the changes")
    func emptyStream() async throws {
        let reader = PullStream<PullPage>(cursor: { $0.cursor }) { _ in AsyncThrowingStream { $0.finish() } }
        await #expect {
            _ = try await reader.page(after: "0")
        } throws: { error in
            (error as? TransportError)?.kind == .invalidResponse
        }
    }
}

/// How ``JoinedPieces`` sizes an upload's writes to the pace of its connection.
@Suite("Upload writes")
struct UploadWritesTests {
    @Test("an upload's writes start at 64 KiB, double while the connection asks again at once, and start over after a slow ask")
    func writesFollowTheLink() async throws {
        let chunk = 524_288
        let data = Data((0..<(8 * chunk)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 13) })
        let body = UploadBody(offset: 0, count: Int64(data.count)) {
            AsyncThrowingStream { continuation in
                for start in stride(from: 0, to: data.count, by: chunk) { continuation.yield(data[start..<start + chunk]) }
                continuation.finish()
            }
        }
        let time = NIOLockedValueBox(Duration.zero)
        let (sizes, sent) = try await DeadlineWatch(clock: ContinuousClock()).endingSilence(
            after: .seconds(3600),
            { heard in
                var writes = JoinedPieces(body: body, heard: heard, elapsed: { time.withLockedValue { $0 } }).makeAsyncIterator()
                var sizes: [Int] = []
                var sent = Data()
                while let write = try await writes.next() {
                    sizes.append(write.readableBytes)
                    sent.append(contentsOf: write.readableBytesView)
                    // The connection takes two seconds for the fifth write: a slow link.
                    if sizes.count == 5 { time.withLockedValue { $0 += .seconds(2) } }
                }
                return (sizes, sent)
            }, silenced: { _ in CancellationError() })
        let start = [65_536, 131_072, 262_144, 65_536, 1_048_576]
        #expect(sizes == start + start + [1_048_576])
        #expect(sent == data)
    }
}
