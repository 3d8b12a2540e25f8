import Foundation
import OutpostProtocol

/// Files through the outbox: a record's files are saved with it, uploaded before the mutation that names them,
/// and downloaded when a screen needs them.
extension SyncEngine {
    /// How many requests in a row may leave an upload where it was (the server kept nothing new, or another
    /// device's upload moved it) before the sync fails and the next one tries again.
    static let uploadStalls = 3
    /// How often an upload's progress is published, in bytes read for it.
    static let progressBytes: Int64 = 4 * 1024 * 1024

    /// Saves a local action with files attached, each named by a field of the record, in one durable
    /// transaction: the record, its outbox entry and the files' sealed bytes are committed together or not at all.
    ///
    /// The record is not synced until the server holds its files too: a sync uploads each file before the
    /// mutation that names it, resuming an upload that was cut where the server's bytes end, and a file the
    /// server already holds (the same photo on two records) is not sent again. Each file is read twice, in
    /// pieces: once for its digest, once to store it. Like ``save(_:at:)``, it never waits on the network.
    ///
    /// - Throws: ``ClientError`` `invalidInput` for a media type or name a file cannot carry, a file that cannot
    ///   be read or that changed while it was saved, or a write the store refuses.
    @discardableResult
    public func save(
        _ write: LocalStore.Write, attaching files: [String: Attachment], at time: Date? = nil
    ) async throws
        -> LocalRecord
    {
        let time = time ?? now()
        var staged: [String: StagedFile] = [:]
        for (field, attachment) in files { staged[field] = try await StagedFile.stage(attachment) }
        return try await save(write, files: staged, at: time)
    }

    /// Where a file a record names stands on this device. A file of a record the server has is on the server
    /// whatever this says: the server takes a record only with its files.
    public func fileState(_ file: FileReference) async throws -> LocalFileState {
        guard let row = try await store.file(file.sha256) else {
            return LocalFileState(storedBytes: 0, uploadedBytes: 0, isOnServer: false)
        }
        let onServer = row.uploadState == .uploaded || row.uploadState == .remote
        return LocalFileState(
            storedBytes: row.stored, uploadedBytes: onServer ? row.size : row.uploaded, isOnServer: onServer,
            uploadError: row.uploadState == .refused ? row.uploadError : nil)
    }

    // MARK: Uploads

    /// Uploads the files the mutations of `chunk` name that the server does not hold yet and this device does.
    ///
    /// A file the server refuses (too large, of a type its collection does not take) is marked so and not sent
    /// again; the mutation still goes, and the server refuses it with the reason, so that its record shows it.
    ///
    /// - Throws: ``TransportError`` when an upload cannot be delivered: the sync ends as a push that failed would.
    func uploadFiles(of chunk: [OutboxEntry], retrying: Bool) async throws {
        var seen = Set<String>()
        for entry in chunk where entry.mutation.op == .upsert {
            for file in FileReference.references(in: entry.mutation.fields).values where seen.insert(file.sha256).inserted {
                guard let row = try await store.file(file.sha256), row.uploadState == .pending, row.isWhole else { continue }
                guard let files = transport as? any FileTransport else { throw TransportError.carriesNoFiles }
                try await upload(file, of: entry.mutation.collection, from: row.uploaded, via: files, retrying: retrying)
            }
        }
    }

