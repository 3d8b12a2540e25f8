import Crypto
import Foundation
import GRDB
import NIOConcurrencyHelpers
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// Files through the outbox: stored sealed with their record, uploaded before the mutation that names them,
/// resumed where the server's bytes end, stored there once, and fetched on demand by another device.
@Suite("Files through the outbox", .timeLimit(.minutes(5)))
struct FileSyncTests {
    struct Harness {
        let store: LocalStore
        let server: InMemoryServer
        let transport: InMemoryTransport
        let engine: SyncEngine
    }

    func withEngine(server: InMemoryServer = InMemoryServer(), _ body: (Harness) async throws -> Void) async throws {
        try await withStore { store, _ in
            let transport = InMemoryTransport(server: server)
            let engine = SyncEngine(
                store: store, transport: transport,
                configuration: SyncConfiguration(deviceId: "dev-1", retryDelays: [], deliversAfterSave: false),
                clock: ManualClock(), now: ManualNow().closure)
            await engine.setOnline(true)
            try await body(Harness(store: store, server: server, transport: transport, engine: engine))
        }
    }

    /// Bytes that differ from one test to the next, of `count` bytes.
    static func photo(_ count: Int, seed: UInt8 = 7) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
    }

    static func digest(_ data: Data) -> String { Array(SHA256.hash(data: data)).hexString }

    /// A build named `name` saved through `engine` with `photo` attached as its field `photo`, a JPEG.
    @discardableResult
    static func saveBuild(_ engine: SyncEngine, _ id: String = "b1", name: String = "Shed", photo: Data) async throws -> LocalRecord {
        try await engine.save(
            LocalStore.Write(collection: "builds", recordId: id, fields: ["name": .string(name)]),
            attaching: ["photo": Attachment(data: photo, type: "image/jpeg")])
    }

    @Test("a file attached offline is stored sealed with its record; the record is synced only once the file is on the server")
    func attachedOfflineSyncsWithItsFile() async throws {
        try await withEngine { h in
            // Given a 5 MB photo attached to a build while offline,
            h.transport.isOnline = false
            await h.engine.setOnline(false)
            let photo = Self.photo(5_000_000)
            let record = try await h.engine.save(
                LocalStore.Write(collection: "builds", recordId: "b1", fields: ["name": "Shed"]),
                attaching: ["photo": Attachment(data: photo, type: "image/jpeg", name: "shed.jpg")])
            // the record names it, and the store holds it sealed: no run of its bytes is in the file in the clear,
            let reference = try #require(FileReference.references(in: record.fields)["photo"])
            #expect(reference == FileReference(sha256: Self.digest(photo), size: 5_000_000, type: "image/jpeg", name: "shed.jpg"))
            try await h.store.checkpoint()
            let file = try Data(contentsOf: h.store.url)
            #expect(file.range(of: photo.subdata(in: 1_000_000..<1_000_064)) == nil)
            #expect(try await h.engine.fileState(reference).storedBytes == 5_000_000)
            try await h.engine.refreshStatus()
            #expect(await h.engine.status.pendingUploadBytes == 5_000_000)
            h.transport.isOnline = true
            #expect(await h.engine.sendHeartbeat())
            #expect(await h.server.heartbeats.last?.pendingUploadBytes == 5_000_000)
            h.transport.isOnline = false
            // when the link returns and it syncs,
            h.transport.isOnline = true
            let summary = try await h.engine.sync(retrying: false)
            // then the file went first, whole in one request, and the record after it: synced, nothing left to upload.
            #expect(summary.synced == 1)
            #expect(await h.server.upload(of: reference.sha256)?.complete == true)
            #expect(await h.server.uploadedRanges.map(\.offset) == [0])
            #expect(try await h.store.record(collection: "builds", recordId: "b1")?.syncStatus == .synced)
            #expect(await h.engine.status.pendingUploadBytes == 0)
            #expect(try await h.engine.fileState(reference).uploadedBytes == 5_000_000)
        }
    }

    @Test("an upload cut part-way keeps the record pending, and the next sync resumes after the last byte the server took")
    func cutUploadResumes() async throws {
        try await withEngine { h in
            let photo = Self.photo(10_000_000)
            try await Self.saveBuild(h.engine, photo: photo)
            // Given a link that goes down part-way through the file,
            h.transport.cutUploads(afterBytes: 3_000_000)
            let first = try await h.engine.sync(retrying: false)
            // the record is not synced, and the server holds what arrived before the cut,
            #expect(first.synced == 0 && first.failed == 1)
            #expect(try await h.store.record(collection: "builds", recordId: "b1")?.syncStatus == .failed)
            #expect(await h.server.applied.isEmpty)
            #expect(await h.server.upload(of: Self.digest(photo))?.received == 3_000_000)
            // when the link returns,
            h.transport.isOnline = true
            let second = try await h.engine.sync(retrying: false)
            // then the upload goes on from there, each byte sent once, and the record is synced.
            #expect(second.synced == 1)
            #expect(await h.server.uploadedRanges.map(\.offset) == [0, 3_000_000])
            #expect(try await h.store.record(collection: "builds", recordId: "b1")?.syncStatus == .synced)
        }
    }

    @Test("the same photo on two records is stored once on the device and uploaded once")
    func samePhotoTwice() async throws {
        try await withEngine { h in
            let photo = Self.photo(700_000)
            for id in ["b1", "b2"] {
                try await Self.saveBuild(h.engine, id, photo: photo)
            }
            let chunks = try await h.store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM file_chunks") }
            #expect(chunks == 2)
            let summary = try await h.engine.sync(retrying: false)
            #expect(summary.synced == 2)
            #expect(await h.server.uploadedRanges.count == 1)
        }
    }

    @Test("a file the server refuses is not sent again; its record is refused with the server's reason")
    func refusedFile() async throws {
        let server = InMemoryServer()
        await server.setMaxFileBytes(1_000_000)
        try await withEngine(server: server) { h in
            let record = try await Self.saveBuild(h.engine, photo: Self.photo(2_000_000))
            let reference = try #require(FileReference.references(in: record.fields)["photo"])
            let summary = try await h.engine.sync(retrying: false)
            #expect(summary.refused == 1)
            #expect(await h.server.uploadedRanges.isEmpty)
            let stored = try #require(try await h.store.record(collection: "builds", recordId: "b1"))
            #expect(stored.syncStatus == .refused)
            #expect(stored.syncErrorCode == WireError.Code.fileMissing.rawValue)
            #expect(try await h.engine.fileState(reference).uploadError == "files are at most 1000000 bytes")
            #expect(await h.engine.status.pendingUploadBytes == 0)
        }
    }

    @Test("a file changed between its digest and its storing is refused, and nothing of the write is stored")
    func changedFileRefused() async throws {
        try await withEngine { h in
            let url = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-file-\(UUID()).jpg")
            defer { try? FileManager.default.removeItem(at: url) }
            try Self.photo(600_000).write(to: url)
            let staged = try await StagedFile.stage(Attachment(contentsOf: url, type: "image/jpeg"))
            try Self.photo(600_000, seed: 9).write(to: url)
            await #expect(throws: ClientError.self) {
                try await h.engine.save(
                    LocalStore.Write(collection: "builds", recordId: "b1", fields: ["name": "Shed"]), files: ["photo": staged],
                    at: Date())
            }
            #expect(try await h.store.record(collection: "builds", recordId: "b1") == nil)
            #expect(try await h.store.outbox.count() == 0)
            #expect(try await h.store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM file_chunks") } == 0)
        }
    }

    @Test("a file larger than the write-ahead log's limit is copied into the store as it is saved, and the log's space given back")
    func largeFileGivesTheLogBack() async throws {
        try await withEngine { h in
            await h.engine.setOnline(false)
            let photo = Self.photo(LocalStore.walSizeLimit + 1_000_000)
            try await Self.saveBuild(h.engine, photo: photo)
            let log = try FileManager.default.attributesOfItem(atPath: h.store.url.path + "-wal")[.size] as? Int ?? 0
            #expect(log < 1_000_000, "the log holds \(log) bytes")
            let reference = FileReference(sha256: Self.digest(photo), size: Int64(photo.count), type: "image/jpeg", name: nil)
            #expect(try await h.engine.fileState(reference).storedBytes == Int64(photo.count))
        }
    }

    @Test("a file whose bytes are gone from the device fails the sync with the reason, and sends none of it")
    func missingDeviceBytesFail() async throws {
        try await withEngine { h in
            let photo = Self.photo(1_500_000)
            try await Self.saveBuild(h.engine, photo: photo)
            // Given an upload cut in the middle of the file's second chunk,
            h.transport.cutUploads(afterBytes: 700_000)
            _ = try await h.engine.sync(retrying: false)
            #expect(await h.server.upload(of: Self.digest(photo))?.received == 700_000)
            h.transport.isOnline = true
            // and the store then lost every chunk of the file after its first,
            try await h.store.writeUnflushed { db in try db.execute(sql: "DELETE FROM file_chunks WHERE start > 0") }
            // the sync that would resume mid-chunk ends, the record failed, and the file is not completed.
            let summary = try await h.engine.sync(retrying: false)
            #expect(summary.synced == 0 && summary.failed == 1)
            #expect(await h.server.upload(of: Self.digest(photo))?.complete != true)
            #expect(await h.server.applied.isEmpty)
        }
    }

    /// A link to the server that takes an upload's bytes and stores none of them.
    struct StallingUploads: FileTransport {
        let base: InMemoryTransport
        let requests = NIOLockedValueBox(0)

        func push(_ request: PushRequest) async throws -> PushResponse { try await base.push(request) }
        func pull(collection: String, scope: String?, cursor: String?, limit: Int?) async throws -> PullResponse {
            try await base.pull(collection: collection, scope: scope, cursor: cursor, limit: limit)
        }
        func snapshot(collection: String, scope: String?, continuation: String?, limit: Int?) async throws -> SnapshotResponse {
            try await base.snapshot(collection: collection, scope: scope, continuation: continuation, limit: limit)
        }
        func health() async throws -> HealthResponse { try await base.health() }
        func upload(of sha256: String, collection: String) async throws -> FileUpload? {
            try await base.upload(of: sha256, collection: collection)
        }
        func uploadRange(_ body: UploadBody, of file: FileReference, collection: String) async throws -> FileUpload {
            requests.withLockedValue { $0 += 1 }
            for try await _ in body.pieces() {}
            return FileUpload(sha256: file.sha256, size: file.size, type: file.type, received: body.offset, complete: false)
        }
        func download(
            _ sha256: String, collection: String, scope: String?, recordId: String, from offset: Int64,
            receive: @escaping @Sendable (Data) async throws -> Void
        ) async throws {
            try await base.download(sha256, collection: collection, scope: scope, recordId: recordId, from: offset, receive: receive)
        }
    }

    @Test("an upload the server takes nothing of ends the sync after three tries, failed, and the record waits")
    func stalledUploadEnds() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let stalling = StallingUploads(base: InMemoryTransport(server: server))
            let engine = SyncEngine(
                store: store, transport: stalling,
                configuration: SyncConfiguration(deviceId: "dev-1", retryDelays: [], deliversAfterSave: false),
                clock: ManualClock(), now: ManualNow().closure)
            await engine.setOnline(true)
            try await Self.saveBuild(engine, photo: Self.photo(700_000))
            let summary = try await engine.sync(retrying: false)
            #expect(summary.synced == 0 && summary.failed == 1)
            #expect(stalling.requests.withLockedValue { $0 } == SyncEngine.uploadStalls)
            #expect(await server.applied.isEmpty)
            #expect(try await store.record(collection: "builds", recordId: "b1")?.syncStatus == .failed)
        }
    }

    @Test("with a venue relay as the fallback, files go to the server alone, and wait while it cannot be reached")
    func failoverSendsFilesToTheServer() async throws {
        try await withStore { store, _ in
            let server = InMemoryServer()
            let relay = InMemoryServer()
            let primary = InMemoryTransport(server: server)
            let now = ManualNow()
            let failover = FailoverTransport(primary: primary, fallback: InMemoryTransport(server: relay), now: now.closure)
            let engine = SyncEngine(
                store: store, transport: failover,
                configuration: SyncConfiguration(deviceId: "dev-1", retryDelays: [], deliversAfterSave: false),
                clock: ManualClock(), now: ManualNow().closure)
            try await engine.save(
                LocalStore.Write(collection: "notes", recordId: "n1", fields: ["text": "gate"]),
                attaching: ["photo": Attachment(data: Self.photo(600_000), type: "image/jpeg")])
            try await engine.save(LocalStore.Write(collection: "notes", recordId: "n2", fields: ["text": "no photo"]))
            // While the server cannot be reached, nothing goes to the relay, and the records wait.
            primary.isOnline = false
            let offline = try await engine.sync(retrying: false)
            #expect(offline.synced == 0)
            #expect(await relay.applied.isEmpty)
            #expect(await relay.completeFileCount == 0)
            #expect(try await store.record(collection: "notes", recordId: "n1")?.syncStatus == .failed)
            // Once it answers again, and is tried first again, the file and then both records reach it.
            primary.isOnline = true
            now.advance(seconds: 31)
            #expect(try await engine.sync(retrying: false).synced == 2)
            #expect(await server.completeFileCount == 1)
        }
    }

    @Test("another device that may read the record fetches the file once, with progress, and keeps it sealed")
    func downloadOnDemand() async throws {
        let server = InMemoryServer()
        let photo = Self.photo(1_300_000)
        var sent: LocalRecord?
        try await withEngine(server: server) { h in
            sent = try await Self.saveBuild(h.engine, photo: photo)
            _ = try await h.engine.sync(retrying: false)
        }
        let record = try #require(sent)
        let reference = try #require(FileReference.references(in: record.fields)["photo"])
        try await withEngine(server: server) { h in
            let seen = NIOLockedValueBox<[Int64]>([])
            let data = try await h.engine.fileData(reference, of: record) { progress in
                seen.withLockedValue { $0.append(progress.done) }
            }
            #expect(data == photo)
            #expect(seen.withLockedValue { $0 } == [524_288, 1_048_576, 1_300_000])
            // Asked again, it comes from the device: nothing is downloaded.
            h.transport.isOnline = false
            #expect(try await h.engine.fileData(reference, of: record) == photo)
        }
    }

    @Test(
        "past the bytes a device keeps, files the server holds give theirs back least recently used first; files waiting to go, or named by a record that waits, keep theirs; a screen downloads one again"
    )
    func keptFileBytes() async throws {
        try await withStore { store, _ in
            let now = ManualNow()
            let transport = InMemoryTransport(server: InMemoryServer())
            var configuration = SyncConfiguration(deviceId: "dev-1", retryDelays: [], deliversAfterSave: false)
            configuration.keptFileBytes = 2_500_000
            let engine = SyncEngine(store: store, transport: transport, configuration: configuration, clock: ManualClock(), now: now.closure)
            await engine.setOnline(true)
            // Given three photos of a megabyte each, saved an hour apart,
            let photos = (0..<4).map { Self.photo(1_000_000, seed: UInt8(20 + $0)) }
            var records: [LocalRecord] = []
            for index in 0..<3 {
                records.append(
                    try await Self.saveBuild(engine, "b\(index)", photo: photos[index]))
                now.advance(seconds: 3600)
            }
            let files = try records.map { try #require(FileReference.references(in: $0.fields)["photo"]) }
            func stored(_ file: FileReference) async throws -> Int64 { try await engine.fileState(file).storedBytes }
            // once they are on the server, the oldest gives its bytes back: the other two are within the limit.
            #expect(try await engine.sync().synced == 3)
            #expect(try await stored(files[0]) == 0)
            #expect(try await engine.fileState(files[0]).isOnServer)
            #expect(try await [stored(files[1]), stored(files[2])] == [1_000_000, 1_000_000])

            // A photo saved offline, waiting to upload, is neither counted nor given back, nor is one a record edited
            // offline names: the device may have to send them.
            transport.isOnline = false
            await engine.setOnline(false)
            let waiting = try await Self.saveBuild(engine, "b3", name: "Gate", photo: photos[3])
            let waitingFile = try #require(FileReference.references(in: waiting.fields)["photo"])
            _ = try await engine.save(
                LocalStore.Write(collection: "builds", recordId: "b1", fields: ["name": "Shed, painted", "photo": files[1].json]))
            now.advance(seconds: 3600)
            #expect(try await store.releaseFileBytes(keeping: 0, usedSince: Timestamp(now.date).millisecondsSince1970 - 600_000) == 1_000_000)
            #expect(try await [stored(files[1]), stored(files[2]), stored(waitingFile)] == [1_000_000, 0, 1_000_000])

            // Back online, the edit and the waiting photo go up. A screen asks for the first photo: it comes down
            // again whole, and the device, over its limit, gives back the bytes of the photo used longest ago;
            transport.isOnline = true
            await engine.setOnline(true)
            #expect(try await engine.fileData(files[0], of: records[0]) == photos[0])
            #expect(try await [stored(files[0]), stored(files[1]), stored(waitingFile)] == [1_000_000, 0, 1_000_000])
            // the photo just opened keeps its bytes whatever the limit,
            let tenMinutesAgo = Timestamp(now.date).millisecondsSince1970 - 600_000
            #expect(try await store.releaseFileBytes(keeping: 0, usedSince: tenMinutesAgo) == 1_000_000)
            #expect(try await [stored(files[0]), stored(waitingFile)] == [1_000_000, 0])
            // and a download on its way keeps what has arrived, however long ago it began.
            #expect(try await store.beginDownload(files[2], at: now.date) == 0)
            try await store.storeDownloaded(
                files[2].sha256, start: 0, bytes: photos[2].prefix(LocalStore.fileChunkBytes), at: now.date)
            #expect(try await store.releaseFileBytes(keeping: 0, usedSince: .max) == 1_000_000)
            #expect(try await [stored(files[0]), stored(files[2])] == [0, Int64(LocalStore.fileChunkBytes)])
        }
    }
}
