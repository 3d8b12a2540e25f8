import Foundation
import Observation
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// The event door, for SwiftUI to bind to: the roster's download and its progress bar, the gate that holds scans
/// until the roster is complete, the verdict banner of the last scan, and the pending scans with the 500+ warning.
///
/// A verdict admits a guest (``ScanVerdict/admits``) only for a new check-in the server has not refused.
@MainActor
@Observable
public final class DoorScreen {
    public let desk: CheckInDesk

    /// Where the device stands with the event's roster.
    public private(set) var roster: ReferenceState = .notDownloaded
    /// The progress bar while the roster downloads: 0…1, nil before the total is known.
    public private(set) var downloadFraction: Double?
    public private(set) var isDownloading = false
    /// Why the last download stopped short, such as a lost connection; the roster keeps what it stored.
    public private(set) var downloadError: String?
    /// Why the screen could not be read from the device store, with a code a screen can act on (`disk_full`,
    /// `cannot_decrypt`, `store_corrupt`); the screen keeps what it showed last. Nil once a read succeeds.
    public private(set) var error: ClientError?
    /// The banner of the last scan, until the next.
    public private(set) var verdict: ScanVerdict?
    public private(set) var isScanning = false
    /// Scans of any event still waiting for the server.
    public private(set) var pendingCount = 0
    /// "612 check-ins pending sync. The longer you stay offline, the slower reconnection will be." from 500 on.
    public private(set) var largeQueueWarning: String?
    public private(set) var connection = ConnectionIndicator(SyncStatus())

    @ObservationIgnored private lazy var updates = ScreenUpdates(engine: desk.engine) { [weak self] in await self?.load() }

    public init(desk: CheckInDesk) {
        self.desk = desk
    }

    /// Whether a scan can be made: never while the roster is incomplete.
    public var canScan: Bool { roster.isReady && !isScanning }
    /// The gate's words: "Roster incomplete — connect to network to finish", or "Ready for offline (since …)".
    public var rosterMessage: String { roster.message() }

    /// Downloads the roster (or resumes it), moving the progress bar page by page.
    public func downloadRoster() async {
        guard !isDownloading else { return }
        isDownloading = true
        downloadError = nil
        let (pages, sink) = AsyncStream.makeStream(of: DownloadProgress.self, bufferingPolicy: .bufferingNewest(1))
        let shown = Task { @MainActor [weak self] in
            for await page in pages where page.total > 0 {
                self?.downloadFraction = min(1, Double(page.stored) / Double(page.total))
            }
        }
        do {
            _ = try await desk.roster.download(collection: Guest.collection, scope: desk.event) { sink.yield($0) }
        } catch let error as ClientError {
            downloadError = error.message
        } catch {
            downloadError = ReferenceMessages.incomplete
        }
        sink.finish()
        await shown.value
        // The screen shows the action's result before its buttons come back.
        await reload()
        isDownloading = false
    }

    /// Scans one guest and shows the verdict.
    public func scan(_ guestId: String) async {
        guard !isScanning else { return }
        isScanning = true
        do {
            verdict = ScanVerdict(try await desk.scan(guestId), guestId: guestId)
        } catch let error as ClientError {
            verdict = ScanVerdict(refusal: error, guestId: guestId)
        } catch {
            verdict = ScanVerdict(
                kind: .failed, guestId: guestId, title: "Scan not saved",
                message: "The check-in could not be saved on this device. Scan again.")
        }
        isScanning = false
        await reload()
    }

    /// Reads the screen again from the store and the engine.
    public func reload() async { await updates.reload() }

    /// Keeps the screen current until the calling task is cancelled: `.task { await screen.run() }`.
    public func run() async { await updates.run() }

