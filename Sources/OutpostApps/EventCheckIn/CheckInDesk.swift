import Foundation
import OutpostClient
import OutpostProtocol
import OutpostRecords

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
    /// How long a scan waits for the server's verdict on it when the server is known to take records. Past it,
    /// or when the server is not known to (offline, not answering yet, answering with errors), the door decides
    /// from the device alone, and a refusal that comes later shows on the scan's record.
    public let verdictBound: Duration
    /// How long a scan may spend, before it is saved, learning whether the server answers and pulling other
    /// devices' check-ins: the door's answer and the local write never wait longer on the network.
    public let lookupBound: Duration

    public init(
        engine: SyncEngine, roster: ReferenceData, event: String, verdictBound: Duration = .seconds(2),
        lookupBound: Duration = .milliseconds(150)
    ) {
        self.engine = engine
        self.roster = roster
        self.event = event
        self.verdictBound = verdictBound
        self.lookupBound = lookupBound
    }

    public init(device: Device, event: String, verdictBound: Duration = .seconds(2), lookupBound: Duration = .milliseconds(150)) {
        self.init(
            engine: device.engine, roster: ReferenceData(store: device.store, transport: device.transport), event: event,
            verdictBound: verdictBound, lookupBound: lookupBound)
    }

    /// Checks a guest in.
    ///
    /// The scan is stamped when it starts. When the server answers it first pulls the event's check-ins, so that
    /// a guest another device scanned is recognised, for at most ``lookupBound`` all told; past it, or offline,
    /// it decides from what the device has. The check-in is saved then. When the server is known to take
    /// records, the scan then waits up to ``verdictBound`` for its verdict, so that a guest the server refuses (a
    /// registration cancelled since the roster was downloaded) is shown as refused, never as checked in.
    /// - Returns: `.checkedIn` for a new check-in, `.alreadyCheckedIn` with the first scan's time and device,
    ///   `.refused` when the server refused this guest's check-in.
    /// - Throws: ``ClientError`` `rosterIncomplete`, `unknownGuest` or `guestCancelled`, with the roster
    ///   messages; nothing is written then.
    public func scan(_ guestId: String) async throws -> ScanOutcome {
        let tapped = engine.now()
        let guest = try await rosterGuest(guestId)
        let details = GuestDetails(guest)
        let (engine, event, bound) = (engine, event, lookupBound)
        await engine.checkConnection()
        let lookup = Task { () -> Bool in
            await engine.awaitConnection(upTo: bound)
            guard await engine.status.connection == .online else { return false }
            return (try? await engine.pull(collection: CheckIn.collection, scope: event)) != nil
        }
        let lookedUp = await Bounded.wait(for: lookup, upTo: bound, clock: engine.clock) ? await lookup.value : false
        if !lookedUp { lookup.cancel() }
        if let first = try await engine.store.record(collection: CheckIn.collection, scope: event, recordId: guestId),
            let scan = ScanRecord(first, guest: details)
        {
            if first.syncStatus == .refused { return .refused(scan, reason: Self.verdict(of: first)) }
            return .alreadyCheckedIn(scan)
        }
        // The store stamps scanned_at with the write's own client timestamp: the scan time, the key's time
        // and the server's check-in time are one value.
        let saved = try await engine.save(
            LocalStore.Write(
                collection: CheckIn.collection, scope: event, recordId: guestId,
                fields: [
                    CheckIn.Field.eventId: .string(event),
                    CheckIn.Field.guestId: .string(guestId),
                    CheckIn.Field.scannedBy: .string(engine.configuration.deviceId),
                ],
                timestampField: CheckIn.Field.scannedAt), at: tapped)
        var record = saved
        // Only a server known to take records is waited on: one not answering, or answering with errors, would
        // hold the door for the whole bound and still give no verdict.
        if await engine.status.connection == .online {
            await engine.awaitDelivery(upTo: verdictBound)
            record = try await engine.store.record(collection: CheckIn.collection, scope: event, recordId: guestId) ?? saved
            // Decided without the other doors' scans: the server may have kept an earlier one.
            if !lookedUp, record.syncStatus == .synced, let confirmed = try await confirm(guestId) { record = confirmed }
        }
        guard let scan = ScanRecord(record, guest: details) else {
            throw ClientError(.storeUnavailable, "the check-in could not be read back")
        }
        if record.syncStatus == .refused { return .refused(scan, reason: Self.verdict(of: record)) }
        if scan.scannedBy != engine.configuration.deviceId { return .alreadyCheckedIn(scan) }
        return .checkedIn(scan, warning: try await largeQueueWarning())
    }

    /// The guest's check-in as the server keeps it, once a scan of it has synced: the first scan wins there, so a
    /// scan decided without another door's earlier one is answered and not kept. Pulls the event's check-ins for
    /// at most ``verdictBound``; nil when the device holds no check-in of the guest.
    public func confirm(_ guestId: String) async throws -> LocalRecord? {
        let (engine, event) = (engine, event)
        await Bounded.run(for: verdictBound, clock: engine.clock) {
            _ = try? await engine.pull(collection: CheckIn.collection, scope: event)
        }
        return try await engine.store.record(collection: CheckIn.collection, scope: event, recordId: guestId)
    }

    /// What the door reads when the server refused a check-in: the roster's own words where there are some.
    public static func verdict(of record: LocalRecord) -> String {
        switch record.syncErrorCode {
        case WireError.Code.guestCancelled.rawValue: return ReferenceMessages.cancelled
        case WireError.Code.unknownGuest.rawValue: return ReferenceMessages.notFound
        default: return "Check-in refused by the server: \(record.syncError ?? "no reason given")"
        }
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
        return ScanRecord(record, guest: nil)
    }

    /// This event's scans that have not reached the server yet (failed ones included), oldest first.
    public func pending() async throws -> [ScanRecord] {
        await engine.markingOverdue(
            try await engine.store.records(collection: CheckIn.collection)
                .filter { $0.isWaitingToSync && $0.scope == event }
                .compactMap { ScanRecord($0, guest: nil) }
                .sorted { $0.scannedAt < $1.scannedAt },
            collection: CheckIn.collection, scope: event)
    }

    /// This event's scans the server refused, oldest first, each with the door's verdict.
    public func refused() async throws -> [(scan: ScanRecord, reason: String)] {
        try await engine.store.records(.refused, collection: CheckIn.collection)
            .filter { $0.scope == event }
            .compactMap { record in ScanRecord(record, guest: nil).map { ($0, Self.verdict(of: record)) } }
            .sorted { $0.scan.scannedAt < $1.scan.scannedAt }
    }

    /// How many scans, of any event, wait to sync.
    public func pendingCount() async throws -> Int {
        try await engine.store.counts(collection: CheckIn.collection).waiting
    }

    /// A guest's roster row as door staff read it at a lookup: name, note and arrival alert.
    public func guest(_ guestId: String) async throws -> GuestDetails {
        GuestDetails(try await rosterGuest(guestId))
    }

    /// The large-queue warning when 500 or more scans wait, else nil.
    public func largeQueueWarning() async throws -> String? {
        AppText.largeQueueWarning(pending: try await pendingCount())
    }
}

