import Crypto
import Foundation
import OutpostProtocol
import OutpostTesting
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Photos through the outbox with real `outpost` processes, on both engines: saved offline, uploaded through a
/// link that breaks, resumed, stored once, fetched by another device of the person and by no one else.
@Suite("Files end to end", .timeLimit(.minutes(5)))
struct FilesEndToEndTests {
    /// Bytes that look like nothing in particular, of `count` bytes, different for each `seed`.
    static func photo(_ count: Int, seed: UInt64) -> Data {
        var state = seed
        return Data(
            (0..<count).map { _ in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: state >> 33)
            })
    }

    /// How many bytes of `sha256` the server holds, asked as `user` would.
    static func received(_ sha256: String, session: AppSession, token: String) async throws -> Int64? {
        var request = URLRequest(url: URL(string: "\(session.url)/v1/uploads/\(sha256)?collection=builds")!)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        let (data, response) = try await URLSession.shared.data(for: request)
        guard (response as? HTTPURLResponse)?.statusCode == 200 else { return nil }
        return try JSONDecoder().decode(FileUpload.self, from: data).received
    }

    @Test(
        "a 5 MB photo saved offline, its upload killed part-way and then cut mid-file, resumes after the last range the server stored; the build is synced only then, and the same photo again is not sent",
        arguments: StorageKind.fileStores)
    func photoSurvivesKillAndCut(kind: StorageKind) async throws {
        let session = try await AppSession.on(kind)
        try await session.startServer()
        let proxy = try await FaultProxy.start(upstreamPort: Int(session.port)!)
        let crew = try await session.device("crew-1", user: "cal", through: proxy.port)
        let store = session.root.appendingPathComponent("crew-1/device.sqlite").path
        let token = try await session.token(user: "cal")
        let bytes = Self.photo(5_000_000, seed: kind == .sqlite ? 1 : 2)
        let path = session.root.appendingPathComponent("shed.jpg").path
        try bytes.write(to: URL(fileURLWithPath: path))
        let sha256 = Array(SHA256.hash(data: bytes)).hexString

        // Given a build saved with its photo while the link is down,
        proxy.inject(.drop)
        let saved = try await crew(["builds", "save", "--name", "Shed", "--photo", path])
        #expect(saved.status == 0, "\(saved.stderr)")
        #expect(saved.stdout.contains("photo shed.jpg (5.0 MB): saved on this device"), "\(saved.stdout)")
        let build = try #require(saved.stdout.split(separator: "(").dropFirst().first?.split(separator: ")").first.map(String.init))

        // when a sync's link falls silent part-way through the file, once the server has stored some ranges, and
        // the device is killed there,
        proxy.inject(.silenceAfter(bytes: 2_500_000, direction: .upstream))
        let killed = try await OutpostProcess.start(["device", "sync", "--store", store])
        let deadline = ContinuousClock.now.advanced(by: .seconds(120))
        var stored: Int64 = 0
        while stored == 0 || proxy.counters.bytesUpstream < 2_500_000, killed.isRunning, ContinuousClock.now < deadline {
            stored = try await Self.received(sha256, session: session, token: token) ?? 0
            try await Task.sleep(for: .milliseconds(20))
        }
        killed.signal(SIGKILL)
        _ = await killed.wait()
        stored = try await Self.received(sha256, session: session, token: token) ?? 0
        #expect(stored > 0 && stored < 2_500_000, "the server held \(stored) bytes when the sync was killed")
        // and the next sync's link is cut in the middle of the rest,
        proxy.inject(.cutAfter(bytes: 600_000, direction: .upstream))
        let cut = try await crew(["device", "sync"])
        #expect(cut.stdout.contains("failed"), "\(cut.stdout) \(cut.stderr)")
        let kept = try await Self.received(sha256, session: session, token: token) ?? 0
        #expect(kept >= stored && kept < 5_000_000, "the server held \(kept) bytes after the cut")
        // The device shows the share the server told it it holds: what it held when the cut sync began, never more
        // than it kept.
        let pending = try await crew(["builds", "list"]).stdout
        let shown = pending.components(separatedBy: "photo shed.jpg (5.0 MB): ").dropFirst().first?.split(separator: " ").first
            .flatMap { Int64($0) }
        #expect(pending.contains("\(build)  Shed  failed"), "\(pending)")
        #expect(shown.map { $0 >= stored * 100 / 5_000_000 && $0 <= kept * 100 / 5_000_000 } == true, "\(pending)")

        // then, the link back, the upload resumes after the stored ranges, and the build is synced with it.
        proxy.inject(nil)
        let before = proxy.counters.bytesUpstream
        let resumed = try await crew(["device", "sync"])
        #expect(resumed.stdout.contains("1 synced"), "\(resumed.stdout) \(resumed.stderr)")
        let sent = proxy.counters.bytesUpstream - before
        #expect(sent > 5_000_000 - kept && sent < 5_000_000 - kept + 200_000, "the resumed sync sent \(sent) bytes for the last \(5_000_000 - kept)")
        let listed = try await crew(["builds", "list"]).stdout
        #expect(listed.contains("photo shed.jpg (5.0 MB): uploaded"), "\(listed)")
        // Its bytes are one file in the file directory: the data folder's on SQLite, the one named on PostgreSQL.
        let folder = kind == .sqlite ? session.data + "/files" : session.fileDirectory
        if let folder {
            let kept = FileManager.default.enumerator(atPath: folder)?.compactMap { $0 as? String }.filter { $0.hasSuffix(sha256) }
            #expect(kept?.count == 1, "\(folder): \(kept ?? [])")
            let size = try kept?.first.map { try FileManager.default.attributesOfItem(atPath: folder + "/" + $0)[.size] as? Int }
            #expect(size == 5_000_000)
        }
        #expect(!listed.contains("pending") && !listed.contains("failed"), "\(listed)")

        // The same photo on a second build is not sent again: the save delivers the build alone.
        let second = proxy.counters.bytesUpstream
        let again = try await crew(["builds", "save", "--name", "Roof", "--photo", path])
        #expect(again.status == 0 && again.stdout.contains("uploaded"), "\(again.stdout) \(again.stderr)")
        #expect(proxy.counters.bytesUpstream - second < 100_000, "the second build sent its photo again")
        #expect(try await crew(["builds", "list"]).stdout.components(separatedBy: "photo shed.jpg (5.0 MB): uploaded").count == 3)

        // Another device of the person fetches it whole; another member of staff may not.
        let tablet = try await session.device("tablet-1", user: "cal")
        // On PostgreSQL a pull gives a change once every transaction older than it has ended, in the whole cluster
        // (the tests' cluster is shared by every suite), and a list that could not refresh says so: the person
        // lists again, for at most 30 s.
        var tabletList = try await tablet(["builds", "list"])
        let listedBy = ContinuousClock.now.advanced(by: .seconds(30))
        while !tabletList.stdout.contains(build), ContinuousClock.now < listedBy {
            try await Task.sleep(for: .milliseconds(500))
            tabletList = try await tablet(["builds", "list"])
        }
        #expect(tabletList.stdout.contains(build), "\(tabletList.stdout) \(tabletList.stderr)")
        let copy = session.root.appendingPathComponent("copy.jpg").path
        let fetched = try await tablet(["device", "file", "builds", build, "photo", "--out", copy])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: copy)) == bytes)
        var request = URLRequest(url: URL(string: "\(session.url)/v1/files/\(sha256)?collection=builds&recordId=\(build)")!)
        request.setValue("Bearer \(try await session.token(user: "dee"))", forHTTPHeaderField: "Authorization")
        let (_, refused) = try await URLSession.shared.data(for: request)
        #expect((refused as? HTTPURLResponse)?.statusCode == 404)
        try await proxy.stop()
        await session.stopServer()
    }
}
