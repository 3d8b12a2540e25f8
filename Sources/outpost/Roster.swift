import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import OutpostClient
import OutpostHTTP
import OutpostProtocol
import OutpostRecords

/// `outpost roster …`: the organizer's tools for an event's guest roster.
struct RosterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "roster",
        abstract: "Manage an event's guest roster (organizer token).",
        subcommands: [RosterImport.self, RosterAdd.self, RosterCancel.self, RosterEvent.self, RosterGenerate.self])
}

/// The server and token of an organizer command: flags, or `$OUTPOST_SERVER` and `$OUTPOST_TOKEN`.
struct ConnectionOptions: ParsableArguments {
    @Option(help: "The server (default $OUTPOST_SERVER).")
    var server: String?
    @Option(help: "An organizer token (default $OUTPOST_TOKEN).")
    var token: String?

    /// Runs `body` with a transport to the server, shutting its HTTP client down after.
    @discardableResult
    func withTransport<T>(_ body: (HTTPSyncTransport) async throws -> T) async throws -> T {
        let environment = ProcessInfo.processInfo.environment
        guard let text = server ?? environment["OUTPOST_SERVER"], let url = URL(string: text), url.host != nil else {
            throw CLIError("give --server URL or set OUTPOST_SERVER")
        }
        guard let token = token ?? environment["OUTPOST_TOKEN"], !token.isEmpty else {
            throw CLIError("give --token T or set OUTPOST_TOKEN")
        }
        return try await withDeviceHTTPClient { client in
            try await body(HTTPSyncTransport(baseURL: url, token: token, client: client))
        }
    }
}

/// An event id argument, checked.
func checkedEvent(_ event: String) throws -> String {
    guard Identifier.isValid(event) else { throw ValidationError("--event must be an identifier (A-Z a-z 0-9 . _ : @ -)") }
    return event
}

/// A roster change as the organizer tools send it: the key names the event, the guest and the moment, so
/// that running the same command again later is a new change and never an idempotency clash. The event is
/// the guest's scope: a cancel, which carries no fields, names it too.
func rosterMutation(
    event: String, guestId: String, op: MutationOperation = .upsert, fields: [String: JSONValue] = [:], at time: Timestamp
) -> Mutation {
    Mutation(
        idempotencyKey: "roster:\(event):\(guestId):\(time.iso8601)\(op == .delete ? ":cancel" : "")",
        collection: Guest.collection, recordId: guestId, scope: event, op: op, fields: fields, clientTimestamp: time)
}

/// A roster row as an import sends it, stamped with the file's time. The key is a digest of the event, the
/// guest and the row's content: the same file imported again (after an interruption, or twice by mistake)
/// is answered `duplicate` row by row and applies nothing twice; a row that changed is a new change; a row
/// unchanged in a file saved again is refused as a reused key, and so known to be imported already.
func importedRow(event: String, row: RosterCSV.Row, at time: Timestamp) throws -> Mutation {
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    var content = Data("\(event)\u{0}\(row.guestId)\u{0}".utf8)
    content.append(try encoder.encode(row.fields))
    let digest = SHA256.hash(data: content).map { String(format: "%02x", $0) }.joined()
    return Mutation(
        idempotencyKey: "roster-import:\(digest)", collection: Guest.collection, recordId: row.guestId, scope: event, op: .upsert,
        fields: row.fields, clientTimestamp: time)
}

/// What a roster push did: rows written, and rows the server already had under the same key.
struct RosterPush {
    var applied = 0
    var duplicates = 0
}

