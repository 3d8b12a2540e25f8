import Foundation
import Observation
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// The attendance home screen, for SwiftUI to bind to: today's state, the Check-In and Check-Out buttons, the
/// offline indicator, the history with its badges, and the GPS error.
///
/// Actions answer as soon as the record is saved on the device; delivery runs after them. ``run()`` keeps the
/// screen current while it is shown (`.task { await screen.run() }`).
@MainActor
@Observable
public final class AttendanceScreen {
    public let log: AttendanceLog

    /// Today's state: "Not checked in", "Checked In" or "Checked Out".
    public private(set) var state = AttendanceState(latest: nil)
    /// This user's check-ins and check-outs, newest first.
    public private(set) var history: [AttendanceRow] = []
    public private(set) var connection = ConnectionIndicator(SyncStatus())
    /// True while an action looks for a fix and saves: both buttons show it and are disabled.
    public private(set) var isBusy = false
    /// "GPS signal required. Please move to an open area." after an action found no fix; it stays until an
    /// action finds one.
    public private(set) var locationError: String?
    /// Why the last action was refused for another reason than the fix, such as "Already checked in today at 09:12."
    public private(set) var actionError: String?
    /// Why the screen could not be read from the device store, with a code a screen can act on (`disk_full`,
    /// `cannot_decrypt`, `store_corrupt`); the screen keeps what it showed last. Nil once a read succeeds.
    public private(set) var error: ClientError?

    @ObservationIgnored private lazy var updates = ScreenUpdates(engine: log.engine) { [weak self] in await self?.load() }

    public init(log: AttendanceLog) {
        self.log = log
    }

    public var canCheckIn: Bool { !isBusy && state.action == nil }
    /// A check-in the server refused is no check-in: there is nothing to check out of.
    public var canCheckOut: Bool { !isBusy && state.action == .checkIn && !state.isRefused }
    /// The state's line, with its time: "Checked In at 09:12", or what the server refused and why:
    /// "Check-in at 09:12 refused: already checked in on 2026-11-21".
    public var stateText: String { state.line(clock: log.clock) }

    /// Checks in, with a photo when one was taken (saved with the check-in, uploaded before it).
    public func checkIn(photo: Attachment? = nil) async { await act { try await $0.checkIn(photo: photo) } }
    /// Checks out, with a photo when one was taken.
    public func checkOut(photo: Attachment? = nil) async { await act { try await $0.checkOut(photo: photo) } }

    private func act(_ action: @escaping @Sendable (AttendanceLog) async throws -> AttendanceEntry) async {
        guard !isBusy else { return }
        isBusy = true
        actionError = nil
        do {
            _ = try await action(log)
            locationError = nil
        } catch let error as ClientError where error.code == .noLocationFix {
            locationError = error.message
        } catch let error as ClientError {
            // Any other refusal came after a fix was found.
            locationError = nil
            actionError = error.message
        } catch {
            actionError = "The action could not be saved on this device."
        }
        // The screen shows the action's result before its buttons come back.
        await reload()
        isBusy = false
    }

    /// Reads the screen again from the store and the engine.
    public func reload() async { await updates.reload() }

    /// Keeps the screen current until the calling task is cancelled: `.task { await screen.run() }`.
    public func run() async { await updates.run() }

    private func load() async {
        connection = ConnectionIndicator(await log.engine.status)
        // State and history from one read, so that they never disagree.
        do {
            let entries = try await log.history()
            history = entries.map { AttendanceRow($0, log: log) }
            let today = entries.filter { $0.day == CalendarDay(log.engine.now(), timeZone: log.timeZone) }
            state = AttendanceState(latest: today.first { $0.action == .checkOut } ?? today.first { $0.action == .checkIn })
            self.error = nil
        } catch {
            self.error = ClientError.screen(error) ?? self.error
        }
    }
}

/// One line of the attendance history.
public struct AttendanceRow: Sendable, Hashable, Identifiable {
    public var id: String { entry.recordId }
    public var entry: AttendanceEntry
    /// "Checked In" or "Checked Out".
    public var title: String
    /// "2026-05-01 09:12"
    public var time: String
    /// The badge's symbol and its accessibility label, such as "Record pending synchronization".
    public var badge: SyncBadge
    /// Shown beside an entry made offline.
    public var isOfflineEntry: Bool
    /// "Photo sheet.jpg" for an entry with a photo; its badge says whether the server holds it, with the entry.
    public var photoText: String?

    init(_ entry: AttendanceEntry, log: AttendanceLog) {
        self.entry = entry
        title = entry.action.stateText
        time = "\(entry.day) \(log.clock(entry.time))"
        badge = entry.badge
        isOfflineEntry = entry.isOfflineEntry
        photoText = entry.photo.map { "Photo \($0.name ?? "attached")" }
    }
}
