import Foundation
import Hummingbird
import OutpostProtocol
import OutpostRecords

/// `GET /v1/export`: a collection's live records as CSV, for supervisors (what they may read: every record of
/// the tenant) and organizers. Field staff export nothing: their data reaches them by pull.
struct ExportController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration

    /// The most records one export holds; a larger one is refused and asked for by scope.
    static var maxRecords: Int { 200_000 }

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
            policy: policy, scope: scope, for: identity, storage: storage, configuration: configuration)
    }

    /// The CSV download of what `identity` may read of `policy`'s collection (in `scope`, or every scope): for
    /// `/v1/export` and the monitor's download links.
    static func csv(
        policy: CollectionPolicy, scope: String?, for identity: Identity, storage: Storage,
        configuration: ServerConfiguration
    ) async throws -> Response {
        var rows: [ExportRow] = []
        var cursor = PullCursor.start
        while true {
            let page = try await storage.pull(
                tenant: identity.tenant, collection: policy.name, scope: scope, owner: policy.readOwner(for: identity),
                after: cursor, limit: configuration.pullMaxLimit, maxBytes: configuration.pageMaxBytes)
            let live = page.changes.filter { !$0.tombstone }
            let received = try await storage.receivedTimes(
                tenant: identity.tenant, collection: policy.name, recordIds: live.map(\.recordId))
            for record in live {
                var row = try ExportRow(record)
                row.receivedAt = received[RecordVersion(recordId: record.recordId, scope: record.scope, version: record.version)]
                    .map(Timestamp.init(millisecondsSince1970:))
                rows.append(row)
            }
            guard rows.count <= maxRecords else {
                throw OutpostHTTPError(
                    .contentTooLarge, .payloadTooLarge,
                    "an export holds at most \(maxRecords) records; export one scope at a time")
            }
            guard page.hasMore else { break }
            cursor = page.cursor
        }
        let table = CSVTable(collection: policy.name, rows: rows)
        var headers = HTTPFields()
        headers[.contentType] = "text/csv; charset=utf-8"
        headers[.contentDisposition] = "attachment; filename=\"\(fileName(collection: policy.name, scope: scope))\""
        headers[.cacheControl] = "no-store"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: table.text)))
    }

    /// "checkins-gala.csv": the collection and scope, both identifiers, so nothing in them needs quoting.
    static func fileName(collection: String, scope: String?) -> String {
        [collection, scope].compactMap { $0 }.joined(separator: "-") + ".csv"
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
        guard case .object(let fields) = try JSONValue(parsing: Array(record.fieldsJSON.utf8)) else {
            throw OutpostHTTPError(.internalServerError, .internalError, "a stored record's fields are not an object")
        }
        recordId = record.recordId
        scope = record.scope
        version = record.version
        createdAt = Timestamp(millisecondsSince1970: record.createdAt)
        updatedAt = Timestamp(millisecondsSince1970: record.updatedAt)
        self.fields = fields
    }
}

/// Rows as RFC 4180 CSV: a header, then one line per record, the field columns of the field apps' collections
/// first in the order their people read them, then every other field by name.
struct CSVTable {
    /// Each collection's columns to lead with, after the record's own.
    static let leadingFields: [String: [String]] = [
        CheckIn.collection: [
            CheckIn.Field.guestId, CheckIn.Field.scannedAt, CheckIn.Field.scannedBy, "isOfflineEntry",
        ],
        Attendance.collection: [
            Attendance.Field.day, Attendance.Field.action, Attendance.Field.latitude, Attendance.Field.longitude,
            Attendance.Field.accuracy, "isOfflineEntry",
        ],
        Activity.collection: [
            Activity.Field.type, Activity.Field.date, Activity.Field.durationMinutes, Activity.Field.participants,
            Activity.Field.travelExpense, Activity.Field.notes, "isOfflineEntry",
        ],
        Build.collection: [Build.Field.name, "isOfflineEntry"],
    ]

    let text: String

    init(collection: String, rows: [ExportRow]) {
        let leading = Self.leadingFields[collection] ?? []
        let others = Set(rows.flatMap(\.fields.keys)).subtracting(leading).sorted()
        let fieldColumns = leading + others
        var lines = [(["record_id", "scope", "version", "created_at", "updated_at", "received_at"] + fieldColumns).map(Self.cell)]
        for row in rows {
            let own = [
                row.recordId, row.scope, String(row.version), row.createdAt.iso8601, row.updatedAt.iso8601,
                row.receivedAt?.iso8601 ?? "",
            ]
            lines.append((own + fieldColumns.map { Self.text(row.fields[$0]) }).map(Self.cell))
        }
        text = lines.map { $0.joined(separator: ",") + "\r\n" }.joined()
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