/// Sends roster mutations in batches the server accepts; stops at the first refusal.
@discardableResult
func pushRoster(_ mutations: [Mutation], via transport: HTTPSyncTransport, progress: ((Int) -> Void)? = nil) async throws -> RosterPush {
    var pushed = RosterPush()
    for start in stride(from: 0, to: mutations.count, by: 500) {
        let batch = Array(mutations[start..<min(start + 500, mutations.count)])
        let response: PushResponse
        do {
            response = try await transport.push(PushRequest(deviceId: "organizer-cli", mutations: batch))
        } catch let error as TransportError {
            let sent = pushed.applied + pushed.duplicates
            throw CLIError("stopped after \(sent) of \(mutations.count) rows: \(error.message); run the same command again to finish")
        }
        let reimported = { (result: MutationResult) in
            result.status == .duplicate || (result.error?.code == .idempotencyKeyReused && result.idempotencyKey.hasPrefix("roster-import:"))
        }
        if let refused = response.results.first(where: { $0.status == .rejected && !reimported($0) }) {
            let guest = batch.first { $0.idempotencyKey == refused.idempotencyKey }?.recordId ?? refused.idempotencyKey
            throw CLIError("the server refused \(guest): \(refused.error?.message ?? "rejected")")
        }
        let duplicates = response.results.count(where: reimported)
        pushed.duplicates += duplicates
        pushed.applied += batch.count - duplicates
        progress?(pushed.applied + pushed.duplicates)
    }
    return pushed
}

struct RosterImport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import a roster CSV (guest_id, name, email, access_type_id, status, check_in_note, arrival_alert_json).",
        discussion: "Every row is checked first; if any is bad, each problem is reported with its line and nothing is sent.")

    @Option(help: "The event id.")
    var event: String
    @Argument(help: "The CSV file.")
    var file: String
    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        let event = try checkedEvent(self.event)
        guard let data = FileManager.default.contents(atPath: file) else { throw CLIError("cannot read \(file)") }
        guard let text = String(data: data, encoding: .utf8) else { throw CLIError("\(file) is not UTF-8 text") }
        let rows: [RosterCSV.Row]
        switch RosterCSV.parse(text, event: event) {
        case .success(let parsed): rows = parsed
        case .failure(let list):
            for problem in list.problems.prefix(50) { FileHandle.standardError.write(Data("\(file): \(problem)\n".utf8)) }
            throw CLIError("\(list.problems.count) bad row\(list.problems.count == 1 ? "" : "s") in \(file); nothing was imported")
        }
        // The file's time, so that the same file sent again is the same change; never ahead of now.
        let saved = (try? FileManager.default.attributesOfItem(atPath: file)[.modificationDate] as? Date) ?? Date()
        let time = Timestamp(min(saved, Date()))
        let mutations = try rows.map { try importedRow(event: event, row: $0, at: time) }
        let pushed = try await connection.withTransport { transport in
            try await pushRoster(mutations, via: transport)
        }
        let already = pushed.duplicates == 0 ? "" : " (\(pushed.duplicates) already imported, left as they were)"
        say("imported \(pushed.applied) guest\(pushed.applied == 1 ? "" : "s") into \(event)\(already)")
    }
}

struct RosterAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add", abstract: "Add or change one guest, such as a walk-in: guest_id=… name=… email=…")

    @Option(help: "The event id.")
    var event: String
    @Argument(help: "Fields as key=value; guest_id is required.")
    var fields: [String]
    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        let event = try checkedEvent(self.event)
        var values: [String: JSONValue] = [Guest.scopeField: .string(event)]
        var guestId: String?
        for pair in fields {
            let (key, value) = try keyValue(pair)
            guard key == "guest_id" || Guest.columns.contains(key) else {
                throw CLIError("unknown field \(key); use \(Guest.columns.joined(separator: ", "))")
            }
            if key == "guest_id" { guestId = value } else { values[key] = .string(value) }
        }
        guard let guestId, Identifier.isValid(guestId) else { throw CLIError("guest_id=… is required and must be an identifier") }
        if let problem = Guest.problem(in: values) { throw CLIError(problem) }
        let mutation = rosterMutation(event: event, guestId: guestId, fields: values, at: Timestamp(Date()))
        try await connection.withTransport { try await pushRoster([mutation], via: $0) }
        say("added \(guestId) to \(event)")
    }
}