    /// Uploads `file` from where the server's bytes end, read from the store as the transport sends it: in one
    /// request, or in as many as the transport takes. A request cut part-way goes on from what the server stored.
    private func upload(
        _ file: FileReference, of collection: String, from uploaded: Int64, via files: any FileTransport, retrying: Bool
    ) async throws {
        defer {
            status.upload = nil
            publish()
        }
        do {
            var upload = Self.resumable(
                try await exchange(retrying: retrying) { try await files.upload(of: file.sha256, collection: collection) }, of: file)
            // What the server holds, known before the next request: a cut one may have left it more than the device
            // was told.
            if let upload { try await store.noteUpload(upload) }
            var stalls = 0
            while upload?.complete != true {
                let offset = upload?.received ?? 0
                status.upload = FileTransfer(file: file, done: offset)
                status.pendingUploadBytes = try await store.pendingUploadBytes()
                publish()
                let body = Self.uploadBody(of: file, from: offset, in: store) { [weak self] read in
                    await self?.uploadRead(file, done: read)
                }
                var failure: TransportError?
                do {
                    let answer = try await exchange(retrying: retrying) {
                        try await files.uploadRange(body, of: file, collection: collection)
                    }
                    try await store.noteUpload(answer)
                    upload = answer
                } catch let error as TransportError
                    where error.wire?.code == .uploadOffsetMismatch || error.answerTimedOut || error.status == 408
                {
                    // Another device uploads the same file, an answer was lost, or the link fell silent: go on from
                    // the bytes the server stored.
                    failure = error
                    upload = Self.resumable(
                        try await exchange(retrying: retrying) { try await files.upload(of: file.sha256, collection: collection) },
                        of: file)
                    if let upload { try await store.noteUpload(upload) }
                }
                if (upload?.received ?? 0) > offset || upload?.complete == true {
                    stalls = 0
                } else {
                    stalls += 1
                    guard stalls < Self.uploadStalls else {
                        throw failure ?? TransportError(kind: .server, message: "the server took none of the file's bytes")
                    }
                }
            }
            if let upload { try await store.noteUpload(upload) }
        } catch let error as TransportError where error.refusesFile {
            try await store.noteUploadRefused(file.sha256, reason: error.wire?.message ?? Self.describe(error))
        }
        status.pendingUploadBytes = try await store.pendingUploadBytes()
    }

    /// The server's upload as this device may go on from it. An unfinished one declared with another size or type
    /// holds no byte of this file as the device declares it: the upload starts from 0, and the server lets it once
    /// the other has gone quiet. A complete one is the file, whatever its declaration; the push then says whether
    /// the record may name it so.
    static func resumable(_ upload: FileUpload?, of file: FileReference) -> FileUpload? {
        guard let upload, !upload.complete else { return upload }
        return upload.size == file.size && upload.type == file.type ? upload : nil
    }

    /// Tells the status how far the upload of `file` has read (every ``progressBytes``, and at its end).
    private func uploadRead(_ file: FileReference, done: Int64) {
        guard let moving = status.upload, moving.file == file else { return }
        status.upload = FileTransfer(file: file, done: done)
        publish()
    }

    /// The bytes of `file` from `offset` to its end, read from `store` a few sealed chunks at a time, the next ones
    /// read while the last are sent; `read` is told how far the reading has come, every ``progressBytes``.
    static func uploadBody(
        of file: FileReference, from offset: Int64, in store: LocalStore, read: @escaping @Sendable (Int64) async -> Void
    ) -> UploadBody {
        UploadBody(offset: offset, count: file.size - offset) {
            let reader = UploadReader(sha256: file.sha256, from: offset, size: file.size, store: store, read: read)
            return AsyncThrowingStream { try await reader.next() }
        }
    }

    // MARK: Downloads

    /// The bytes of `file`, which field of `record` names: from the device when it holds them, else downloaded
    /// (resuming a download that was cut), checked against the digest, and kept sealed on the device.
    ///
    /// - Parameter progress: told how many bytes the device holds as they arrive.
    /// - Throws: ``TransportError`` when the server cannot give it (404 when the person may not read the record
    ///   or the record does not name the file); ``ClientError`` when it cannot be stored.
    public func fileData(
        _ file: FileReference, of record: LocalRecord, progress: (@Sendable (FileTransfer) -> Void)? = nil
    ) async throws -> Data {
        try await download(file, of: record, progress: progress)
        let bytes = try await store.fileBytes(file.sha256, from: 0, count: Int(file.size))
        guard bytes.count == file.size else { throw ClientError(.storeCorrupt, "a file's bytes on the device end before its size") }
        return bytes
    }

