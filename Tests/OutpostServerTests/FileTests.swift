import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

@testable import OutpostServer

/// Files that records carry, through the routes, on both engines: uploads by digest in ranges, the push that names
/// them, and their download by whoever may read a record that names them.
@Suite("Files")
struct FileTests {
    static func build(_ id: String, photo: FileReference?, at seconds: Double = 1, device: String = "phone-ana") -> Mutation {
        var fields: [String: JSONValue] = ["name": "Block C"]
        if let photo { fields["photo"] = photo.json }
        return Fixtures.upsert(id, fields, at: seconds, collection: Build.collection, device: device)
    }

    @Test("a file uploaded in three ranges completes once its digest is checked, and is served whole", arguments: StorageKind.fileStores)
    func severalRanges(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 20_000)
            // Given a photo sent in three ranges,
            var answers: [FileUpload] = []
            for (start, end) in [(0, 7_000), (7_000, 14_000), (14_000, 20_000)] {
                let response = try await client.putRange(file.range(start..<end), of: file.reference, at: Int64(start), token: ana)
                #expect(response.status == .ok)
                answers.append(try JSONDecoder().decode(FileUpload.self, from: response.body))
            }
            // each answer says how far it has come, and the last that the file is complete;
            #expect(answers.map(\.received) == [7_000, 14_000, 20_000])
            #expect(answers.map(\.complete) == [false, false, true])
            #expect(try await client.uploadState(file.reference, token: ana) == answers.last)
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 20_000))
            // when a build names it,
            let pushed = try await client.push([Self.build("b1", photo: file.reference)], token: ana, device: "phone-ana")
            #expect(pushed.results.map(\.status) == [.applied])
            // its reader downloads the very bytes, with their type, length and digest.
            let download = try await client.download(file.reference, recordId: "b1", token: ana)
            #expect(download.status == .ok)
            #expect(Array(download.body.readableBytesView) == file.bytes)
            #expect(download.headers[.contentType] == "image/jpeg")
            #expect(download.headers[.contentLength] == "20000")
            #expect(download.headers[.eTag] == "\"\(file.reference.sha256)\"")
            #expect(download.headers[.cacheControl] == "private, no-store")
        }
    }

    @Test(
        "a range at another offset than the bytes received is refused 409 with that count, and nothing of it is stored",
        arguments: StorageKind.fileStores)
    func wrongOffset(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 20_000)
            // With no upload yet, a range must start at 0.
            let early = try await client.putRange(file.range(5_000..<7_000), of: file.reference, at: 5_000, token: ana)
            #expect(early.status == .conflict && early.wireError?.code == .uploadOffsetMismatch)
            #expect(early.wireError?.message.contains("holds 0 bytes") == true)
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 0, bytes: 0))
            // Given the first 7,000 bytes,
            let first = try await client.putRange(file.range(0..<7_000), of: file.reference, at: 0, token: ana)
            #expect(first.status == .ok)
            // a range sent again, or one sent ahead, is refused with what the server holds,
            for offset in [0, 3_000, 14_000] {
                let refused = try await client.putRange(
                    file.range(offset..<offset + 6_000), of: file.reference, at: Int64(offset), token: ana)
                #expect(refused.status == .conflict, "offset \(offset)")
                #expect(refused.wireError?.code == .uploadOffsetMismatch)
                #expect(refused.wireError?.message.contains("holds 7000 bytes") == true, "\(String(describing: refused.wireError))")
            }
            // and the upload stands as it was.
            let state = try await client.uploadState(file.reference, token: ana)
            #expect(state == FileUpload(sha256: file.reference.sha256, size: 20_000, type: "image/jpeg", received: 7_000, complete: false))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 7_000))
        }
    }

    @Test("an upload cut after two ranges resumes from the bytes the server received", arguments: StorageKind.fileStores)
    func resumes(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 30_000, seed: 2)
            // Given two ranges sent before the device lost its network,
            for start in [0, 10_000] {
                let response = try await client.putRange(
                    file.range(start..<start + 10_000), of: file.reference, at: Int64(start), token: ana)
                #expect(response.status == .ok)
            }
            // the device asks where to go on, and sends the rest from there:
            let state = try #require(try await client.uploadState(file.reference, token: ana))
            #expect(state.received == 20_000 && !state.complete)
            let rest = try await client.putRange(
                file.range(Int(state.received)..<30_000), of: file.reference, at: state.received, token: ana)
            #expect(try JSONDecoder().decode(FileUpload.self, from: rest.body).complete)
            // the file is whole.
            _ = try await client.push([Self.build("b1", photo: file.reference)], token: ana, device: "phone-ana")
            let download = try await client.download(file.reference, recordId: "b1", token: ana)
            #expect(Array(download.body.readableBytesView) == file.bytes)
        }
    }

    @Test(
        "an upload whose every byte was stored but not yet checked is checked by an empty range at its end",
        arguments: StorageKind.fileStores)
    func checkedAtItsEnd(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 5_000, seed: 14)
            // Given every byte stored and none checked, as a server that stopped before it hashed them leaves it,
            _ = try await storage.appendRange(
                tenant: "acme", sha256: file.reference.sha256, size: 5_000, type: "image/jpeg", offset: 0,
                bytes: ByteBuffer(bytes: file.bytes), at: Fixtures.serverNow.millisecondsSince1970)
            let state = try await client.uploadState(file.reference, token: ana)
            #expect(state?.received == 5_000 && state?.complete == false)
            // the device sends what is left, nothing, at the end: the bytes are checked, and the file completes.
            let answer = try await client.putRange([UInt8](), of: file.reference, at: 5_000, token: ana)
            #expect(answer.status == .ok)
            #expect(try JSONDecoder().decode(FileUpload.self, from: answer.body).complete)
            #expect(try await storage.completeFiles(tenant: "acme", sha256s: [file.reference.sha256]).count == 1)
        }
    }

    @Test(
        "an upload its collection refuses (too large, a type it does not take, no files at all) or a malformed one stores nothing",
        arguments: StorageKind.fileStores)
    func refusedUploads(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let relay = try await RelayForwardTests.relayToken()
            let file = TestFile(count: 1_000)
            let body = file.range(0..<1_000)
            let sha = file.reference.sha256
            func put(_ query: String, token: String = ana, digest: String = sha) async throws -> TestResponse {
                try await client.send(
                    .put, "/v1/uploads/\(digest)?\(query)", token: token, body: ByteBuffer(bytes: body),
                    headers: [.contentType: "application/octet-stream"])
            }
            // Over the collection's limit: 413, naming both sizes.
            let large = try await put("collection=builds&size=52428801&type=image/jpeg&offset=0")
            #expect(large.status == .contentTooLarge && large.wireError?.code == .fileTooLarge)
            #expect(large.wireError.map { $0.message.contains("52428801") && $0.message.contains("52428800") } == true)
            // A type the collection does not take, or a collection that takes no files: 415, naming what it takes.
            let pdf = try await put("collection=attendance&size=1000&type=application/pdf&offset=0")
            #expect(pdf.status == .unsupportedMediaType && pdf.wireError?.code == .fileTypeRefused)
            #expect(pdf.wireError.map { $0.message.contains("attendance") && $0.message.contains("image/*") } == true)
            for collection in ["checkins", "activities"] {
                let none = try await put("collection=\(collection)&size=1000&type=image/jpeg&offset=0")
                #expect(none.status == .unsupportedMediaType && none.wireError?.code == .fileTypeRefused)
                #expect(none.wireError?.message == "\(collection) takes no files")
            }
            // A collection the caller may not write, a relay, an unknown collection.
            #expect(try await put("collection=guests&size=1000&type=image/jpeg&offset=0").status == .forbidden)
            #expect(try await put("collection=builds&size=1000&type=image/jpeg&offset=0", token: relay).status == .forbidden)
            let unknown = try await put("collection=nope&size=1000&type=image/jpeg&offset=0")
            #expect(unknown.status == .notFound && unknown.wireError?.code == .unknownCollection)
            // A bad digest, size, type or offset, or a range past the declared size: 400.
            for (query, digest) in [
                ("collection=builds&size=1000&type=image/jpeg&offset=0", String(sha.uppercased())),
                ("collection=builds&size=1000&type=image/jpeg&offset=0", "abc"),
                ("collection=builds&size=-1&type=image/jpeg&offset=0", sha),
                ("collection=builds&size=1e3&type=image/jpeg&offset=0", sha),
                ("collection=builds&size=1000&type=Image/JPEG&offset=0", sha),
                ("collection=builds&size=1000&type=image&offset=0", sha),
                ("collection=builds&size=1000&type=image/jpeg", sha),
                ("collection=builds&size=1000&type=image/jpeg&offset=1001", sha),
                ("collection=builds&size=999&type=image/jpeg&offset=0", sha),
            ] {
                let bad = try await put(query, digest: digest)
                #expect(bad.status == .badRequest && bad.wireError?.code == .invalidRequest, "\(query) \(digest)")
            }
            // Not a row, not a byte.
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 0, bytes: 0))
            #expect(try await client.send(.get, "/v1/uploads/\(sha)?collection=builds", token: ana).status == .notFound)
            // And the same range where it is taken is stored: the refusals above were for what they said.
            #expect(try await put("collection=builds&size=1000&type=image/jpeg&offset=0").status == .ok)
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 1_000))
        }
    }

    @Test("bytes that do not have the digest they were sent under are refused 422, and none of them is kept", arguments: StorageKind.fileStores)
    func digestMismatch(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 12_000, seed: 3)
            // Given a first range as it should be and a last one with a byte changed on the way,
            #expect(try await client.putRange(file.range(0..<6_000), of: file.reference, at: 0, token: ana).status == .ok)
            var damaged = Array(file.range(6_000..<12_000))
            damaged[100] ^= 0xFF
            let last = try await client.putRange(damaged, of: file.reference, at: 6_000, token: ana)
            // the last range is answered 422 and the whole upload forgotten;
            #expect(last.status == .unprocessableContent && last.wireError?.code == .digestMismatch)
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 0, bytes: 0))
            #expect(try await client.uploadState(file.reference, token: ana) == nil)
            // the device starts over, and the right bytes complete it.
            #expect(try await client.putRange(file.range(0..<6_000), of: file.reference, at: 0, token: ana).status == .ok)
            let whole = try await client.putRange(file.range(6_000..<12_000), of: file.reference, at: 6_000, token: ana)
            #expect(try JSONDecoder().decode(FileUpload.self, from: whole.body).complete)
        }
    }

    @Test("the same file uploaded again, or named by two records, is stored once", arguments: StorageKind.fileStores)
    func storedOnce(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let ben = try await Fixtures.token(user: "ben", name: "Ben")
            let file = TestFile(count: 9_000, seed: 4)
            for start in [0, 4_500] {
                _ = try await client.putRange(file.range(start..<start + 4_500), of: file.reference, at: Int64(start), token: ana)
            }
            let stored = StoredFileRows(files: 1, bytes: 9_000)
            #expect(try await storage.storedFileRows() == stored)
            // Another device uploads it again, whole, for another collection: the answer is the complete file, and
            // nothing more is stored.
            let again = try await client.putRange(file.range(0..<9_000), of: file.reference, at: 0, collection: "notes", token: ben)
            #expect(again.status == .ok)
            #expect(try JSONDecoder().decode(FileUpload.self, from: again.body).complete)
            #expect(try await storage.storedFileRows() == stored)
            // Named by a build and a note, it is served for each, from the one copy.
            _ = try await client.push([Self.build("b1", photo: file.reference)], token: ana, device: "phone-ana")
            let note = Fixtures.upsert("n1", ["scan": file.reference.json], at: 2, device: "phone-ben")
            #expect(try await client.push([note], token: ben, device: "phone-ben").results.map(\.status) == [.applied])
            for (collection, recordId, token) in [("builds", "b1", ana), ("notes", "n1", ben)] {
                let download = try await client.download(file.reference, collection: collection, recordId: recordId, token: token)
                #expect(Array(download.body.readableBytesView) == file.bytes, "\(collection)")
            }
            #expect(try await storage.storedFileRows() == stored)
            // Another tenant has no part of it.
            let other = try await Fixtures.token(tenant: "globex")
            #expect(try await client.uploadState(file.reference, token: other) == nil)
        }
    }

    @Test(
        "a push naming a file the server does not hold whole is refused file_missing, and the same mutation applies once it does",
        arguments: StorageKind.fileStores)
    func pushNeedsTheFile(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 8_000, seed: 5)
            let build = Self.build("b1", photo: file.reference)
            // Before any byte of it, and with half of it, the build is refused;
            for step in 0..<2 {
                let refused = try await client.push([build], token: ana, device: "phone-ana").results
                #expect(refused.map(\.error?.code) == [.fileMissing], "step \(step)")
                #expect(refused.first?.error?.message == "the file in photo is not on the server whole; upload it first")
                if step == 0 {
                    _ = try await client.putRange(file.range(0..<4_000), of: file.reference, at: 0, token: ana)
                }
            }
            // a reference to the same bytes as another type is refused too,
            var retyped = file.reference
            retyped.type = "image/png"
            _ = try await client.putRange(file.range(4_000..<8_000), of: file.reference, at: 4_000, token: ana)
            let png = try await client.push([Self.build("b2", photo: retyped)], token: ana, device: "phone-ana").results
            #expect(png.map(\.error?.code) == [.fileMissing])
            // and once the file is whole, the very mutation that was refused applies.
            let applied = try await client.push([build], token: ana, device: "phone-ana").results
            #expect(applied.map(\.status) == [.applied])
            try await storage.settle()
            #expect(try await client.pull("collection=builds", token: ana).changes.map(\.recordId) == ["b1"])
        }
    }

    @Test(
        "a push refuses a broken file reference, a type its collection does not take, and a file over its limit",
        arguments: StorageKind.fileStores)
    func pushChecksReferences(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let pdf = FileReference(sha256: String(repeating: "a", count: 64), size: 10, type: "application/pdf")
            let huge = FileReference(sha256: String(repeating: "b", count: 64), size: 60 * 1024 * 1024, type: "image/jpeg")
            var broken = Self.build("b1", photo: nil)
            broken.fields["photo"] = .object(["$file": .object(["sha256": "xyz", "size": 10, "type": "image/jpeg"])])
            var extra = Self.build("b2", photo: nil)
            extra.fields["photo"] = .object([
                "$file": .object(["sha256": .string(pdf.sha256), "size": 10, "type": "image/jpeg"]), "note": "x",
            ])
            let note = Fixtures.upsert("n1", ["doc": pdf.json], at: 3, device: "phone-ana")
            let results = try await client.push(
                [
                    broken, extra, Self.build("b3", photo: huge),
                    Fixtures.upsert("a1", ["photo": pdf.json], at: 2, collection: "activities", device: "phone-ana"),
                    note,
                ], token: ana, device: "phone-ana"
            ).results
            #expect(
                results.map(\.error?.code) == [.invalidFields, .invalidFields, .fileTooLarge, .fileTypeRefused, .fileMissing])
            #expect(results[0].error?.message.hasPrefix("photo: a file's sha256") == true, "\(results[0])")
            #expect(results[2].error?.message.contains("52428800") == true)
            #expect(results[3].error?.message == "photo: activities takes no files")
            try await storage.settle()
            #expect(try await client.pull("collection=builds", token: ana).changes.isEmpty)
        }
    }

    @Test("a push's files are looked up once, and only when one of its mutations names a file")
    func fileLookups() async throws {
        let photo = TestFile(count: 10, seed: 12)
        let plan = TestFile(count: 20, seed: 13, type: "application/pdf")
        var asked: [[String]] = []
        // A push of records without files, text that looks like one, and a delete asks nothing.
        let plain = Fixtures.items([
            Fixtures.upsert("n1", ["t": "x"]), Fixtures.upsert("n2", ["doc": "$file"], at: 1), Fixtures.delete("n3", at: 2),
        ])
        let unchanged = try await SyncController<SQLiteStorage>.refusingMissingFiles(plain) { digests in
            asked.append(digests)
            return [:]
        }
        #expect(asked.isEmpty)
        #expect(unchanged.map(\.key) == plain.map(\.key))
        // One that names two files asks once for both, and refuses the mutation naming the one not held.
        let named = Fixtures.items([
            Fixtures.upsert("n4", ["a": photo.reference.json, "b": plan.reference.json], at: 3),
            Fixtures.upsert("n5", ["c": photo.reference.json], at: 4),
        ])
        let held = FileUpload(sha256: photo.reference.sha256, size: 10, type: "image/jpeg", received: 10, complete: true)
        let checked = try await SyncController<SQLiteStorage>.refusingMissingFiles(named) { digests in
            asked.append(digests)
            return [held.sha256: held]
        }
        #expect(asked == [[photo.reference.sha256, plan.reference.sha256].sorted()])
        guard case .rejected(let refused) = checked[0], case .valid(let kept, _) = checked[1] else {
            Issue.record("\(checked)")
            return
        }
        #expect(refused.error == WireError.Detail(code: .fileMissing, message: "the file in b is not on the server whole; upload it first"))
        #expect(kept.recordId == "n5")
    }

    @Test(
        "a reader downloads the file, or from a byte on; staff who may not read the record, and a record that does not name it, get 404",
        arguments: StorageKind.fileStores)
    func download(kind: StorageKind) async throws {
        try await withServer(kind) { client, _ in
            let ana = try await Fixtures.token()
            let ben = try await Fixtures.token(user: "ben", name: "Ben")
            let sue = try await Fixtures.token(user: "sue", role: .supervisor, name: "Sue")
            let file = TestFile(count: 20_000, seed: 6)
            for start in [0, 8_000, 16_000] {
                _ = try await client.putRange(
                    file.range(start..<min(start + 8_000, 20_000)), of: file.reference, at: Int64(start), token: ana)
            }
            // Given Ana's build naming the photo, and her other build naming none,
            let pushed = try await client.push(
                [Self.build("b1", photo: file.reference), Self.build("b2", photo: nil, at: 2)], token: ana, device: "phone-ana")
            #expect(pushed.results.map(\.status) == [.applied, .applied])
            // Ana and her supervisor download it,
            for token in [ana, sue] {
                let whole = try await client.download(file.reference, recordId: "b1", token: token)
                #expect(whole.status == .ok && Array(whole.body.readableBytesView) == file.bytes)
            }
            // from byte 10,000 on, across the ranges it was stored in, as a resumed download asks;
            let resumed = try await client.download(file.reference, recordId: "b1", token: ana, headers: [.range: "bytes=10000-"])
            #expect(resumed.status == .partialContent)
            #expect(Array(resumed.body.readableBytesView) == Array(file.bytes[10_000...]))
            #expect(resumed.headers[.contentRange] == "bytes 10000-19999/20000")
            #expect(resumed.headers[.contentLength] == "10000")
            // a piece at a time, as a client that holds a megabyte at most asks; the last bytes; a range past the end
            // cut at the end;
            for (range, first, last) in [("bytes=7000-7999", 7_000, 7_999), ("bytes=-500", 19_500, 19_999), ("bytes=19000-99999", 19_000, 19_999)] {
                let piece = try await client.download(file.reference, recordId: "b1", token: ana, headers: [.range: range])
                #expect(piece.status == .partialContent, "\(range)")
                #expect(Array(piece.body.readableBytesView) == Array(file.bytes[first...last]), "\(range)")
                #expect(piece.headers[.contentRange] == "bytes \(first)-\(last)/20000", "\(range)")
                #expect(piece.headers[.contentLength] == "\(last - first + 1)", "\(range)")
            }
            // ranges it does not serve are answered with the whole file, and one that starts at the end or asks for
            // nothing with 416 and the file's size.
            for range in ["bytes=5-3", "bytes=0-9,20-29", "lines=1-2", "bytes=x-"] {
                let whole = try await client.download(file.reference, recordId: "b1", token: ana, headers: [.range: range])
                #expect(whole.status == .ok && Array(whole.body.readableBytesView) == file.bytes, "\(range)")
            }
            for range in ["bytes=20000-", "bytes=20000-20005", "bytes=-0"] {
                let past = try await client.download(file.reference, recordId: "b1", token: ana, headers: [.range: range])
                #expect(past.status == .rangeNotSatisfiable && past.headers[.contentRange] == "bytes */20000", "\(range)")
            }
            // Ben, who may not read Ana's builds, is told there is no such file, as for a build that does not name
            // it and for one that does not exist: the same answer each time.
            let unreadable = try await client.download(file.reference, recordId: "b1", token: ben)
            let unnamed = try await client.download(file.reference, recordId: "b2", token: ana)
            let missing = try await client.download(file.reference, recordId: "b9", token: ana)
            for answer in [unreadable, unnamed, missing] {
                #expect(answer.status == .notFound && answer.wireError?.code == .notFound)
                #expect(answer.body == unreadable.body)
            }
            // Once the build is deleted, its photo is no longer served through it.
            _ = try await client.push(
                [Fixtures.delete("b1", at: 5, collection: Build.collection, device: "phone-ana")], token: ana, device: "phone-ana")
            #expect(try await client.download(file.reference, recordId: "b1", token: ana).status == .notFound)
        }
    }

    @Test("a file of a record with a scope is named with its scope, and served to a relay of that scope", arguments: StorageKind.fileStores)
    func scopedRecord(kind: StorageKind) async throws {
        let inspections = CollectionPolicy(
            name: "inspections", scopeField: "event_id", attachments: AttachmentPolicy(maxBytes: 1_000_000, types: ["image/*"]))
        try await withServer(
            kind,
            configure: { $0.collections = CollectionRegistry(Array(CollectionRegistry.standard.policies.values) + [inspections]) }
        ) { client, _ in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 3_000, seed: 7, type: "image/png")
            _ = try await client.putRange(file.range(0..<3_000), of: file.reference, at: 0, collection: "inspections", token: ana)
            let inspection = Fixtures.upsert(
                "i1", ["event_id": "gala", "photo": file.reference.json], at: 1, collection: "inspections", device: "phone-ana")
            #expect(try await client.push([inspection], token: ana, device: "phone-ana").results.map(\.status) == [.applied])
            // Its scope names the record: staff read such a collection by scope only, as a pull does; without one,
            // or in another scope, a supervisor names no record.
            let unscoped = try await client.download(file.reference, collection: "inspections", recordId: "i1", token: ana)
            #expect(unscoped.status == .forbidden)
            let sue = try await Fixtures.token(user: "sue", role: .supervisor, name: "Sue")
            let supervisor = try await client.download(file.reference, collection: "inspections", recordId: "i1", token: sue)
            #expect(supervisor.status == .notFound)
            let elsewhere = try await client.download(
                file.reference, collection: "inspections", recordId: "i1", scope: "fair", token: sue)
            #expect(elsewhere.status == .notFound)
            let served = try await client.download(file.reference, collection: "inspections", recordId: "i1", scope: "gala", token: ana)
            #expect(served.status == .ok && served.headers[.contentType] == "image/png")
            // A relay reads its own events' files, and no other's.
            let relay = try await RelayForwardTests.relayToken()
            let atRelay = try await client.download(file.reference, collection: "inspections", recordId: "i1", scope: "gala", token: relay)
            #expect(atRelay.status == .ok && Array(atRelay.body.readableBytesView) == file.bytes)
            let otherRelay = try await RelayForwardTests.relayToken(scopes: ["fair"])
            #expect(
                try await client.download(file.reference, collection: "inspections", recordId: "i1", scope: "gala", token: otherRelay)
                    .status == .forbidden)
        }
    }

    @Test("a zero-byte file is uploaded with one empty range and served empty", arguments: StorageKind.fileStores)
    func zeroBytes(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let empty = TestFile(count: 0, type: "application/pdf")
            #expect(empty.reference.sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            let answer = try await client.putRange([UInt8](), of: empty.reference, at: 0, token: ana)
            #expect(answer.status == .ok)
            #expect(
                try JSONDecoder().decode(FileUpload.self, from: answer.body)
                    == FileUpload(sha256: empty.reference.sha256, size: 0, type: "application/pdf", received: 0, complete: true))
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: 0))
            _ = try await client.push([Self.build("b1", photo: empty.reference)], token: ana, device: "phone-ana")
            let download = try await client.download(empty.reference, recordId: "b1", token: ana)
            #expect(download.status == .ok && download.body.readableBytes == 0 && download.headers[.contentLength] == "0")
        }
    }

    /// An error answer read from `socket` to the end of its JSON (`}}`), or what came before the socket closed or
    /// its receive timeout passed.
    /// Ana's phone on the live server, syncing over HTTP once per call: its engine, and the folder of its store
    /// (the caller removes it).
    static func device(of client: any TestClientProtocol, token: String) throws -> (SyncEngine, URL) {
        let (base, store, directory) = try URLSessionTransportTests.deviceStore(port: client.port)
        let engine = SyncEngine(
            store: store, transport: HTTPSyncTransport(baseURL: base, token: token),
            configuration: SyncConfiguration(deviceId: "phone-ana", retryDelays: [], deliversAfterSave: false),
            now: { Fixtures.serverNow.date })
        return (engine, directory)
    }

    /// The head of a `PUT` of a whole file from offset 0, as a client sends it before the body.
    static func uploadHead(
        _ sha256: String, size: some BinaryInteger, collection: String = "builds", type: String = "image/jpeg", token: String
    ) -> String {
        "PUT /v1/uploads/\(sha256)?collection=\(collection)&size=\(size)&type=\(type)&offset=0 HTTP/1.1\r\n"
            + "Host: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\nContent-Type: application/octet-stream\r\n"
            + "Content-Length: \(size)\r\n\r\n"
    }

    static func errorAnswer(on socket: Int32) -> String {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !String(decoding: received, as: UTF8.self).contains("}}") {
            let count = recv(socket, &buffer, buffer.count, 0)
            guard count > 0 else { break }
            received += buffer[..<count]
        }
        return String(decoding: received, as: UTF8.self)
    }

    @Test(
        "an upload declared wrongly keeps the file's right declaration out while it takes bytes, and gives way once quiet for two minutes",
        arguments: StorageKind.fileStores)
    func quietUploadGivesWay(kind: StorageKind) async throws {
        let now = ManualNow(Fixtures.serverNow.date)
        try await withServer(kind, now: { now.date }) { client, _ in
            let ana = try await Fixtures.token()
            let ben = try await Fixtures.token(user: "ben", name: "Ben")
            let file = TestFile(count: 12_000, seed: 42)
            // Given 4,000 bytes of the photo sent by a device that declared it 30,000 bytes long,
            let wrong = FileReference(sha256: file.reference.sha256, size: 30_000, type: "image/jpeg")
            #expect(try await client.putRange(file.range(0..<4_000), of: wrong, at: 0, token: ana).status == .ok)
            // another device that declares it rightly is told what the server holds, and refused while that upload
            // may still be on its way,
            #expect(try await client.uploadState(file.reference, token: ben)?.size == 30_000)
            for wait in [0, 119] {
                now.advance(seconds: Double(wait))
                let held = try await client.putRange(file.range(4_000..<12_000), of: file.reference, at: 4_000, token: ben)
                #expect(held.status == .conflict && held.wireError?.code == .invalidRequest, "\(wait): \(held.status)")
                #expect(held.wireError?.message.contains("image/jpeg of 30000 bytes") == true)
            }
            // then, that upload quiet for over two minutes, it is forgotten: the device goes on from 0, as the
            // server says, and the file is stored as declared rightly.
            now.advance(seconds: 2)
            let given = try await client.putRange(file.range(4_000..<12_000), of: file.reference, at: 4_000, token: ben)
            #expect(given.status == .conflict && given.wireError?.code == .uploadOffsetMismatch, "\(given.status)")
            #expect(try await client.uploadState(file.reference, token: ben) == nil)
            let whole = try await client.putRange(file.bytes, of: file.reference, at: 0, token: ben)
            #expect(whole.status == .ok)
            #expect(try await client.uploadState(file.reference, token: ben)?.complete == true)
            // The file complete, the wrong declaration is refused however long after.
            now.advance(seconds: 600)
            let late = try await client.putRange(file.range(0..<4_000), of: wrong, at: 0, token: ana)
            #expect(
                late.status == .conflict && late.wireError?.message.contains("image/jpeg of 12000 bytes") == true,
                "\(late.status) \(String(buffer: late.body))")
        }
    }

    @Test("a device whose file the server holds unfinished as another size goes up from 0 once that upload is quiet; its build is then synced")
    func deviceAfterWrongDeclaration() async throws {
        let now = ManualNow(Fixtures.serverNow.date)
        try await withServer(.sqlite, setup: .live, now: { now.date }) { client, storage in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 12_000, seed: 43)
            // Given 15,000 bytes under the photo's digest, more than the photo has, from a device that declared it
            // 30,000 bytes long,
            let wrong = FileReference(sha256: file.reference.sha256, size: 30_000, type: "image/jpeg")
            #expect(try await client.putRange(TestFile(count: 15_000, seed: 44).bytes, of: wrong, at: 0, token: ana).status == .ok)
            // a device that saved a build with the photo is refused while that upload may be on its way: the build
            // waits;
            let (engine, directory) = try Self.device(of: client, token: ana)
            defer { try? FileManager.default.removeItem(at: directory) }
            _ = try await engine.save(
                LocalStore.Write(collection: Build.collection, recordId: "b1", fields: ["name": "Block C"]),
                attaching: ["photo": Attachment(data: Data(file.bytes), type: "image/jpeg")])
            _ = try? await engine.sync()
            #expect(try await storage.upload(tenant: "acme", sha256: file.reference.sha256)?.size == 30_000)
            #expect(try await storage.record(tenant: "acme", collection: Build.collection, recordId: "b1", scope: "") == nil)
            // once it is quiet, the next sync sends the photo from 0, and the build is synced.
            now.advance(seconds: 121)
            let summary = try await engine.sync()
            #expect(summary.synced == 1 && summary.isComplete, "\(summary)")
            #expect(
                try await storage.upload(tenant: "acme", sha256: file.reference.sha256)
                    == FileUpload(sha256: file.reference.sha256, size: 12_000, type: "image/jpeg", received: 12_000, complete: true))
        }
    }

    @Test("over a real socket: an upload on a slow link is stored as it arrives, a piece every third of the body timeout")
    func slowLinkStoredAsItArrives() async throws {
        try await withServer(.sqlite, setup: .live, configure: { $0.bodyTimeout = .seconds(9) }) { client, storage in
            let port = try #require(client.port)
            let token = try await Fixtures.token()
            let file = TestFile(count: 10_000, seed: 45)
            let head = Self.uploadHead(file.reference.sha256, size: 10_000, token: token)
            let socket = try AdmissionGateTests.connect(port: port)
            defer { close(socket) }
            _ = head.withCString { send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            // 100 bytes every 100 ms, a body that would take ten seconds and never makes a piece of 4 MiB: what
            // arrived is stored while the request still runs, unanswered.
            var sent = 0
            var stored: Int64 = 0
            while sent < 9_900, stored == 0 {
                _ = file.bytes[sent..<sent + 100].withUnsafeBufferPointer {
                    send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                }
                sent += 100
                try await Task.sleep(for: .milliseconds(100))
                stored = try await storage.upload(tenant: "acme", sha256: file.reference.sha256)?.received ?? 0
            }
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            #expect(poll(&descriptor, 1, 0) == 0, "the request was answered: it ended before its bytes were stored")
            #expect(stored > 0 && stored <= Int64(sent), "\(stored) of \(sent)")
        }
    }

    @Test(
        "/metrics counts the bytes uploads stored and how uploads ended, and says what the files hold, complete and unfinished",
        arguments: StorageKind.fileStores)
    func metrics(kind: StorageKind) async throws {
        let metrics = ServerMetrics()
        try await withServer(kind, metrics: metrics) { client, storage in
            let ana = try await Fixtures.token()
            let whole = TestFile(count: 12_000, seed: 46)
            let damaged = TestFile(count: 5_000, seed: 47)
            let unfinished = TestFile(count: 9_000, seed: 48)
            // A photo in two ranges, one whose bytes are not the ones its digest names, half of another,
            _ = try await client.putRange(whole.range(0..<7_000), of: whole.reference, at: 0, token: ana)
            _ = try await client.putRange(whole.range(7_000..<12_000), of: whole.reference, at: 7_000, token: ana)
            var altered = damaged.bytes
            altered[10] ^= 0xFF
            #expect(try await client.putRange(altered, of: damaged.reference, at: 0, token: ana).status == .unprocessableContent)
            _ = try await client.putRange(unfinished.range(0..<4_000), of: unfinished.reference, at: 0, token: ana)
            func value(_ line: String) async throws -> String? {
                let text = String(decoding: try await client.send(.get, "/metrics", token: nil).body.readableBytesView, as: UTF8.self)
                return text.split(separator: "\n").first { $0.hasPrefix(line + " ") }.map { String($0.dropFirst(line.count + 1)) }
            }
            // (a range sent again at the end of a complete file, as after a lost answer, counts nothing more)
            #expect(try await client.putRange([UInt8](), of: whole.reference, at: 12_000, token: ana).status == .ok)
            #expect(try await value("outpost_upload_bytes_total") == "21000")
            #expect(try await value(#"outpost_uploads_total{result="complete"}"#) == "1")
            #expect(try await value(#"outpost_uploads_total{result="digest_mismatch"}"#) == "1")
            #expect(try await value(#"outpost_file_bytes{state="complete"}"#) == "12000.0")
            #expect(try await value(#"outpost_file_bytes{state="unfinished"}"#) == "4000.0")
            // and the half expired, a week and a day later.
            func expire<S: SyncStorage>(_ storage: S) async -> Int {
                await UploadExpiry(
                    storage: storage, lifetime: .seconds(7 * 24 * 3600), clock: ContinuousClock(),
                    now: { Fixtures.serverNow.date.addingTimeInterval(8 * 24 * 3600) }, logger: Fixtures.quietLogger,
                    metrics: metrics
                ).look()
            }
            #expect(await expire(storage) == 1)
            #expect(try await value(#"outpost_uploads_total{result="expired"}"#) == "1")
            #expect(try await value(#"outpost_file_bytes{state="unfinished"}"#) == "0.0")
        }
    }

    @Test(
        "an upload that would take its organization past the server's bound is refused with 507 before any byte is stored, and a record naming it says why; uploads begun, and other organizations, go on",
        arguments: StorageKind.fileStores)
    func tenantQuota(kind: StorageKind) async throws {
        let now = ManualNow(Fixtures.serverNow.date)
        try await withServer(kind, configure: { $0.tenantFileBytes = 25_000 }, now: { now.date }) { client, storage in
            let ana = try await Fixtures.token()
            let whole = TestFile(count: 12_000, seed: 49)
            let begun = TestFile(count: 9_000, seed: 50)
            let over = TestFile(count: 5_000, seed: 51)
            // Given a complete photo of 12,000 bytes and 4,000 bytes of an upload of 9,000: 21,000 of 25,000 taken,
            #expect(try await client.putRange(whole.bytes, of: whole.reference, at: 0, token: ana).status == .ok)
            #expect(try await client.putRange(begun.range(0..<4_000), of: begun.reference, at: 0, token: ana).status == .ok)
            // a new upload of 5,000 bytes is refused, and nothing of it stored;
            let refused = try await client.putRange(over.bytes, of: over.reference, at: 0, token: ana)
            #expect(refused.status.code == 507 && refused.wireError?.code == .fileQuotaExceeded, "\(refused.status)")
            #expect(refused.wireError?.message.contains("25000 bytes") == true)
            #expect(try await client.uploadState(over.reference, token: ana) == nil)
            // a build naming it is refused with the same reason; one naming the upload begun waits for its file.
            let pushed = try await client.push(
                [Self.build("b1", photo: over.reference), Self.build("b2", photo: begun.reference, at: 2)], token: ana,
                device: "phone-ana")
            #expect(pushed.results.map(\.error?.code) == [.fileQuotaExceeded, .fileMissing])
            #expect(pushed.results.first?.error?.message.contains("retry the record") == true)
            // The upload begun goes on to its end, and the complete photo is taken again as it is,
            #expect(try await client.putRange(begun.range(4_000..<9_000), of: begun.reference, at: 4_000, token: ana).status == .ok)
            #expect(try await client.uploadState(begun.reference, token: ana)?.complete == true)
            #expect(try await client.putRange(whole.bytes, of: whole.reference, at: 0, token: ana).status == .ok)
            // and an upload declared wrongly, gone quiet, is not given up for one that would not fit.
            let small = FileReference(sha256: over.reference.sha256, size: 3_000, type: "image/jpeg")
            #expect(try await client.putRange(over.range(0..<1_000), of: small, at: 0, token: ana).status == .ok)
            now.advance(seconds: 180)
            let replacing = try await client.putRange(over.bytes, of: over.reference, at: 0, token: ana)
            #expect(replacing.status.code == 507, "\(replacing.status)")
            #expect(try await client.uploadState(over.reference, token: ana)?.size == 3_000)
            // Another organization has its own bound.
            let globex = try await Fixtures.token(tenant: "globex")
            #expect(try await client.putRange(over.bytes, of: over.reference, at: 0, token: globex).status == .ok)
            #expect(try await storage.tenantFileBytes(tenant: "acme") == 24_000)
        }
    }

    @Test(
        "a device whose photo would pass its organization's bound sends its other records; the build is refused with the reason, and its photo kept for a retry"
    )
    func deviceOverQuota() async throws {
        try await withServer(.sqlite, setup: .live, configure: { $0.tenantFileBytes = 10_000 }) { client, storage in
            let (engine, directory) = try Self.device(of: client, token: try await Fixtures.token())
            defer { try? FileManager.default.removeItem(at: directory) }
            let store = engine.store
            let photo = TestFile(count: 12_000, seed: 52)
            // Given a build with a photo over the bound, then a build without one,
            _ = try await engine.save(
                LocalStore.Write(collection: Build.collection, recordId: "b1", fields: ["name": "Block C"]),
                attaching: ["photo": Attachment(data: Data(photo.bytes), type: "image/jpeg")])
            _ = try await engine.save(LocalStore.Write(collection: Build.collection, recordId: "b2", fields: ["name": "Block D"]))
            // a sync delivers the second, and the first is refused with the reason, waiting for a person; the photo
            // stays on the device.
            let summary = try await engine.sync()
            #expect(summary.synced == 1 && summary.refused == 1, "\(summary)")
            let build = try #require(try await store.record(collection: Build.collection, recordId: "b1"))
            #expect(build.syncStatus == .refused)
            #expect(build.syncError?.contains("past the 10000 bytes") == true, "\(String(describing: build.syncError))")
            #expect(try await storage.upload(tenant: "acme", sha256: photo.reference.sha256) == nil)
            #expect(try await engine.fileState(photo.reference).storedBytes == 12_000)
            #expect(try await storage.record(tenant: "acme", collection: Build.collection, recordId: "b2", scope: "") != nil)
        }
    }

    @Test(
        "bytes counted but missing from the file directory restart the upload from 0, or fail the digest at its end",
        arguments: [StorageKind.sqlite, .postgresFileDirectory])
    func missingBytes(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let directory = try #require(storage.fileDirectory)
            // Given 6,000 of 12,000 bytes stored, and the file then gone from the disk (a crash, an operator),
            let file = TestFile(count: 12_000, seed: 41)
            #expect(try await client.putRange(file.range(0..<6_000), of: file.reference, at: 0, token: ana).status == .ok)
            unlink(directory.path(tenant: "acme", sha256: file.reference.sha256))
            // the next range is refused as at 0 bytes, the upload is forgotten, and the file goes up again whole.
            let next = try await client.putRange(file.range(6_000..<12_000), of: file.reference, at: 6_000, token: ana)
            #expect(next.status == .conflict && next.wireError?.message.contains("holds 0 bytes") == true, "\(next.status)")
            #expect(try await client.uploadState(file.reference, token: ana) == nil)
            let whole = try await client.putRange(file.bytes, of: file.reference, at: 0, token: ana)
            #expect(try JSONDecoder().decode(FileUpload.self, from: whole.body).complete)

            // Given every byte of another file counted, none checked, and the file cut short on the disk,
            let other = TestFile(count: 9_000, seed: 42)
            _ = try await storage.appendRange(
                tenant: "acme", sha256: other.reference.sha256, size: 9_000, type: "image/jpeg", offset: 0,
                bytes: ByteBuffer(bytes: other.bytes), at: Fixtures.serverNow.millisecondsSince1970)
            truncate(directory.path(tenant: "acme", sha256: other.reference.sha256), 5_000)
            // its check at the end finds bytes that do not have the digest: 422, and it is forgotten.
            let end = try await client.putRange([UInt8](), of: other.reference, at: 9_000, token: ana)
            #expect(end.status == .unprocessableContent && end.wireError?.code == .digestMismatch, "\(end.status)")
            #expect(try await client.uploadState(other.reference, token: ana) == nil)
        }
    }

    @Test("a file goes up in one request to its end, stored a piece at a time as it arrives", arguments: StorageKind.fileStores)
    func wholeFileInOneRequest(kind: StorageKind) async throws {
        try await withServer(kind) { client, storage in
            let ana = try await Fixtures.token()
            let file = TestFile(count: 10 * 1024 * 1024 + 1_000, seed: 8)
            let whole = try await client.putRange(file.bytes, of: file.reference, at: 0, token: ana)
            #expect(whole.status == .ok)
            #expect(try JSONDecoder().decode(FileUpload.self, from: whole.body).complete)
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 1, bytes: file.bytes.count))
            var read: [UInt8] = []
            for try await bytes in storage.fileBytes(tenant: "acme", sha256: file.reference.sha256, from: 0, size: file.reference.size) {
                read += bytes.readableBytesView
            }
            #expect(read == file.bytes)
        }
    }

    @Test("over a real socket: an upload that falls silent part-way is answered 408, and the pieces that arrived are kept")
    func silentUploadKeepsItsPieces() async throws {
        try await withServer(.sqlite, setup: .live, configure: { $0.bodyTimeout = .seconds(4) }) { client, storage in
            let port = try #require(client.port)
            let token = try await Fixtures.token()
            let file = TestFile(count: 10 * 1024 * 1024, seed: 10)
            let reference = file.reference
            let head = Self.uploadHead(reference.sha256, size: file.bytes.count, token: token)
            let sent = 6 * 1024 * 1024
            let answer = try await Thread.blocking { () -> String in
                guard let socket = try? AdmissionGateTests.connect(port: port) else { return "no connection" }
                defer { close(socket) }
                _ = head.withCString { send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                // Six of the ten megabytes, then silence.
                var offset = 0
                while offset < sent {
                    let count = file.bytes[offset..<sent].withUnsafeBufferPointer {
                        send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                    }
                    guard count > 0 else { return "the server stopped reading at \(offset)" }
                    offset += count
                }
                return Self.errorAnswer(on: socket)
            }
            #expect(answer.hasPrefix("HTTP/1.1 408"), "\(answer.prefix(300))")
            #expect(answer.contains("are kept"), "\(answer.prefix(300))")
            // Every byte that arrived is stored, the whole piece and the part of the next,
            let kept = try #require(try await storage.upload(tenant: "acme", sha256: reference.sha256))
            #expect(kept.received == Int64(sent), "\(kept)")
            // and the rest, sent from there on a new connection (the test client's may have idled out meanwhile),
            // completes the file: the kept bytes are the file's.
            // A request that falls silent on a loaded machine is sent again from the server's bytes, as a device does.
            let http = HTTPSyncTransport(baseURL: try #require(URL(string: "http://127.0.0.1:\(port)")), token: token)
            var state = kept
            for _ in 0..<5 where !state.complete {
                let body = UploadBody(Data(file.bytes[Int(state.received)...]), at: state.received)
                do {
                    state = try await http.uploadRange(body, of: reference, collection: "builds")
                } catch {
                    state = try #require(try await storage.upload(tenant: "acme", sha256: reference.sha256))
                }
            }
            #expect(state.complete)
        }
    }

    @Test("over a real socket: an upload of a type its collection refuses is answered before any byte of its body is sent")
    func refusedBeforeTheBody() async throws {
        try await withServer(.sqlite, setup: .live, configure: { $0.bodyTimeout = .seconds(300) }) { client, storage in
            let port = try #require(client.port)
            let token = try await Fixtures.token()
            let sha = String(repeating: "c", count: 64)
            // The head of a range of 100,000 bytes, and not a byte of it.
            let head = Self.uploadHead(sha, size: 100_000, collection: "attendance", type: "application/pdf", token: token)
            let answer = try await Thread.blocking { () -> String in
                guard let socket = try? AdmissionGateTests.connect(port: port) else { return "no connection" }
                defer { close(socket) }
                guard head.withCString({ send(socket, $0, strlen($0), 0) }) > 0 else { return "no head sent" }
                // The answer's head and body, within the socket's minute: long before the body's 300 s deadline.
                return Self.errorAnswer(on: socket)
            }
            #expect(answer.hasPrefix("HTTP/1.1 415"), "\(answer.prefix(300))")
            #expect(answer.contains(#""code":"file_type_refused""#), "\(answer.prefix(300))")
            #expect(try await storage.storedFileRows() == StoredFileRows(files: 0, bytes: 0))
        }
    }

    @Test("over a real socket: a range whose body arrives after the grace gives its place back, then is stored")
    func lateRangeIsStored() async throws {
        try await withServer(.sqlite, setup: .live, configure: { $0.bodyTimeout = .seconds(60) }) { client, storage in
            let port = try #require(client.port)
            let token = try await Fixtures.token()
            let file = TestFile(count: 2_000, seed: 9)
            let reference = file.reference
            let head = Self.uploadHead(reference.sha256, size: 2_000, token: token)
            let socket = try AdmissionGateTests.connect(port: port)
            defer { close(socket) }
            _ = head.withCString { send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            _ = file.bytes.prefix(500).withUnsafeBufferPointer { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // The range is let in, and gives its place back while the rest of its body is on its way;
            let deadline = ContinuousClock.now + .seconds(30)
            while try await AdmissionGateTests.metric("outpost_http_bodies_arriving", port: port) != 1 {
                try #require(ContinuousClock.now < deadline, "the range never gave its place back")
                try await Task.sleep(for: .milliseconds(50))
            }
            _ = file.bytes.dropFirst(500).withUnsafeBufferPointer { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            let answer = try await Thread.blocking { () -> String in
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !String(decoding: received, as: UTF8.self).contains("}") {
                    let count = recv(socket, &buffer, buffer.count, 0)
                    guard count > 0 else { break }
                    received += buffer[..<count]
                }
                return String(decoding: received, as: UTF8.self)
            }
            // once it has arrived, it waits its turn again and is stored: the file is complete.
            #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer.prefix(300))")
            #expect(answer.contains(#""complete":true"#), "\(answer.prefix(300))")
            #expect(try await AdmissionGateTests.metric("outpost_http_bodies_arriving", port: port) == 0)
            #expect(try await storage.upload(tenant: "acme", sha256: reference.sha256)?.complete == true)
        }
    }
}
