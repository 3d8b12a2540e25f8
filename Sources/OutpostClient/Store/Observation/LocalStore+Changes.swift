import Foundation
import GRDB
import NIOConcurrencyHelpers

/// The subscribers to one store's commits in this process.
///
/// Every write transaction of ``LocalStore`` signals it once committed, with the collections whose records it
/// changed, and the records themselves, when it knows them. A subscriber to one collection is woken only by
/// commits that may have changed it. A subscriber's stream keeps at most one waiting signal, so a burst of
/// commits wakes a slow reader once; what they changed adds up until the reader takes it (``take(_:)``).
///
/// GRDB's transaction observers, and `ValueObservation` built on them, cannot stand in: SQLite's update hook
/// reports no change to a `WITHOUT ROWID` table (GRDB's `TransactionObserver` documentation, "Dealing with
/// Undetected Changes"), and `records` is one, keyed by its collection, scope and id.
final class CommitSignal: Sendable {
    private struct Subscriber {
        var continuation: AsyncStream<Void>.Continuation
        /// The collection whose records the subscriber reads; nil for every table.
        var collection: String?
        /// What the commits since the subscriber last took it changed.
        var changed = ChangedRecords.none
    }

    private let subscribers = NIOLockedValueBox<[UUID: Subscriber]>([:])

    /// - Parameters:
    ///   - collections: the collections whose records the commit changed, the only tables it wrote besides the
    ///     outbox; nil when it may have changed anything.
    ///   - records: the records it changed, all of them; nil when it does not name them.
    func signal(changing collections: Set<String>? = nil, records: Set<RecordKey>? = nil) {
        subscribers.withLockedValue { subscribers in
            for (id, subscriber) in subscribers {
                if let collections, let collection = subscriber.collection, !collections.contains(collection) { continue }
                subscribers[id]?.changed.merge(records.map { .records($0) } ?? .unknown)
                subscriber.continuation.yield()
            }
        }
    }

    /// Wakes one subscriber, as if anything had changed: another process may have committed.
    func signalUnknown(to id: UUID) {
        subscribers.withLockedValue { subscribers in
            subscribers[id]?.changed = .unknown
            subscribers[id]?.continuation.yield()
        }
    }

    /// What changed since the subscriber last took it.
    func take(_ id: UUID) -> ChangedRecords {
        subscribers.withLockedValue { subscribers in
            defer { subscribers[id]?.changed = .none }
            return subscribers[id]?.changed ?? .unknown
        }
    }

    func add(_ continuation: AsyncStream<Void>.Continuation, collection: String? = nil) -> UUID {
        let id = UUID()
        subscribers.withLockedValue { $0[id] = Subscriber(continuation: continuation, collection: collection) }
        return id
    }

    func remove(_ id: UUID) {
        _ = subscribers.withLockedValue { $0.removeValue(forKey: id) }
    }
}

extension LocalStore {
    /// An element each time the store may have changed: at once after every commit of this process, and within
    /// `interval` of a commit by another process on the same file (SQLite's `PRAGMA data_version`, read every
    /// `interval` on `clock`).
    ///
    /// Commits close together may be reported as one, and one element comes soon after the call whatever happened,
    /// so that a read made just before it is made again. The sequence ends when its consumer stops iterating.
    public func changes(
        checkingOtherProcessesEvery interval: Duration = .seconds(1), clock: any Clock<Duration> = ContinuousClock()
    ) -> AsyncStream<Void> {
        changes(of: nil, checkingOtherProcessesEvery: interval, clock: clock)
    }

    /// ``changes(checkingOtherProcessesEvery:clock:)`` of the records of `collection` alone (of everything when
    /// nil): this process's commits that changed only other collections' records wake nothing.
    func changes(
        of collection: String?, checkingOtherProcessesEvery interval: Duration, clock: any Clock<Duration>
    ) -> AsyncStream<Void> {
        changesNamingRecords(of: collection, checkingOtherProcessesEvery: interval, clock: clock).stream
    }

    /// ``changes(of:checkingOtherProcessesEvery:clock:)``, with what each element's commits changed: `take` gives
    /// the records they changed, or ``ChangedRecords/unknown``, since it was last called.
    func changesNamingRecords(
        of collection: String?, checkingOtherProcessesEvery interval: Duration, clock: any Clock<Duration>
    ) -> (stream: AsyncStream<Void>, take: @Sendable () -> ChangedRecords) {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let id = commits.add(continuation, collection: collection)
        let watch = Task { [self, commits] in
            var seen = try? await dataVersion()
            // Once the first version is known: a commit by another process between the caller's first read and
            // that version would otherwise go unseen.
            commits.signalUnknown(to: id)
            while !Task.isCancelled {
                do { try await clock.sleep(for: interval) } catch { return }
                let version = try? await dataVersion()
                if version != seen {
                    seen = version
                    commits.signalUnknown(to: id)
                }
            }
        }
        continuation.onTermination = { [commits] _ in
            commits.remove(id)
            watch.cancel()
        }
        return (stream, { [commits] in commits.take(id) })
    }