/// What a scan did.
public enum ScanOutcome: Sendable, Hashable {
    /// A new check-in, saved; `warning` is the large-queue warning, when due.
    case checkedIn(ScanRecord, warning: String?)
    /// The guest was already checked in: the first scan.
    case alreadyCheckedIn(ScanRecord)
    /// The server refused this guest's check-in: the guest may not go in. `reason` is what the door reads.
    case refused(ScanRecord, reason: String)
}

/// What door staff read about a guest beside the verdict: the name, the organizer's note and an arrival alert.
public struct GuestDetails: Sendable, Hashable {
    public var name: String?
    /// The roster's `check_in_note`, such as "prefers the side entrance".
    public var note: String?
    /// The roster's `arrival_alert_json`, in words: its level and message, such as "VIP: meet at the door".
    public var alert: String?

    public init(name: String? = nil, note: String? = nil, alert: String? = nil) {
        self.name = name
        self.note = note
        self.alert = alert
    }

    public init(_ guest: ReferenceRecord) {
        name = guest.fields["name"]?.stringValue
        note = guest.fields["check_in_note"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        alert = Self.alertText(guest.fields["arrival_alert_json"])
    }

    /// An alert object's words: "LEVEL: message" from its `level` and `message` (or `text`), else its JSON.
    static func alertText(_ value: JSONValue?) -> String? {
        switch value {
        case nil, .null?: return nil
        case .string(let text)?: return text.isEmpty ? nil : text
        case .object(let alert)?:
            let message = alert["message"]?.stringValue ?? alert["text"]?.stringValue
            let level = alert["level"]?.stringValue
            switch (level, message) {
            case (let level?, let message?): return "\(level.uppercased()): \(message)"
            case (nil, let message?): return message
            case (let level?, nil): return level.uppercased()
            case (nil, nil): return alert.isEmpty ? nil : value?.displayText
            }
        default: return value?.displayText
        }
    }
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
    /// True while the venue relay holds the scan and the server has not answered for it (``LocalRecord/isAtRelay``).
    public var isAtRelay = false
    /// The organizer's note and the arrival alert, when the scan read the roster.
    public var guest: GuestDetails?
    /// The escalation threshold, when the scan has waited to sync longer than it (see ``SyncBadge/overdue``).
    public var overdue: Duration?

    public init?(_ record: LocalRecord, guest: GuestDetails?) {
        guard record.collection == CheckIn.collection, !record.tombstone,
            let event = record.fields[CheckIn.Field.eventId]?.stringValue,
            let scannedBy = record.fields[CheckIn.Field.scannedBy]?.stringValue
        else { return nil }
        self.guestId = record.recordId
        self.guestName = guest?.name
        self.guest = guest
        self.event = event
        self.scannedAt =
            record.fields[CheckIn.Field.scannedAt]?.stringValue.flatMap(Timestamp.init(iso8601:))?.date
            ?? record.createdAt.date
        self.scannedBy = scannedBy
        self.syncStatus = record.syncStatus
        self.syncError = record.syncError
        self.isAtRelay = record.isAtRelay
    }

    public var badge: SyncBadge {
        SyncBadge(status: syncStatus, error: syncError, isAtRelay: isAtRelay, overdue: overdue)
    }
}

extension ScanRecord: WaitingEntry {
    var overdueKey: String { guestId }
}
