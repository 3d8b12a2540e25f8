import Foundation
import OutpostProtocol

/// Reads an event roster from CSV (RFC 4180: quoted fields may hold commas, quotes and line breaks) and checks
/// every row, reporting problems by line number, so that an import sends nothing unless every row is good.
package enum RosterCSV {
    /// A checked row: the guest's id and the fields to write.
    package struct Row: Sendable, Hashable {
        public var line: Int
        public var guestId: String
        public var fields: [String: JSONValue]
    }

    /// A problem with one line.
    package struct Problem: Sendable, Hashable, CustomStringConvertible {
        public var line: Int
        public var message: String
        public var description: String { "line \(line): \(message)" }
    }

    /// The rows of `text`, or every problem found; never some of each.
    package static func parse(_ text: String, event: String) -> Result<[Row], ProblemList> {
        var problems: [Problem] = []
        let records = split(text)
        guard let header = records.first else {
            return .failure(ProblemList([Problem(line: 1, message: "the file is empty; expected a header row")]))
        }
        let names = header.fields.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        let missing = Guest.columns.filter { !names.contains($0) }
        let unknown = names.filter { !Guest.columns.contains($0) }
        guard missing.isEmpty, unknown.isEmpty, Set(names).count == names.count else {
            var parts: [String] = []
            if !missing.isEmpty { parts.append("missing \(missing.joined(separator: ", "))") }
            if !unknown.isEmpty { parts.append("unknown \(unknown.joined(separator: ", "))") }
            if Set(names).count != names.count { parts.append("a column appears twice") }
            return .failure(
                ProblemList([
                    Problem(
                        line: header.line, message: "the header must name \(Guest.columns.joined(separator: ", ")): \(parts.joined(separator: "; "))")
                ]))
        }
        var rows: [Row] = []
        var seen: [String: Int] = [:]
        for record in records.dropFirst() {
            if record.fields.count == 1 && record.fields[0].isEmpty { continue }  // a blank line
            guard record.fields.count == names.count else {
                problems.append(Problem(line: record.line, message: "expected \(names.count) columns, found \(record.fields.count)"))
                continue
            }
            var values: [String: String] = [:]
            for (name, value) in zip(names, record.fields) { values[name] = value }
            let guestId = values["guest_id"]?.trimmingCharacters(in: .whitespaces) ?? ""
            guard Identifier.isValid(guestId) else {
                problems.append(Problem(line: record.line, message: "guest_id must be 1 to 128 characters from A-Z a-z 0-9 . _ : @ -"))
                continue
            }
            if let first = seen[guestId] {
                problems.append(Problem(line: record.line, message: "guest_id \(guestId) already appears on line \(first)"))
                continue
            }
            seen[guestId] = record.line
            var fields: [String: JSONValue] = [Guest.scopeField: .string(event)]
            for name in Guest.columns where name != "guest_id" && name != "arrival_alert_json" {
                fields[name] = .string(values[name]?.trimmingCharacters(in: .whitespaces) ?? "")
            }
            let alert = values["arrival_alert_json"]?.trimmingCharacters(in: .whitespaces) ?? ""
            if alert.isEmpty {
                fields["arrival_alert_json"] = .null
            } else if let parsed = try? JSONDecoder().decode(JSONValue.self, from: Data(alert.utf8)) {
                fields["arrival_alert_json"] = parsed
            } else {
                problems.append(Problem(line: record.line, message: "arrival_alert_json is not valid JSON"))
                continue
            }
            if let problem = Guest.problem(in: fields) {
                problems.append(Problem(line: record.line, message: problem))
                continue
            }
            rows.append(Row(line: record.line, guestId: guestId, fields: fields))
        }
        if let open = records.last, open.unterminated {
            problems.append(Problem(line: open.line, message: "a quoted field is never closed"))
        }
        return problems.isEmpty ? .success(rows) : .failure(ProblemList(problems))
    }

    /// Every problem of a file, in line order.
    package struct ProblemList: Error, Sendable, CustomStringConvertible {
        public var problems: [Problem]
        init(_ problems: [Problem]) { self.problems = problems.sorted { $0.line < $1.line } }
        public var description: String { problems.map(\.description).joined(separator: "\n") }
    }

    struct Record {
        var line: Int
        var fields: [String]
        var unterminated = false
    }

    /// Splits CSV into records, each with the line it starts on.
    static func split(_ text: String) -> [Record] {
        var records: [Record] = []
        var fields: [String] = []
        var field = ""
        var inQuotes = false
        var line = 1
        var recordLine = 1
        var characters = text.makeIterator()
        var pending: Character? = characters.next()
        var any = false
        while let character = pending {
            pending = characters.next()
            any = true
            if inQuotes {
                if character == "\"" {
                    if pending == "\"" {
                        field.append("\"")
                        pending = characters.next()
                    } else {
                        inQuotes = false
                    }
                } else {
                    if character == "\n" || character == "\r\n" { line += 1 }
                    field.append(character)
                }
                continue
            }
            switch character {
            case "\"" where field.isEmpty:
                inQuotes = true
            case ",":
                fields.append(field)
                field = ""
            case "\n", "\r\n", "\r":
                fields.append(field)
                records.append(Record(line: recordLine, fields: fields))
                fields = []
                field = ""
                line += 1
                recordLine = line
            default:
                field.append(character)
            }
        }
        if any && (!field.isEmpty || !fields.isEmpty || inQuotes) {
            fields.append(field)
            records.append(Record(line: recordLine, fields: fields, unterminated: inQuotes))
        }
        return records
    }

    /// A demo roster of `guests` rows, deterministic for a given count.
    package static func generate(guests: Int) -> String {
        let first = [
            "Ana", "Ben", "Chloé", "Dmitri", "Eun-ji", "Farah", "Gustav", "Hana", "Ibrahim", "Jonas", "Kofi", "Lena", "Mateo", "Nadia", "Oskar",
            "Priya", "Quentin", "Rosa", "Sami", "Tomás",
        ]
        let last = [
            "Silva", "Okafor", "Müller", "Tanaka", "Haddad", "Novak", "García", "Kowalski", "Nguyen", "Andersen", "Rossi", "Ivanova", "Mensah",
            "Dubois", "Park", "Costa", "Ahmed", "Larsen", "Moreau", "Yilmaz",
        ]
        var text = Guest.columns.joined(separator: ",") + "\n"
        text.reserveCapacity(guests * 90)
        for i in 0..<guests {
            let given = first[i % first.count]
            let family = last[(i / first.count) % last.count]
            let access = ["general", "vip", "staff", "press"][i % 4]
            let alert = i % 50 == 0 ? "\"{\"\"level\"\":\"\"info\"\",\"\"text\"\":\"\"Wheelchair access\"\"}\"" : ""
            let note = i % 10 == 0 ? "\"Prefers, if possible, the \"\"side\"\" entrance\"" : ""
            text +=
                "g\(String(format: "%06d", i)),\(given) \(family) \(i),\(given.lowercased()).\(i)@example.org,\(access),registered,\(note),\(alert)\n"
        }
        return text
    }
}
