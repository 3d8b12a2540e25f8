/// The answer to `GET /v1/record-id-key`: the caller's keys for record ids that must name no one.
public struct RecordIdKeyResponse: Sendable, Hashable, Codable {
    /// The key of the caller's attendance record ids: 64 lowercase hex digits.
    public var attendance: String
    /// The user the keys belong to: a device renames only this user's records with them.
    public var userId: String

    public init(attendance: String, userId: String) {
        self.attendance = attendance
        self.userId = userId
    }
}
