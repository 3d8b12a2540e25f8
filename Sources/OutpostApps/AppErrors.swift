import OutpostClient

/// The field apps' refusals. They extend the SDK's ``ClientError`` codes, so an app or the CLI handles one
/// error type; the messages are the words the field staff read.
extension ClientError.Code {
    /// No GPS fix: attendance refuses to record anything without one.
    public static let noLocationFix = Self(rawValue: "no_location_fix")
    /// Today already has a check-in.
    public static let alreadyCheckedIn = Self(rawValue: "already_checked_in")
    /// A check-out with no check-in today.
    public static let notCheckedIn = Self(rawValue: "not_checked_in")
    /// Today already has a check-out.
    public static let alreadyCheckedOut = Self(rawValue: "already_checked_out")
    /// The scanned guest is not on the device's roster.
    public static let unknownGuest = Self(rawValue: "unknown_guest")
    /// The scanned guest's registration is cancelled.
    public static let guestCancelled = Self(rawValue: "guest_cancelled")
    /// The roster has not finished downloading, so no scan can be decided.
    public static let rosterIncomplete = Self(rawValue: "roster_incomplete")
    /// The device's token names no user.
    public static let noUser = Self(rawValue: "no_user")
}
