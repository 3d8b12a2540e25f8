import Foundation
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

/// A build's photos: saved with it, uploaded before it, shown with their upload's progress, and drawn from the
/// device or downloaded for a thumbnail.
@MainActor
@Suite("Build photos")
struct BuildPhotoTests {
    static let photo = Data((0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })

    @Test("a build saved offline with two photos is pending with both waiting; once synced, both are uploaded and the build with them")
    func photosSyncWithTheBuild() async throws {
        try await withTestDevice { device in
            let archive = BuildArchive(engine: device.engine)
            // Given a build saved offline with two photos,
            let saved = try await archive.save(
                name: "Shed", fields: ["floor": 2],
                photos: [
                    Attachment(data: Self.photo, type: "image/jpeg", name: "front.jpg"), Attachment(data: Data("plan".utf8), type: "application/pdf"),
                ])
            // they are in the fields photo and photo_2, on the device, not uploaded,
            #expect(saved.build.photos.map(\.field) == ["photo", "photo_2"])
            let waiting = try await archive.photos(of: saved.build)
            #expect(waiting.map(\.isOnDevice) == [true, true])
            #expect(waiting.map(\.upload) == [.waiting(uploaded: 0), .waiting(uploaded: 0)])
            #expect(await device.engine.status.pendingUploadBytes == 1_500_004)
            // and when the device syncs, both go up before the build, which is then synced.
            device.transport.isOnline = true
            let summary = try await archive.syncAll()
            #expect(summary.upload.synced == 1)
            let build = try #require(try await archive.list().first)
            #expect(build.syncStatus == .synced)
            #expect(try await archive.photos(of: build).map(\.upload) == [.uploaded, .uploaded])
            #expect(await device.server.completeFileCount == 2)
        }
    }

    @Test("the archive screen shows each photo's upload, and a thumbnail from the device or downloaded with its progress")
    func screenThumbnails() async throws {
        let server = InMemoryServer()
        var shedId = ""
        try await withTestDevice(online: true, server: server) { device in
            let screen = BuildArchiveScreen(archive: BuildArchive(engine: device.engine))
            await screen.save(name: "Shed", photos: [Attachment(data: Self.photo, type: "image/jpeg")])
            await device.delivered()
            await screen.reload()
            let row = try #require(screen.rows.first)
            shedId = row.id
            #expect(row.photos.map(\.upload) == [.uploaded])
            #expect(row.photos.first?.uploadedFraction == 1)
            // A photo taken on this device is drawn from it, whatever the network.
            device.transport.isOnline = false
            await screen.loadThumbnail(row.photos[0], of: row)
            #expect(screen.thumbnails[row.photos[0].file.sha256] == .loaded(Self.photo))
        }
        // Another device of the same person, once it has pulled the build, downloads the photo for its thumbnail.
        try await withTestDevice(id: "dev-b", online: true, server: server) { device in
            _ = try await device.engine.pull(collection: "builds")
            let screen = BuildArchiveScreen(archive: BuildArchive(engine: device.engine))
            await screen.reload()
            let row = try #require(screen.rows.first { $0.id == shedId })
            let photo = try #require(row.photos.first)
            #expect(!photo.isOnDevice)
            await screen.loadThumbnail(photo, of: row)
            #expect(screen.thumbnails[photo.file.sha256] == .loaded(Self.photo))
            await screen.reload()
            #expect(screen.rows.first { $0.id == shedId }?.photos.first?.isOnDevice == true)
        }
    }

    @Test("a thumbnail that cannot be downloaded says why, and the row is unchanged")
    func thumbnailOffline() async throws {
        let server = InMemoryServer()
        try await withTestDevice(online: true, server: server) { device in
            _ = try await BuildArchive(engine: device.engine).save(name: "Shed", photos: [Attachment(data: Self.photo, type: "image/jpeg")])
            await device.delivered()
        }
        try await withTestDevice(id: "dev-b", online: true, server: server) { device in
            _ = try await device.engine.pull(collection: "builds")
            let screen = BuildArchiveScreen(archive: BuildArchive(engine: device.engine))
            await screen.reload()
            let row = try #require(screen.rows.first)
            device.transport.isOnline = false
            await screen.loadThumbnail(row.photos[0], of: row)
            #expect(screen.thumbnails[row.photos[0].file.sha256] == .failed("offline"))
        }
    }
}
