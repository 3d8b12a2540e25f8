import Foundation
import Hummingbird
import Logging
import OutpostProtocol
import OutpostRecords

/// `GET /v1/export`: a collection's live records as CSV, for supervisors (what they may read: every record of
/// the tenant) and organizers. Field staff export nothing: their data reaches them by pull.
struct ExportController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration
    let secrets: ServerSecrets
    let gate: AdmissionGate
    let now: @Sendable () -> Date

    /// The most records and stored bytes one page of an export reads: an export's memory is one page's, however
    /// large the collection.
    static var pageLimit: Int { 500 }
    static var pageMaxBytes: Int { 1 << 20 }

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.get("export", use: export)
    }

    @Sendable func export(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        try identity.require(.supervisor)
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        let scope = try RequestDecoding.scope(in: request)
        if let refusal = policy.readRefusal(for: identity, scope: scope) { throw OutpostHTTPError.forbidden(refusal) }
        let format = try RequestDecoding.optional("format", in: request) ?? "csv"
        guard format == "csv" else {
            throw OutpostHTTPError.badRequest("the only export format is csv")
        }
        return try await Self.csv(
            policy: policy, scope: scope, for: identity, storage: storage, gate: gate, logger: context.logger,
            links: try FileLinks.of(configuration, secrets: secrets), now: now())
    }

    /// The CSV download of `policy`'s collection (in `scope`, or every scope) for a supervisor or organizer: for
    /// `/v1/export` and the monitor's download links.
    ///
    /// Streamed, in record id order: the records are read twice by pages, once for the field names the header
    /// needs and once to write each page's lines as soon as it is read, so memory holds one page whatever the
    /// collection's size. Each page is read under the admission gate, like a request of its own. The first page
    /// is read before the answer starts, so that a failure then is an ordinary error answer; a failure later
    /// (or a field name that first appears while the export runs, which the header cannot hold) ends the
    /// download unfinished, which a browser or client reports as failed, never as a shorter file.
    ///
    /// A field that names a file is its link from `links`, signed at `now`; without links, the reference as JSON.
    static func csv(
        policy: CollectionPolicy, scope: String?, for identity: Identity, storage: Storage, gate: AdmissionGate,
        logger: Logger, links: FileLinks? = nil, now: Date = Date()
    ) async throws -> Response {
        // Supervisors and organizers read every owner's records (``CollectionPolicy/readOwner(for:)``).
        guard policy.readOwner(for: identity) == nil else {
            throw OutpostHTTPError.forbidden("exports are for supervisors and organizers")
        }
        let page = { @Sendable (position: RecordPosition?) async throws -> [RecordRow] in
            try await storage.snapshotPage(
                tenant: identity.tenant, collection: policy.name, scope: scope, after: position, limit: pageLimit,
                maxBytes: pageMaxBytes)
        }
        let first = try await page(nil)
        var headers = HTTPFields()
        headers[.contentType] = "text/csv; charset=utf-8"
        headers[.contentDisposition] = "attachment; filename=\"\(fileName(collection: policy.name, scope: scope))\""
        headers[.cacheControl] = "no-store"
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                do {
                    var names = Set<String>()
                    var rows = first
                    while let last = rows.last {
                        for row in rows { names.formUnion(try ExportRow.fields(of: row).keys) }
                        let after = RecordPosition(recordId: last.recordId, scope: last.scope)
                        rows = try await gate.withAdmission(caller: identity.admissionKey) { try await page(after) }
                    }
                    let columns = CSVTable.fieldColumns(collection: policy.name, names: names)
                    try await writer.write(ByteBuffer(string: CSVTable.header(fieldColumns: columns)))
                    var position: RecordPosition?
                    while true {
                        // A page and its records' receive times, under one admission.
                        let (rows, received) = try await gate.withAdmission(caller: identity.admissionKey) {
                            let rows = try await page(position)
                            let received = try await storage.receivedTimes(
                                tenant: identity.tenant, collection: policy.name, recordIds: rows.map(\.recordId))
                            return (rows, received)
                        }
                        guard let last = rows.last else { break }
                        var text = ""
                        for record in rows {
                            var row = try ExportRow(record)
                            guard names.isSuperset(of: row.fields.keys) else { throw ExportError.newField }
                            if let links {
                                row.fields = links.linking(
                                    row.fields,
                                    of: FileLinks.Target(
                                        tenant: identity.tenant, collection: policy.name, scope: record.scope,
                                        recordId: record.recordId, sha256: ""),
                                    now: now)
                            }
                            row.receivedAt = received[RecordVersion(recordId: record.recordId, scope: record.scope, version: record.version)]
                                .map(Timestamp.init(millisecondsSince1970:))
                            text += CSVTable.line(row, fieldColumns: columns)
                        }
                        try await writer.write(ByteBuffer(string: text))
                        position = RecordPosition(recordId: last.recordId, scope: last.scope)
                    }
                    try await writer.finish(nil)
                } catch {
                    logger.notice(
                        "an export ended unfinished", metadata: ["collection": "\(policy.name)", "reason": "\(ExportError.reason(error))"])
                    throw error
                }
            })
    }

    /// "checkins-gala.csv": the collection and scope, both identifiers, so nothing in them needs quoting.
    static func fileName(collection: String, scope: String?) -> String {
        [collection, scope].compactMap { $0 }.joined(separator: "-") + ".csv"
    }
}