    /// `query`'s answer now, and again whenever a commit changes it (see ``changes(checkingOtherProcessesEvery:clock:)``).
    ///
    /// The first element is the current answer; later ones come only when the answer differs from the one before.
    /// The sequence throws the first error `query` throws, and ends when its consumer stops iterating.
    ///
    /// The store's tables hold sealed payloads, so GRDB's `ValueObservation` cannot serve here: observe through
    /// this method, or ``observeRecords(_:collection:scope:checkingOtherProcessesEvery:clock:)`` and its siblings.
    public func observe<Value: Sendable & Equatable>(
        checkingOtherProcessesEvery interval: Duration = .seconds(1), clock: any Clock<Duration> = ContinuousClock(),
        _ query: @escaping @Sendable (LocalStore) async throws -> Value
    ) -> AsyncThrowingStream<Value, any Error> {
        let last = NIOLockedValueBox<Value?>(nil)
        return observeChanges(checkingOtherProcessesEvery: interval, clock: clock) { store in
            let value = try await query(store)
            return last.withLockedValue { last in
                guard value != last else { return nil }
                last = value
                return value
            }
        }
    }

    /// The answers of `query` that are not nil: the first read must give one, later reads give nil for "as before".
    func observeChanges<Value: Sendable>(
        of collection: String? = nil, checkingOtherProcessesEvery interval: Duration, clock: any Clock<Duration>,
        _ query: @escaping @Sendable (LocalStore) async throws -> Value?
    ) -> AsyncThrowingStream<Value, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Value.self, bufferingPolicy: .bufferingNewest(1))
        // Subscribed before the first read, so that no commit after it goes unseen.
        let changes = changes(of: collection, checkingOtherProcessesEvery: interval, clock: clock)
        let task = Task { [self] in
            do {
                if let first = try await query(self) { continuation.yield(first) }
                for await _ in changes {
                    if let value = try await query(self) { continuation.yield(value) }
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// The records ``records(_:collection:scope:recordId:)`` lists, now and after every change to them.
    ///
    /// The first list is read before this method returns, on the caller's thread, and waits in the stream.
    ///
    /// After the first list, a commit of this process that changed other collections' records only costs a list
    /// of one collection nothing; any other commit costs it the reading of its rows' plain columns, and the
    /// opening of the records it changed only: the others are shown as they were opened before.
    public func observeRecords(
        _ filter: Filter = .all, collection: String? = nil, scope: String? = nil,
        checkingOtherProcessesEvery interval: Duration = .seconds(1), clock: any Clock<Duration> = ContinuousClock()
    ) -> AsyncThrowingStream<[LocalRecord], any Error> {
        return observeList(
            Selection(filter, collection: collection, scope: scope), checkingOtherProcessesEvery: interval,
            clock: clock
        ) { $0 }
    }

    /// The records `selection` lists, now and after every commit that changes them, each list made into a value
    /// by `transform` (see ``LiveList``).
    func observeList<Value: Sendable>(
        _ selection: Selection, checkingOtherProcessesEvery interval: Duration, clock: any Clock<Duration>,
        _ transform: @escaping @Sendable ([LocalRecord]) throws -> Value
    ) -> AsyncThrowingStream<Value, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Value.self, bufferingPolicy: .bufferingNewest(1))
        // Subscribed before the first read, so that no commit after it goes unseen.
        let (changes, take) = changesNamingRecords(of: selection.collection, checkingOtherProcessesEvery: interval, clock: clock)
        let list = LiveList(selection)
        // The first list is read at once, on the caller's thread, so that a screen's first frame shows it.
        do {
            continuation.yield(try transform(try firstRecords(in: list)))
        } catch {
            continuation.finish(throwing: error)
            return stream
        }
        let task = Task { [self] in
            do {
                for await _ in changes {
                    if let value = try await records(in: list, changed: take()) { continuation.yield(try transform(value)) }
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// One record, now and after every change to it; nil while the device does not hold it.
    public func observeRecord(
        collection: String, scope: String = "", recordId: String,
        checkingOtherProcessesEvery interval: Duration = .seconds(1), clock: any Clock<Duration> = ContinuousClock()
    ) -> AsyncThrowingStream<LocalRecord?, any Error> {
        observe(checkingOtherProcessesEvery: interval, clock: clock) { store in
            try await store.record(collection: collection, scope: scope, recordId: recordId)
        }
    }

    /// The counts ``counts(collection:)`` gives, now and after every change to them.
    public func observeCounts(
        collection: String? = nil,
        checkingOtherProcessesEvery interval: Duration = .seconds(1), clock: any Clock<Duration> = ContinuousClock()
    ) -> AsyncThrowingStream<RecordCounts, any Error> {
        observe(checkingOtherProcessesEvery: interval, clock: clock) { store in
            try await store.counts(collection: collection)
        }
    }

    /// Changes whenever another connection commits (see ``changes(checkingOtherProcessesEvery:clock:)``).
    func dataVersion() async throws -> Int64 {
        try await perform { try await read { db in try Self.dataVersion(db) } }
    }
}
