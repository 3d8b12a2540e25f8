import ArgumentParser
import Foundation
import OutpostClient
import OutpostProtocol

/// How the commands that save a record tell the person what happened: the save at once, then its delivery.
enum Delivery {
    /// How long a command that saved waits for the server to answer the probe the save started, before it
    /// delivers; past it the record stays as made offline. A save itself never waits on the network.
    static let probeBound = Duration.seconds(1)
    /// How long a command that saved waits for the delivery before it says where the record stands and ends.
    static let wait = Duration.seconds(2)
    /// How long a command waits, as it ends, for the heartbeat its last sync started.
    static let heartbeatWait = Duration.seconds(1)

    /// What a screen that saves nothing does when it opens: asks the server whether it is reachable for at most
    /// ``probeBound`` and, when it is, delivers what waits from earlier for at most ``wait``, so that the screen
    /// then shows where things stand.
    /// What was sent is said in a line of its own, "sent 2 records that were waiting to sync", since the outbox
    /// goes in order, whatever screen opened it.
    static func resume(_ engine: SyncEngine) async {
        let waiting = (try? await engine.store.outbox.count()) ?? 0
        let answered = await Bounded.run(for: probeBound, clock: ContinuousClock()) { await engine.resume() }
        guard answered, await engine.status.isOnline else { return }
        await engine.awaitDelivery(upTo: wait)
        let left = (try? await engine.store.outbox.count()) ?? waiting
        if waiting > 0, left < waiting {
            let sent = waiting - left
            say(sent == 1 ? "sent 1 record that was waiting to sync" : "sent \(sent) records that were waiting to sync")
        }
        // The command ends its delivery with it: what is still out goes with the next sync.
        if await engine.status.isSyncing, left > 0 {
            say(
                "still sending after \(wait.components.seconds) s; \(left == 1 ? "1 record goes" : "\(left) records go") with the next sync")
        }
    }

    /// What a list screen runs after ``resume(_:)``: brings its records from the server with `pull`, for at
    /// most ``wait``, and says when it could not and why, so that what the device holds is never taken for what
    /// the server has.
    static func refresh(_ engine: SyncEngine, _ pull: @escaping @Sendable () async throws -> Void) async {
        let connection = await engine.status.connection
        let why: String
        switch connection {
        case .online:
            let pulling = Task { (try? await pull()) != nil }
            guard await Bounded.wait(for: pulling, upTo: wait, clock: ContinuousClock()) else {
                pulling.cancel()
                say("not refreshed: the server has not answered within \(wait.components.seconds) s; showing what this device holds")
                return
            }
            if await pulling.value { return }
            why = (await engine.status.lastFailure ?? "the server did not answer").lowercasedFirst
        case .offline: why = "the server cannot be reached"
        case .unknown: why = "the server has not answered within \(probeBound.components.seconds) s"
        case .serverTrouble(let problem): why = "the server is having trouble (\(problem))"
        }
        say("not refreshed: \(why); showing what this device holds")
    }

    /// Where the connection stands after ``resume(_:)``, in words: a probe still unanswered is a server not
    /// answering, not a device offline.
    static func connectionText(_ status: SyncStatus) -> String {
        // A sync this command started ends with it (``resume(_:)`` says what it left): never "syncing".
        var status = status
        status.isSyncing = false
        guard status.connection == .unknown else { return status.connectionText }
        return "not answering: no answer within \(probeBound.components.seconds) s"
    }

    /// Brings the 24-hour notice up to date, and reports what waits too long to the server when it took
    /// records at the last probe. Offline, or with a server in trouble, the report would only wait out its
    /// retries: the next check with a working server makes it.
    static func escalate(_ engine: SyncEngine) async throws {
        if await engine.status.connection == .online {
            _ = try await engine.checkPersistentFailures()
        } else {
            _ = try await engine.refreshPersistentFailureNotice()
        }
    }

    /// Waits at most ``probeBound`` for the server to answer the probe a save started, then, when it is reachable,
    /// delivers what is queued for at most ``wait``.
    ///
    /// - Returns: true when nothing was left running: the delivery ended within ``wait``, or none could start.
    static func deliver(_ engine: SyncEngine) async -> Bool {
        await engine.awaitConnection(upTo: probeBound)
        guard await engine.status.connection.isReachable else { return true }
        await engine.startDelivery()
        return await engine.awaitDelivery(upTo: wait)
    }

    /// The second line after a save: delivers what is queued for at most ``wait``, then says where `record`
    /// stands. Returns the record as it then is.
    ///
    /// A synced record whose write the server answered by keeping an earlier one from another device in its
    /// place (`superseded`) is said so, never "synced".
    ///
    /// - Throws: `ExitCode(1)`, after the line, when the server refused the record: the action did not take.
    @discardableResult
    static func report(_ device: Device, collection: String, scope: String = "", recordId: String) async throws -> LocalRecord? {
        let ended = await deliver(device.engine)
        // The sync may have renamed a record saved under a provisional id.
        let current = await device.engine.currentId(of: recordId, in: collection, scope: scope)
        let record = try await device.store.record(collection: collection, scope: scope, recordId: current)
        let status = await device.engine.status
        if let record {
            if record.syncStatus == .synced,
                await device.engine.wasKeptElsewhere(collection: collection, scope: scope, recordId: recordId)
            {
                say("already recorded on another device first: the server keeps that one")
            } else {
                say(line(record, ended: ended, connection: status.connection, lastFailure: status.lastFailure))
            }
        }
        if record?.syncStatus == .refused { throw ExitCode(1) }
        return record
    }