    /// ``fileData(_:of:progress:)`` written to `url`, a piece at a time.
    public func exportFile(
        _ file: FileReference, of record: LocalRecord, to url: URL, progress: (@Sendable (FileTransfer) -> Void)? = nil
    ) async throws {
        try await download(file, of: record, progress: progress)
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
            throw ClientError(.invalidInput, "cannot write \(url.lastPathComponent)")
        }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        var offset: Int64 = 0
        while offset < file.size {
            let bytes = try await store.fileBytes(file.sha256, from: offset, count: LocalStore.fileChunkBytes)
            guard !bytes.isEmpty else { throw ClientError(.storeCorrupt, "a file's bytes on the device end before its size") }
            try handle.write(contentsOf: bytes)
            offset += Int64(bytes.count)
        }
    }

    /// How long after a file was last opened its bytes stay, whatever ``SyncConfiguration/keptFileBytes`` says: a
    /// screen may still be reading them.
    static var fileInUse: Duration { .seconds(600) }

    /// Gives back the bytes of files the server holds past ``SyncConfiguration/keptFileBytes``, least recently
    /// used first, except those opened in the last ten minutes and those a record waiting to sync names. Runs
    /// after each sync and each download; the bytes given back.
    @discardableResult
    public func releaseFileBytes() async throws -> Int64 {
        guard holdsFiles != false else { return 0 }
        return try await store.releaseFileBytes(
            keeping: configuration.keptFileBytes,
            usedSince: Timestamp(now()).millisecondsSince1970 - Self.fileInUse.milliseconds)
    }

    /// Makes sure the device holds all of `file`.
    private func download(
        _ file: FileReference, of record: LocalRecord, progress: (@Sendable (FileTransfer) -> Void)?
    ) async throws {
        var stored = try await store.beginDownload(file, at: now())
        if stored == file.size { return }
        guard let files = transport as? any FileTransport else { throw TransportError.carriesNoFiles }
        try await Self.fetch(file, of: record, from: stored, via: files, into: store, now: now, progress: progress)
        stored = try await store.file(file.sha256)?.stored ?? 0
        guard stored == file.size, try await store.checkDownloaded(file.sha256) else {
            throw TransportError(kind: .invalidResponse, message: "the file the server sent is not the one the record names")
        }
        progress?(FileTransfer(file: file, done: file.size))
        holdsFiles = true
        _ = try? await releaseFileBytes()
    }
}

extension SyncEngine {
    /// Downloads `file` from byte `stored` into `store`, in whole chunks at fixed offsets (the last one short).
    private static func fetch(
        _ file: FileReference, of record: LocalRecord, from stored: Int64, via files: any FileTransport,
        into store: LocalStore, now: @escaping @Sendable () -> Date, progress: (@Sendable (FileTransfer) -> Void)?
    ) async throws {
        let sink = DownloadSink(file: file, start: stored, store: store, now: now, progress: progress)
        try await files.download(
            file.sha256, collection: record.collection, scope: record.scope.isEmpty ? nil : record.scope,
            recordId: record.recordId, from: stored
        ) { piece in try await sink.add(piece) }
        try await sink.finish()
    }
}

/// A download's bytes on their way into the store, gathered into whole chunks at fixed offsets (the last one
/// short).
private actor DownloadSink {
    let file: FileReference
    let store: LocalStore
    let now: @Sendable () -> Date
    let progress: (@Sendable (FileTransfer) -> Void)?
    private var start: Int64
    private var buffer = Data()

    init(
        file: FileReference, start: Int64, store: LocalStore, now: @escaping @Sendable () -> Date,
        progress: (@Sendable (FileTransfer) -> Void)?
    ) {
        self.file = file
        self.start = start
        self.store = store
        self.now = now
        self.progress = progress
    }

    func add(_ piece: Data) async throws {
        let chunkBytes = LocalStore.fileChunkBytes
        var rest = piece[...]
        // Whole chunks straight from the piece; only what is left over is kept for the next one.
        while buffer.count + rest.count >= chunkBytes {
            let taken = chunkBytes - buffer.count
            buffer.append(rest.prefix(taken))
            rest = rest.dropFirst(taken)
            try await store.storeDownloaded(file.sha256, start: start, bytes: buffer, at: now())
            buffer = Data()
            start += Int64(chunkBytes)
            progress?(FileTransfer(file: file, done: start))
        }
        buffer.append(rest)
    }

    /// Stores the file's last, short chunk, when the bytes reach its end; a download that stopped short keeps its
    /// whole chunks alone, so that every chunk but the last starts at a multiple of the chunk size.
    func finish() async throws {
        guard !buffer.isEmpty, start + Int64(buffer.count) == file.size else { return }
        try await store.storeDownloaded(file.sha256, start: start, bytes: buffer, at: now())
        buffer = Data()
    }
}

