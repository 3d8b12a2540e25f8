import Foundation
import Observation
import OutpostClient
import OutpostProtocol
import OutpostRecords

/// The peer mentor's activity form and list, for SwiftUI to bind to.
///
/// Saving answers as soon as the activity is on the device; the confirmation then follows where it stands:
/// "Saved offline — will sync when connected" offline, "Saved — syncing now" while it goes, "Activity
/// registered" once the server has it, or the server's reason.
@MainActor
@Observable
public final class ActivityFormScreen {
    public let log: ActivityLog

    // The form's fields, bound to its controls.
    public var type = ""
    public var date: CalendarDay
    /// Minutes, as typed.
    public var duration = ""
    /// As typed; empty for none.
    public var participants = ""
    public var notes = ""
    /// A decimal amount such as "12.50"; empty for none.
    public var travelExpense = ""

    public private(set) var isSaving = false
    /// Why the form was not saved, such as "duration_minutes must be 1 to 1440"; nothing was written then.
    public private(set) var formError: String?
    /// Why the screen could not be read from the device store, with a code a screen can act on (`disk_full`,
    /// `cannot_decrypt`, `store_corrupt`); the screen keeps what it showed last. Nil once a read succeeds.
    public private(set) var error: ClientError?
    /// The confirmation of the last save, kept current as its delivery goes on.
    public private(set) var confirmation: String?
    /// The activities on this device, newest first.
    public private(set) var activities: [ActivityRow] = []
    public private(set) var connection = ConnectionIndicator(SyncStatus())

    @ObservationIgnored private var lastSave: ActivitySave?
    @ObservationIgnored private lazy var updates = ScreenUpdates(engine: log.engine) { [weak self] in await self?.load() }

    public init(log: ActivityLog, date: CalendarDay) {
        self.log = log
        self.date = date
    }

    public var canSave: Bool { !isSaving && !type.isEmpty && !duration.isEmpty }

    /// Registers the activity the form holds; a saved form is cleared for the next one.
    public func save() async {
        guard !isSaving else { return }
        guard let minutes = Int64(duration.trimmingCharacters(in: .whitespaces)) else {
            formError = "The duration must be a whole number of minutes."
            return
        }
        let count = participants.trimmingCharacters(in: .whitespaces)
        guard count.isEmpty || Int64(count) != nil else {
            formError = "The number of participants must be a whole number."
            return
        }
        isSaving = true
        formError = nil
        let draft = ActivityDraft(
            type: type, date: date, durationMinutes: minutes, participants: count.isEmpty ? nil : Int64(count),
            notes: notes.isEmpty ? nil : notes, travelExpense: travelExpense.isEmpty ? nil : travelExpense)
        do {
            let saved = try await log.register(draft)
            lastSave = saved
            confirmation = saved.confirmation
            type = ""
            duration = ""
            participants = ""
            notes = ""
            travelExpense = ""
        } catch let error as ClientError {
            formError = error.message
        } catch {
            formError = "The activity could not be saved on this device."
        }
        // The screen shows the action's result before its buttons come back.
        await reload()
        isSaving = false
    }

    /// Reads the screen again from the store and the engine.
    public func reload() async { await updates.reload() }

    /// Keeps the screen current until the calling task is cancelled: `.task { await screen.run() }`.
    public func run() async { await updates.run() }

    private func load() async {
        connection = ConnectionIndicator(await log.engine.status)
        if let lastSave, let now = try? await log.current(lastSave),
            self.lastSave?.activity.recordId == lastSave.activity.recordId  // Not replaced by a save meanwhile.
        {
            self.lastSave = now
            confirmation = now.confirmation
        }
        do {
            activities = try await log.list().map(ActivityRow.init)
            self.error = nil
        } catch {
            self.error = ClientError.screen(error) ?? self.error
        }
    }
}

/// One activity in the list.
public struct ActivityRow: Sendable, Hashable, Identifiable {
    public var id: String { entry.recordId }
    public var entry: ActivityEntry
    /// "Workshop · 2026-05-01 · 90 min"
    public var title: String
    public var badge: SyncBadge
    /// The offline badge: shown until the server has the activity.
    public var showsOfflineBadge: Bool

    init(_ entry: ActivityEntry) {
        self.entry = entry
        var parts = [entry.type, entry.date]
        if let minutes = entry.durationMinutes { parts.append("\(minutes) min") }
        title = parts.joined(separator: " · ")
        badge = entry.badge
        showsOfflineBadge = entry.syncStatus != .synced
    }
}