    /// What a record still pending after ``deliver(_:)`` says: "not synced yet: it stays queued…", with why
    /// when it is known: no server, a server in trouble, or no answer within ``wait``.
    static func stillPending(
        ended: Bool, connection: Connection, lastFailure: String? = nil, notYet: String = "not synced yet",
        next: String = "it stays queued and goes with the next sync"
    ) -> String {
        // An upload whose answer broke off may have reached the server: it is not known to be missing there.
        let reason: String? = if case .serverTrouble(let problem) = connection { problem } else { lastFailure }
        if let reason, reason.lowercasedFirst == TransportError.brokenAnswer, connection.isReachable {
            return "not confirmed yet: \(TransportError.brokenAnswer); the server may have it, and the next sync confirms it"
        }
        if connection == .online, !ended, let lastFailure {
            return "\(notYet): \(lastFailure.lowercasedFirst); \(next)"
        }
        switch connection {
        case .offline: return "\(notYet): the server cannot be reached; \(next)"
        case .unknown: return "\(notYet): the server has not answered within \(probeBound.components.seconds) s; \(next)"
        case .serverTrouble(let problem): return "\(notYet): the server is having trouble (\(problem)); \(next)"
        case .online where ended: return "\(notYet): \(next)"
        case .online: return "\(notYet): the server has not answered within \(wait.components.seconds) s; \(next)"
        }
    }

    /// Where a just-saved record stands, in words, after its delivery ended or was waited on for ``wait``.
    static func line(_ record: LocalRecord, ended: Bool, connection: Connection, lastFailure: String? = nil) -> String {
        switch record.syncStatus {
        case .synced:
            return "synced: the server has it"
        case .refused:
            return "refused by the server: \(record.syncError ?? "no reason given") (see `outpost device records --refused`)"
        case .failed:
            return "not synced: \(record.syncError ?? "unknown error"); it stays queued and goes with the next sync"
        case .pending where record.isAtRelay:
            return "saved at the venue relay, not yet on the server: the relay forwards it when the venue's line is up"
        case .pending:
            return stillPending(ended: ended, connection: connection, lastFailure: lastFailure)
        }
    }

    /// The first line's words the moment a record is saved: whether it goes now, or waits, and for what.
    static func saved(_ connection: Connection) -> String {
        switch connection {
        case .unknown: return "saved on this device"
        case .offline: return "saved offline, pending sync"
        case .serverTrouble: return "saved on this device; the server is having trouble"
        case .online: return "saved, syncing"
        }
    }

    /// A sync's progress, one line each time it moves: "sending 3 records…" as it starts, then `sending` with
    /// the count after each chunk the server answered ("uploading: 1/3"), and why and for how long it waits before
    /// it tries a chunk again.
    static func progressLine(_ progress: SyncProgress, sending: String) -> String {
        if let retrying = progress.retrying {
            let reason = retrying.reason.lowercasedFirst
            return "not sent yet: \(reason); trying again in \(retrying.wait.components.seconds) s"
        }
        if progress.chunk == 0 {
            return progress.total == 1 ? "sending 1 record…" : "sending \(progress.total) records…"
        }
        return "\(sending): \(progress.sent)/\(progress.total)"
    }

    /// The offline indicator with its count: "Offline · 3 records waiting to sync".
    static func indicator(_ status: SyncStatus) -> String {
        let waiting = status.pendingCount + status.failedCount
        let connection: String
        switch status.connection {
        case .online: connection = "Online · "
        case .offline: connection = "Offline · "
        case .serverTrouble(let problem): connection = "Online, the server is having trouble (\(problem)) · "
        case .unknown: connection = "Server not answering · "
        }
        var text =
            connection
            + (waiting == 0 ? "nothing waiting to sync" : waiting == 1 ? "1 record waiting to sync" : "\(waiting) records waiting to sync")
        if let refused = status.refusedText { text += "; " + refused }
        return text
    }

    /// The lines of the 24-hour notice, when it is up: every screen shows it, since it cannot be dismissed.
    /// The engine keeps the notice current (on opening, after each sync, on a discard), so it is read as is.
    static func noticeLines(_ engine: SyncEngine) async -> [String] {
        var lines: [String] = []
        let status = await engine.status
        if let notice = status.persistentFailureNotice {
            lines.append("notice: \(notice.message) [\(PersistentFailureNotice.actionTitle): outpost device notice --retry]")
            lines += PersistentFailureNotice.guidance.map { "    \($0)" }
            if let error = notice.retryError { lines.append("    \(error)") }
        } else if let refused = status.refusedText {
            lines.append("attention: \(refused) (outpost device records --refused)")
        }
        return lines
    }

    /// Prints ``noticeLines(_:)``.
    static func showNotice(_ engine: SyncEngine) async {
        for line in await noticeLines(engine) { say(line) }
    }
}

extension String {
    /// The text with its first letter in lower case, to follow a colon: "The server…" → "the server…".
    var lowercasedFirst: String { prefix(1).lowercased() + dropFirst() }
}
