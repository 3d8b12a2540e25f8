import Foundation
import OutpostClient
import OutpostRecords

extension Outpost.Configuration {
    /// A configuration for the field apps: their collections' scopes and roster search, the open event's roster
    /// kept current, and attendance ids settled with the user's keys.
    public static func fieldApps(location: Outpost.StoreLocation, server: URL?, transport: Outpost.Transport) -> Self {
        var configuration = Self(location: location, server: server, transport: transport)
        configuration.schema = .fieldApps
        configuration.eventReferenceCollections = [Guest.collection]
        configuration.recordIdSettlements = [.attendance]
        return configuration
    }
}

extension AttendanceLog {
    /// The attendance log of the person signed in on `outpost`.
    ///
    /// - Throws: ``ClientError`` `signedOut` while nobody is signed in, `noUser` when their token names no user.
    public init(outpost: Outpost, location: any LocationProvider, timeZone: TimeZone = .current) async throws {
        try self.init(device: try await outpost.openDevice, location: location, timeZone: timeZone)
    }
}

extension CheckInDesk {
    /// The door of `event` on `outpost`, which names the event as the device's (``Outpost/setCurrentEvent(_:)``):
    /// its heartbeats list the door on the event's sync monitor, and its roster is kept current.
    ///
    /// - Throws: ``ClientError`` `signedOut` while nobody is signed in, `invalidInput` for an event id that is
    ///   not an identifier.
    public init(
        outpost: Outpost, event: String, verdictBound: Duration = .seconds(2), lookupBound: Duration = .milliseconds(150)
    ) async throws {
        let device = try await outpost.openDevice
        try await outpost.setCurrentEvent(event)
        self.init(device: device, event: event, verdictBound: verdictBound, lookupBound: lookupBound)
    }
}

extension ActivityLog {
    /// The activity log of the person signed in on `outpost`.
    ///
    /// - Throws: ``ClientError`` `signedOut` while nobody is signed in.
    public init(outpost: Outpost) async throws {
        self.init(engine: try await outpost.openDevice.engine)
    }
}

extension BuildArchive {
    /// The build archive of the person signed in on `outpost`.
    ///
    /// - Throws: ``ClientError`` `signedOut` while nobody is signed in.
    public init(outpost: Outpost) async throws {
        self.init(engine: try await outpost.openDevice.engine)
    }
}

extension AttendanceScreen {
    /// The attendance screen of the person signed in on `outpost`.
    ///
    /// - Throws: ``ClientError`` `signedOut` while nobody is signed in, `noUser` when their token names no user.
    public convenience init(outpost: Outpost, location: any LocationProvider, timeZone: TimeZone = .current) async throws {
        self.init(log: try await AttendanceLog(outpost: outpost, location: location, timeZone: timeZone))
    }
}

extension DoorScreen {
    /// The door screen of `event` on `outpost` (see ``CheckInDesk/init(outpost:event:verdictBound:lookupBound:)``).
    public convenience init(outpost: Outpost, event: String) async throws {
        self.init(desk: try await CheckInDesk(outpost: outpost, event: event))
    }
}

extension BuildArchiveScreen {
    /// The build archive screen of the person signed in on `outpost`.
    public convenience init(outpost: Outpost) async throws {
        self.init(archive: try await BuildArchive(outpost: outpost))
    }
}

extension SyncNoticeBanner {
    /// The escalation banner of the device signed in on `outpost`.
    public convenience init(outpost: Outpost) async throws {
        self.init(engine: try await outpost.openDevice.engine)
    }
}
