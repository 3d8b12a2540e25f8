/// The answer to `GET /v1/record-id-key`: the caller's keys for record ids that must name no one.
public struct RecordIdKeyResponse: Sendable, Hashable, Codable {
    /// The key of the caller's attendance record ids: 64 lowercase hex digits.
    public var attendance: String

    public init(attendance: String) {
        self.attendance = attendance
    }
}
