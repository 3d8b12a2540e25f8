import OutpostClient

/// An app's entry for a record that may wait to sync: a list marks those that have waited longer than the
/// escalation threshold, so that each shows as failing on its own row.
protocol WaitingEntry {
    /// The record's id.
    var overdueKey: String { get }
    var overdue: Duration? { get set }
}

extension SyncEngine {
    /// `entries` of `collection` (in `scope` when given), those that have waited to sync longer than the
    /// escalation threshold marked so; unmarked when the store cannot say.
    func markingOverdue<Entry: WaitingEntry>(_ entries: [Entry], collection: String, scope: String? = nil) async -> [Entry] {
        guard let overdue = try? await overdueRecordIds(collection: collection, scope: scope), !overdue.isEmpty else {
            return entries
        }
        let threshold = configuration.escalation.threshold
        return entries.map { entry in
            var entry = entry
            if overdue.contains(entry.overdueKey) { entry.overdue = threshold }
            return entry
        }
    }
}
