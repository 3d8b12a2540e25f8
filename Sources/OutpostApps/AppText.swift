import Foundation
import OutpostProtocol
import OutpostRecords

/// The words the field apps show, named once: screens, the CLI and tests read them here.
public enum AppText {
    /// Attendance's refusal without a GPS fix: nothing is written without one, online or offline.
    public static let noLocationFix = "GPS signal required. Please move to an open area."

    /// An uploaded build that the crew's sheet has, and one it does not have yet.
    public static let sheetReceived = "In the crew's sheet"
    public static let sheetWaiting = "Not in the crew's sheet yet"
    /// An uploaded build the crew's sheet has not taken: the server's last attempt failed.
    public static let sheetFailed = "The crew's sheet has not taken it"

    /// An activity saved while the device is offline.
    public static let savedOffline = "Saved offline — will sync when connected"
    /// An activity saved before the device knew whether the server answers.
    public static let savedOnDevice = "Saved on this device"
    /// An activity saved while the server answers with errors.
    public static func savedServerTrouble(_ problem: String) -> String {
        "Saved on this device — the server is having trouble (\(problem)); it will sync when the server recovers"
    }

    /// From this many pending scans on, the door warns that reconnection will be slow.
    public static let largeQueueThreshold = 500

    /// The warning a door shows at ``largeQueueThreshold`` pending scans or more, else nil.
    public static func largeQueueWarning(pending: Int) -> String? {
        guard pending >= largeQueueThreshold else { return nil }
        return "\(pending) check-ins pending sync. The longer you stay offline, the slower reconnection will be."
    }

    /// "HH:mm" in `timeZone`.
    public static func clock(_ date: Date, timeZone: TimeZone = .current) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm"
        formatter.timeZone = timeZone
        return formatter.string(from: date)
    }
}

extension Attendance.Action {
    /// The state the action leaves the staff member in, as the app shows it: "Checked In" or "Checked Out".
    public var stateText: String { self == .checkIn ? "Checked In" : "Checked Out" }
}