    private func load() async {
        connection = ConnectionIndicator(await desk.engine.status)
        do {
            let state = try await desk.roster.state(collection: Guest.collection, scope: desk.event)
            roster = state
            switch state {
            case .ready: downloadFraction = 1
            case .incomplete(let stored, let total) where total > 0: downloadFraction = Double(stored) / Double(total)
            case .incomplete, .notDownloaded: if !isDownloading { downloadFraction = nil }
            }
            let count = try await desk.pendingCount()
            pendingCount = count
            largeQueueWarning = AppText.largeQueueWarning(pending: count)
            self.error = nil
        } catch {
            self.error = ClientError.screen(error) ?? self.error
        }
        // A refusal that reached the device after the banner went up replaces a check-in's banner.
        if let shown = verdict, shown.kind == .checkedIn,
            let record = try? await desk.engine.store.record(
                collection: CheckIn.collection, scope: desk.event, recordId: shown.guestId),
            record.syncStatus == .refused, let scan = ScanRecord(record, guest: nil),
            verdict == shown  // Still the banner read: a scan made meanwhile keeps its own.
        {
            verdict = ScanVerdict(.refused(scan, reason: CheckInDesk.verdict(of: record)), guestId: shown.guestId, guest: shown.guest)
        }
    }
}

/// The banner a scan puts up.
public struct ScanVerdict: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        /// A new check-in: the guest may go in.
        case checkedIn
        /// Scanned before: the banner says when and by which device.
        case alreadyCheckedIn
        /// The server refused this guest's check-in (a registration cancelled since the roster came).
        case refused
        /// The roster says the registration is cancelled.
        case cancelled
        /// Not on the roster.
        case unknownGuest
        /// The roster has not finished downloading.
        case rosterIncomplete
        /// The device could not save the scan.
        case failed
    }

    public var kind: Kind
    public var guestId: String
    /// The banner's headline, such as "Checked in" or "Registration cancelled".
    public var title: String
    /// The banner's detail, such as "Registration cancelled — refer to organizer".
    public var message: String
    /// The guest's name, note and arrival alert, when the roster has them.
    public var guest: GuestDetails?
    /// The large-queue warning shown with a check-in, when due.
    public var warning: String?

    public init(kind: Kind, guestId: String, title: String, message: String, guest: GuestDetails? = nil, warning: String? = nil) {
        self.kind = kind
        self.guestId = guestId
        self.title = title
        self.message = message
        self.guest = guest
        self.warning = warning
    }

    /// True only when the guest may go in: a new check-in the server has not refused.
    public var admits: Bool { kind == .checkedIn }

    init(_ outcome: ScanOutcome, guestId: String, guest: GuestDetails? = nil) {
        switch outcome {
        case .checkedIn(let scan, let warning):
            self.init(
                kind: .checkedIn, guestId: guestId, title: "Checked in",
                message: scan.guestName.map { "\($0) may go in." } ?? "The guest may go in.", guest: scan.guest ?? guest,
                warning: warning)
        case .alreadyCheckedIn(let scan):
            let time = scan.scannedAt.formatted(date: .omitted, time: .shortened)
            self.init(
                kind: .alreadyCheckedIn, guestId: guestId, title: "Already checked in",
                message: "First scanned at \(time) by \(scan.scannedBy).", guest: scan.guest ?? guest)
        case .refused(let scan, let reason):
            self.init(kind: .refused, guestId: guestId, title: "Check-in refused", message: reason, guest: scan.guest ?? guest)
        }
    }

    init(refusal error: ClientError, guestId: String) {
        switch error.code {
        case .guestCancelled:
            self.init(kind: .cancelled, guestId: guestId, title: "Registration cancelled", message: error.message)
        case .unknownGuest:
            self.init(kind: .unknownGuest, guestId: guestId, title: "Not on the roster", message: error.message)
        case .rosterIncomplete:
            self.init(kind: .rosterIncomplete, guestId: guestId, title: "Roster incomplete", message: error.message)
        default:
            self.init(kind: .failed, guestId: guestId, title: "Scan not saved", message: error.message)
        }
    }
}