struct RosterEvent: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "event", abstract: "Set an event's name and ops contact (the sync monitor's urgent-message link).")

    @Option(help: "The event id.")
    var event: String
    @Option(help: "The event's name.")
    var name: String?
    @Option(name: .customLong("ops-contact"), help: "An e-mail, phone number or https link for the operations team.")
    var opsContact: String?
    @Option(
        name: .customLong("notify-url"),
        help: "Where to tell the organizer that a device has not synced for 30 minutes, is back, or holds failing records (https).")
    var notifyURL: String?
    @Option(name: .customLong("notify-format"), help: "json (the default) or slack (an incoming webhook's message).")
    var notifyFormat: String?
    @Flag(name: .customLong("no-notify"), help: "Stop the event's notifications.")
    var noNotify = false
    @OptionGroup var connection: ConnectionOptions

    func validate() throws {
        if let notifyFormat, !["json", "slack"].contains(notifyFormat) { throw ValidationError("--notify-format is json or slack") }
        if noNotify && notifyURL != nil { throw ValidationError("give --notify-url or --no-notify, not both") }
    }

    func run() async throws {
        let event = try checkedEvent(self.event)
        var fields: [String: JSONValue] = [:]
        if let name { fields[EventRecord.Field.name] = .string(name) }
        if let opsContact { fields[EventRecord.Field.opsContact] = .string(opsContact) }
        guard !fields.isEmpty || notifyURL != nil || noNotify else {
            throw CLIError("give --name, --ops-contact, --notify-url or --no-notify")
        }
        if let problem = EventRecord.problem(in: fields) { throw CLIError(problem) }
        try await connection.withTransport { transport in
            if !fields.isEmpty {
                let time = Timestamp(Date())
                let mutation = Mutation(
                    idempotencyKey: "event:\(event):\(time.iso8601)", collection: EventRecord.collection, recordId: event,
                    op: .upsert, fields: fields, clientTimestamp: time)
                _ = try await pushRoster([mutation], via: transport)
                say("event \(event) updated")
            }
            let path = "/v1/events/\(event)/notifications"
            if let notifyURL {
                let setting = ["url": notifyURL, "format": notifyFormat ?? "json"]
                _ = try await transport.exchange(.PUT, path: path, body: try JSONEncoder().encode(setting))
                say("event \(event) notifies \(notifyFormat ?? "json") at the URL given")
            } else if noNotify {
                do {
                    _ = try await transport.exchange(.DELETE, path: path)
                } catch let error as TransportError where error.status == 404 {
                    // It sent none: the outcome asked for.
                }
                say("event \(event) sends no notifications")
            }
        }
    }
}

struct RosterCancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel", abstract: "Cancel a registration: devices get a tombstone on their next refresh.")

    @Option(help: "The event id.")
    var event: String
    @Argument(help: "The guest id.")
    var guestId: String
    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        let event = try checkedEvent(self.event)
        guard Identifier.isValid(guestId) else { throw CLIError("the guest id must be an identifier") }
        let mutation = rosterMutation(event: event, guestId: guestId, op: .delete, at: Timestamp(Date()))
        try await connection.withTransport { try await pushRoster([mutation], via: $0) }
        say("cancelled \(guestId) in \(event)")
    }
}

struct RosterGenerate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate", abstract: "Print a demo roster CSV of any size, 100,000 included.")

    @Option(help: "How many guests.")
    var guests: Int
    @Option(help: "Write to this file instead of standard output.")
    var output: String?

    func validate() throws {
        guard (1...1_000_000).contains(guests) else { throw ValidationError("--guests must be from 1 to 1,000,000") }
    }

    func run() async throws {
        let text = RosterCSV.generate(guests: guests)
        if let output {
            guard FileManager.default.createFile(atPath: output, contents: Data(text.utf8)) else {
                throw CLIError("cannot write \(output)")
            }
        } else {
            FileHandle.standardOutput.write(Data(text.utf8))
        }
    }
}
