import ArgumentParser
import Foundation
import NIOConcurrencyHelpers
import OutpostClient
import OutpostProtocol

/// A file named on the command line, as an attachment: its media type told by its extension.
func attachment(_ path: String) throws -> Attachment {
    let url = URL(fileURLWithPath: path)
    guard FileManager.default.isReadableFile(atPath: url.path) else { throw CLIError("cannot read \(path)") }
    guard let type = mediaTypes[url.pathExtension.lowercased()] else {
        let known = mediaTypes.keys.sorted().joined(separator: ", ")
        throw CLIError("cannot tell what kind of file \(url.lastPathComponent) is: name it with one of \(known)")
    }
    return Attachment(contentsOf: url, type: type)
}

/// The media types the CLI tells by a file's extension.
private let mediaTypes: [String: String] = [
    "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "heic": "image/heic", "heif": "image/heif",
    "webp": "image/webp", "gif": "image/gif", "pdf": "application/pdf", "txt": "text/plain", "csv": "text/csv",
    "bin": "application/octet-stream",
]

/// `field=path` arguments as attachments by field.
func attachments(_ pairs: [String]) throws -> [String: Attachment] {
    var files: [String: Attachment] = [:]
    for pair in pairs {
        let (field, path) = try keyValue(pair)
        files[field] = try attachment(path)
    }
    return files
}

/// A size for people: "5.2 MB", "640 KB", "12 bytes".
func byteText(_ bytes: Int64) -> String {
    switch bytes {
    case ..<1000: return bytes == 1 ? "1 byte" : "\(bytes) bytes"
    case ..<1_000_000: return "\(bytes / 1000) KB"
    default: return String(format: "%.1f MB", Double(bytes) / 1_000_000)
    }
}

/// Where each file a record names stands, a line each: "photo shed.jpg (5.2 MB): on the server".
func fileLines(_ record: LocalRecord, engine: SyncEngine) async throws -> [String] {
    var lines: [String] = []
    for (field, file) in FileReference.references(in: record.fields).sorted(by: { $0.key < $1.key }) {
        let state = try await engine.fileState(file)
        let name = file.name.map { " \($0)" } ?? ""
        let where_: String
        if let error = state.uploadError {
            where_ = "refused by the server: \(error)"
        } else if state.isOnServer || record.syncStatus == .synced {
            where_ = state.storedBytes >= file.size ? "on the server and this device" : "on the server"
        } else if state.storedBytes >= file.size {
            where_ =
                state.uploadedBytes == 0
                ? "on this device, not uploaded yet" : "\(byteText(state.uploadedBytes)) of it uploaded, the rest on this device"
        } else {
            where_ = "not on this device: fetch it with `outpost device file`"
        }
        lines.append("\(field)\(name) (\(byteText(file.size))): \(where_)")
    }
    return lines
}

struct DeviceFile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "file",
        abstract: "Write a file a record names to disk, downloading it when this device does not hold it.")
    @Argument(help: "The collection, such as builds.")
    var collection: String
    @Argument(help: "The record id.")
    var recordId: String
    @Argument(help: "The field that names the file, such as photo.")
    var field: String
    @Option(help: "Where to write it.")
    var out: String
    @Option(help: "The record's scope, in a collection with scopes.")
    var scope: String = ""
    @OptionGroup var options: DeviceStoreOptions

    func run() async throws {
        try await options.withDevice { device in
            guard let record = try await device.engine.store.record(collection: collection, scope: scope, recordId: recordId)
            else { throw CLIError("no record \(recordId) in \(collection) on this device: `outpost device records` lists them") }
            guard let file = FileReference.references(in: record.fields)[field] else {
                throw CLIError("\(field) of \(recordId) names no file")
            }
            let shown = ProgressShown()
            try await device.engine.exportFile(file, of: record, to: URL(fileURLWithPath: out)) { transfer in
                if let line = shown.line(for: transfer) { say(line) }
            }
            say("wrote \(out) (\(byteText(file.size)))")
        }
    }
}

/// Progress lines at each tenth of a transfer, not at every piece.
final class ProgressShown: Sendable {
    private let shownTenth = NIOLockedValueBox(-1)

    func line(for transfer: FileTransfer) -> String? {
        let tenth = Int(transfer.fraction * 10)
        guard
            shownTenth.withLockedValue({ shown in
                guard tenth > shown else { return false }
                shown = tenth
                return true
            })
        else { return nil }
        return "downloaded \(byteText(transfer.done)) of \(byteText(transfer.file.size))"
    }
}
