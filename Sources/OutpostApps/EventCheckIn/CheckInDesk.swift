import Foundation
import OutpostClient
import OutpostProtocol

/// Event-day check-in over the sync engine: scan guests against the roster on the device, online or offline.
///
/// A scan is decided on the device alone, from the downloaded roster and the check-ins the device knows
/// (its own, and other devices' as of the last pull). It is saved first and pushed when the device is
/// online; offline scans queue and replay in the order they happened. The server keeps the first scan of
/// each guest at each event, by the device's scan time: a check-in is a record of the event's scope, so the
/// same guest at two events is two check-ins.
public struct CheckInDesk: Sendable {
    public let engine: SyncEngine
    public let roster: ReferenceData
    public let event: String

    public init(engine: SyncEngine, roster: ReferenceData, event: String) {
        self.engine = engine
        self.roster = roster
        self.event = event
    }

    public init(device: Device, event: String) {
        self.init(
            engine: device.engine, roster: ReferenceData(store: device.store, transport: device.transport), event: event)
    }

    /// Checks a guest in.
    ///
    /// When the device is online it first pulls the event's check-ins, so that a guest another device
    /// scanned is recognised; offline it decides from what it has.
    /// - Returns: `.checkedIn` for a new check-in, `.alreadyCheckedIn` with the first scan's time and device.
    /// - Throws: ``ClientError`` `rosterIncomplete`, `unknownGuest` or `guestCancelled`, with the roster
    ///   messages; nothing is written then.
    public func scan(_ guestId: String) async throws -> ScanOutcome {
        let guest = try await rosterGuest(guestId)
        if await engine.status.isOnline {
            _ = try? await engine.pull(collection: CheckIn.collection, scope: event)
        }
        if let first = try await checkIn(of: guestId) {
            return .alreadyCheckedIn(first)
        }
        // The store stamps scanned_at with the write's own client timestamp: the scan time, the key's time
        // and the server's check-in time are one value.
        let record = try await engine.saveAndPush(
            LocalStore.Write(
                collection: CheckIn.collection, scope: event, recordId: guestId,
                fields: [
                    CheckIn.Field.eventId: .string(event),
                    CheckIn.Field.guestId: .string(guestId),
                    CheckIn.Field.scannedBy: .string(engine.configuration.deviceId),
                ],
                timestampField: CheckIn.Field.scannedAt))
        guard let scan = ScanRecord(record, guestName: guest.fields["name"]?.stringValue) else {
            throw ClientError(.storeUnavailable, "the check-in could not be read back")
        }
        return .checkedIn(scan, warning: try await largeQueueWarning())
    }

    /// The guest's roster row, if the roster allows a check-in.
    private func rosterGuest(_ guestId: String) async throws -> ReferenceRecord {
        switch try await roster.lookup(collection: Guest.collection, scope: event, recordId: guestId) {
        case .found(let guest):
            if guest.fields["status"]?.stringValue == "cancelled" {
                throw ClientError(.guestCancelled, ReferenceMessages.cancelled)
            }
            return guest
        case .cancelled:
            throw ClientError(.guestCancelled, ReferenceMessages.cancelled)
        case .notFound:
            throw ClientError(.unknownGuest, ReferenceMessages.notFound)
        case .incomplete:
            throw ClientError(.rosterIncomplete, ReferenceMessages.incomplete)
        }
    }

    /// The guest's check-in at this event as the device knows it, or nil.
    public func checkIn(of guestId: String) async throws -> ScanRecord? {
        guard let record = try await engine.store.record(collection: CheckIn.collection, scope: event, recordId: guestId)
        else { return nil }
        return ScanRecord(record, guestName: nil)
    }

    /// This event's scans that have not reached the server yet (failed ones included), oldest first.
    public func pending() async throws -> [ScanRecord] {
        try await engine.store.records(collection: CheckIn.collection)
            .filter { $0.syncStatus != .synced && $0.scope == event }
            .compactMap { ScanRecord($0, guestName: nil) }
            .sorted { $0.scannedAt < $1.scannedAt }
    }

    /// How many scans, of any event, wait to sync.
    public func pendingCount() async throws -> Int {
        let counts = try await engine.store.counts(collection: CheckIn.collection)
        return counts.pending + counts.failed
    }

    /// The large-queue warning when 500 or more scans wait, else nil.
    public func largeQueueWarning() async throws -> String? {
        CheckIn.largeQueueWarning(pending: try await pendingCount())
    }
}

/// What a scan did.
public enum ScanOutcome: Sendable, Hashable {
    /// A new check-in, saved; `warning` is the large-queue warning, when due.
    case checkedIn(ScanRecord, warning: String?)
    /// The guest was already checked in: the first scan.
    case alreadyCheckedIn(ScanRecord)
}

/// One guest's check-in as the device holds it.
public struct ScanRecord: Sendable, Hashable {
    public var guestId: String
    public var guestName: String?
    public var event: String
    /// The device's time of the scan.
    public var scannedAt: Date
    /// The device that scanned.
    public var scannedBy: String
    public var syncStatus: RecordSyncStatus
    public var syncError: String?

    public init?(_ record: LocalRecord, guestName: String?) {
        guard record.collection == CheckIn.collection, !record.deleted,
            let event = record.fields[CheckIn.Field.eventId]?.stringValue,
            let scannedBy = record.fields[CheckIn.Field.scannedBy]?.stringValue
        else { return nil }
        self.guestId = record.recordId
        self.guestName = guestName
        self.event = event
        self.scannedAt =
            record.fields[CheckIn.Field.scannedAt]?.stringValue.flatMap(Timestamp.init(iso8601:))?.date
            ?? record.createdAt.date
        self.scannedBy = scannedBy
        self.syncStatus = record.syncStatus
        self.syncError = record.syncError
    }

    public var badge: SyncBadge { SyncBadge(status: syncStatus, error: syncError) }
}