/// An upload's bytes read from the store in order, ``readBytes`` at a time (whole chunks, but where the upload
/// resumes mid-chunk), the next read while the last is sent.
private actor UploadReader {
    /// Four chunks a read: one trip to the store's reader for 2 MiB.
    static let readBytes = 4 * LocalStore.fileChunkBytes

    let sha256: String
    let size: Int64
    let store: LocalStore
    let read: @Sendable (Int64) async -> Void
    private var position: Int64
    /// How far the reading had come when it was last told.
    private var reported: Int64
    private var ready: [Data] = []
    private var ahead: Task<[Data], any Error>?

    init(sha256: String, from offset: Int64, size: Int64, store: LocalStore, read: @escaping @Sendable (Int64) async -> Void) {
        self.sha256 = sha256
        self.position = offset
        self.reported = offset
        self.size = size
        self.store = store
        self.read = read
    }

    deinit { ahead?.cancel() }

    func next() async throws -> Data? {
        guard position < size else { return nil }
        if ready.isEmpty {
            let current = ahead ?? fetch(from: position)
            ready = try await current.value.filter { !$0.isEmpty }
            let end = position + ready.reduce(0) { $0 + Int64($1.count) }
            guard end > position, end <= size else {
                throw ClientError(.storeCorrupt, "a file's bytes on the device end before its size")
            }
            ahead = end < size ? fetch(from: end) : nil
        }
        let bytes = ready.removeFirst()
        position += Int64(bytes.count)
        if position - reported >= SyncEngine.progressBytes || position == size {
            reported = position
            await read(position)
        }
        return bytes
    }

    /// The chunks from `offset`: the bytes up to the next chunk's start when it falls inside one (an upload that
    /// resumes mid-chunk), else whole chunks.
    private func fetch(from offset: Int64) -> Task<[Data], any Error> {
        let (store, sha256) = (store, sha256)
        let chunk = Int64(LocalStore.fileChunkBytes)
        guard offset % chunk == 0 else {
            let count = Int(chunk - offset % chunk)
            return Task { [try await store.fileBytes(sha256, from: offset, count: count)] }
        }
        return Task { try await store.fileChunks(sha256, from: offset, count: Self.readBytes) }
    }
}

/// Where a file a record names stands on the device: how much of it is here, and how much the server holds.
public struct LocalFileState: Sendable, Hashable {
    /// The bytes of it on the device: all of them for a file attached here or downloaded.
    public var storedBytes: Int64
    /// The bytes the server holds, as far as this device knows.
    public var uploadedBytes: Int64
    /// Whether the server holds it whole and checked: uploaded from here, or downloaded from there.
    public var isOnServer: Bool
    /// Why the server refused it, when it did.
    public var uploadError: String?
}

extension TransportError {
    static let carriesNoFiles = TransportError(
        kind: .server, status: 501, message: "this connection to the server carries no files")

    /// Whether the server refused a file, by its own code, until a person acts: too large, of a type its collection
    /// does not take, a collection the person may not write, or more than the organization's files may still take.
    /// Any other failure (a digest that did not match, a proxy's 4xx) fails the sync, and the next one tries the
    /// file again.
    var refusesFile: Bool {
        guard kind == .server, let code = wire?.code else { return false }
        return [.fileTooLarge, .fileTypeRefused, .forbidden, .unknownCollection, .fileQuotaExceeded].contains(code)
    }
}