/// Why an export ended unfinished, for its log line (never a record's content).
enum ExportError: Error {
    /// A field name none of the records had when the header was written.
    case newField

    static func reason(_ error: any Error) -> String {
        switch error {
        case ExportError.newField: "a field first appeared while the export ran"
        case let error as StorageError: "storage: \(error.code)"
        case is OutpostHTTPError: "the server was busy"
        default: "the download was cut"
        }
    }
}

/// One record of an export: its identity, versions and times, and its fields.
struct ExportRow {
    var recordId: String
    var scope: String
    var version: Int64
    /// The device's times of the record's first write and latest change.
    var createdAt: Timestamp
    var updatedAt: Timestamp
    /// When the server received the latest change; nil for a record written before the server kept it.
    var receivedAt: Timestamp?
    var fields: [String: JSONValue]

    init(_ record: RecordRow) throws {
        let fields = try Self.fields(of: record)
        recordId = record.recordId
        scope = record.scope
        version = record.version
        createdAt = Timestamp(millisecondsSince1970: record.createdAt)
        updatedAt = Timestamp(millisecondsSince1970: record.updatedAt)
        self.fields = fields
    }

    /// A stored record's fields, by name.
    static func fields(of record: RecordRow) throws -> [String: JSONValue] {
        guard case .object(let fields) = try JSONValue(parsing: Array(record.fieldsJSON.utf8)) else {
            throw OutpostHTTPError(.internalServerError, .internalError, "a stored record's fields are not an object")
        }
        return fields
    }
}

/// Rows as RFC 4180 CSV: a header, then one line per record, the field columns of the field apps' collections
/// first in the order their people read them, then every other field by name.
enum CSVTable {
    /// Each collection's columns to lead with, after the record's own.
    static let leadingFields: [String: [String]] = [
        CheckIn.collection: [
            CheckIn.Field.guestId, CheckIn.Field.scannedAt, CheckIn.Field.scannedBy, "isOfflineEntry",
        ],
        Attendance.collection: [
            Attendance.Field.userId, Attendance.Field.day, Attendance.Field.action, Attendance.Field.latitude, Attendance.Field.longitude,
            Attendance.Field.accuracy, "isOfflineEntry",
        ],
        Activity.collection: [
            Activity.Field.type, Activity.Field.date, Activity.Field.durationMinutes, Activity.Field.participants,
            Activity.Field.travelExpense, Activity.Field.notes, "isOfflineEntry",
        ],
        Build.collection: [Build.Field.name, "isOfflineEntry"],
    ]

    /// The record's own columns, before its fields.
    static let recordColumns = ["record_id", "scope", "version", "created_at", "updated_at", "received_at"]

    /// The field columns of `collection` whose records hold the field `names`: its leading ones, then the others
    /// by name.
    static func fieldColumns(collection: String, names: Set<String>) -> [String] {
        let leading = leadingFields[collection] ?? []
        return leading + names.subtracting(leading).sorted()
    }

    /// The header line.
    static func header(fieldColumns: [String]) -> String {
        (recordColumns + fieldColumns).map(cell).joined(separator: ",") + "\r\n"
    }

    /// One record's line.
    static func line(_ row: ExportRow, fieldColumns: [String]) -> String {
        let own = [
            row.recordId, row.scope, String(row.version), row.createdAt.iso8601, row.updatedAt.iso8601,
            row.receivedAt?.iso8601 ?? "",
        ]
        return (own + fieldColumns.map { text(row.fields[$0]) }).map(cell).joined(separator: ",") + "\r\n"
    }

    /// A field's value as a cell: text as it is, numbers and booleans as JSON writes them, nothing for null or a
    /// missing field, arrays and objects as JSON.
    static func text(_ value: JSONValue?) -> String {
        switch value {
        case nil, .null?: return ""
        case .string(let text)?: return guardFormula(text)
        case .bool, .integer, .number: return value?.displayText ?? ""
        case let value?: return (try? value.jsonBytes()).map { String(decoding: $0, as: UTF8.self) } ?? ""
        }
    }

    /// Text a spreadsheet would run as a formula (starting with = + - @, a tab or a carriage return) is given a
    /// leading apostrophe, so that opening an export never runs what a device wrote.
    static func guardFormula(_ text: String) -> String {
        guard let first = text.unicodeScalars.first, "=+-@\t\r".unicodeScalars.contains(first) else { return text }
        return "'" + text
    }

    /// Quoted when it holds a comma, a quote or a line break; quotes doubled.
    static func cell(_ text: String) -> String {
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
