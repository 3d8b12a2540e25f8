import Foundation
import OutpostProtocol

/// The guest roster of an event: the `guests` reference collection, scoped by `event_id`.
///
/// One place for its field names and the rules every writer must follow; the server enforces them and the
/// CLI's import checks them first, so that a bad row is reported with its line before anything is sent.
public enum Guest {
    public static let collection = "guests"
    public static let scopeField = "event_id"

    /// The roster CSV's columns, in their usual order.
    public static let columns = [
        "guest_id", "name", "email", "access_type_id", "status", "check_in_note", "arrival_alert_json",
    ]

    /// Registration statuses; `cancelled` reads like a deleted registration.
    public static let statuses: Set<String> = ["registered", "confirmed", "waitlisted", "cancelled"]

    /// What is wrong with a guest's fields, or nil. Fields absent from an update are not checked.
    public static func problem(in fields: [String: JSONValue]) -> String? {
        if let name = fields["name"] {
            guard let text = name.stringValue, !text.trimmingCharacters(in: .whitespaces).isEmpty, text.count <= 200
            else { return "name must be 1 to 200 characters" }
        }
        if let email = fields["email"], email != .null {
            guard let text = email.stringValue, text.isEmpty || isPlausibleEmail(text) else {
                return "email must look like name@example.org"
            }
        }
        if let event = fields[scopeField] {
            guard let text = event.stringValue, Identifier.isValid(text) else {
                return "event_id must be an identifier"
            }
        }
        if let access = fields["access_type_id"], access != .null {
            guard let text = access.stringValue, text.isEmpty || Identifier.isValid(text) else {
                return "access_type_id must be an identifier"
            }
        }
        if let status = fields["status"], status != .null {
            guard let text = status.stringValue, text.isEmpty || statuses.contains(text) else {
                return "status must be one of \(statuses.sorted().joined(separator: ", "))"
            }
        }
        if let note = fields["check_in_note"], note != .null {
            guard let text = note.stringValue, text.count <= 1000 else { return "check_in_note must be at most 1,000 characters" }
        }
        return nil
    }

    public static func isPlausibleEmail(_ text: String) -> Bool {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        return text.count <= 254 && parts.count == 2 && !parts[0].isEmpty && parts[1].contains(".")
            && !text.contains(where: { $0.isWhitespace })
    }
}
