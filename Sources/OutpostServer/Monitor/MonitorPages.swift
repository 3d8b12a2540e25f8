import Foundation
import Mustache
import OutpostProtocol
import OutpostRecords

/// The sync monitor's HTML: Mustache templates shipped with the module, rendered from ``MonitorResponse``.
///
/// Mustache escapes every `{{value}}` (`& < > " '`). The device rows, one per device and a thousand at a
/// large event, are built here instead (`{{{deviceRows}}}`): Mustache reads values by reflection, too slow
/// for a thousand rows. Every text in them goes through ``escape(_:)``, the same five characters Mustache
/// escapes, so nothing a device or an organizer typed can become markup.
package struct MonitorPages: Sendable {
    let library: MustacheLibrary
    let assets: [String: (contentType: String, body: String)]

    package init() throws {
        guard let directory = Bundle.module.url(forResource: "Templates", withExtension: nil) else {
            throw OutpostHTTPError(.internalServerError, .internalError, "the monitor's templates are missing")
        }
        func read(_ name: String) throws -> String {
            try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
        }
        var library = MustacheLibrary()
        for name in ["monitor", "monitor-body", "sign-in"] {
            try library.register(try read("\(name).mustache"), named: name)
        }
        self.library = library
        self.assets = [
            "monitor.css": ("text/css; charset=utf-8", try read("monitor.css")),
            "monitor.js": ("text/javascript; charset=utf-8", try read("monitor.js")),
        ]
    }

    /// The whole page; `csrf` goes into its forms; `notifications` is the shown event's setting.
    func page(
        _ monitor: MonitorResponse, refresh: Duration, csrf: String = "", notifications: EventNotification? = nil,
        notice: String? = nil
    ) -> String {
        var view = View(monitor, refresh: refresh)
        view.csrf = csrf
        view.notifications = notifications.map { NotificationsRow(format: $0.format.rawValue, host: URL(string: $0.url)?.host ?? "") }
        view.notice = notice
        return library.render(view, withTemplate: "monitor") ?? ""
    }

    /// Where the shown event's notifications go: the format and the receiver's host, never the whole URL (a
    /// chat's webhook URL is a credential).
    struct NotificationsRow {
        var format: String
        var host: String
    }

    func body(_ monitor: MonitorResponse, refresh: Duration) -> String {
        library.render(View(monitor, refresh: refresh), withTemplate: "monitor-body") ?? ""
    }

    /// The sign-in form, or with `confirm` the question a sign-in link asks before it signs in.
    func signIn(error: String?, csrf: String, confirm: Confirm? = nil) -> String {
        library.render(SignInView(error: error, csrf: csrf, confirm: confirm), withTemplate: "sign-in") ?? ""
    }

    struct SignInView {
        var error: String?
        /// The form's CSRF token, the same as the `outpost_csrf` cookie set with the page.
        var csrf: String
        var confirm: Confirm?
    }

    /// Whom a sign-in link's code signs in as.
    struct Confirm {
        var code: String
        var tenant: String
        var name: String
        var role: String
    }

    /// What the templates read: stored properties only (Mustache reads them by reflection).
    struct View {
        /// The sign-out form's CSRF token: the session's.
        var csrf = ""
        var notifications: NotificationsRow?
        /// The outcome of the last form, such as "Notifications stopped."
        var notice: String?
        var event: String?
        /// The shown event's name, or its id when it has none.
        var eventName: String?
        var events: [EventOption]
        var generatedAt: String
        var refreshMs: Int64
        var refreshSeconds: Int64
        var empty: Bool
        var emptyMessage: String
        var opsLink: String?
        var hasDevices: Bool
        var deviceCount: Int
        var devices: [DeviceRow]
        var deviceRows: String
        var failures: [FailureRow]
        var refused: [FailureRow]
        var progress: ProgressRow?
        var relay: RelayRow?
        var relays: [VenueRelayRow] = []
        var hasRelays = false

        init(_ monitor: MonitorResponse, refresh: Duration) {
            let now = monitor.generatedAt
            event = monitor.event
            eventName = monitor.event.map { id in monitor.events.first { $0.id == id }?.name ?? id }
            events = monitor.events.map { EventOption(id: $0.id, name: $0.name, selected: $0.id == monitor.event) }
            generatedAt = MonitorPages.clock(now)
            refreshMs = refresh.milliseconds
            refreshSeconds = refresh.components.seconds
            empty = monitor.emptyState != nil
            emptyMessage = monitor.emptyState ?? ""
            opsLink = monitor.opsContact.flatMap(MonitorPages.contactLink)
            hasDevices = !monitor.devices.isEmpty
            deviceCount = monitor.devices.count
            devices = monitor.devices.map { DeviceRow($0, now: now, bucketStart: monitor.bucketStart) }
            deviceRows = devices.map(\.html).joined()
            failures = monitor.persistentFailures.map(FailureRow.init)
            refused = monitor.refusedRecords.map(FailureRow.init)
            progress = monitor.progress.map { ProgressRow($0, eventName: eventName ?? "") }
            relay = monitor.relay.map { RelayRow($0, now: now) }
            relays = monitor.relays.map { VenueRelayRow($0, now: now) }
            hasRelays = !relays.isEmpty
        }
    }

    /// A venue relay on the server's monitor: one row, whatever the devices behind it.
    struct VenueRelayRow {
        var name: String
        var events: String
        var pill: String
        var pillClass: String
        var lastContact: String
        /// "12 writes waiting since 10:02 (4 min ago)", or "nothing waiting".
        var backlog: String
        var lastError: String?

        init(_ relay: MonitorRelay, now: Timestamp) {
            name = relay.name
            events = relay.scopes.joined(separator: ", ")
            switch relay.status {
            case .ok: (pill, pillClass) = ("OK", "ok")
            case .stale: (pill, pillClass) = ("Stale", "stale")
            case .offline: (pill, pillClass) = ("Offline", "offline")
            }
            lastContact = MonitorPages.ago(relay.lastContact, now: now)
            if relay.waiting > 0, let since = relay.oldestWaitingSince {
                let writes = relay.waiting == 1 ? "1 write" : "\(relay.waiting) writes"
                backlog = "\(writes) waiting since \(MonitorPages.clock(since)) (\(MonitorPages.ago(since, now: now)))"
            } else {
                backlog = "nothing waiting"
            }
            lastError = relay.lastError
        }
    }

    /// A venue relay's line to the server, in words.
    struct RelayRow {
        var upstream: String
        /// "12 writes waiting for the server, the oldest since 10:02 (4 min ago)" or "Nothing waiting: the server has every write."
        var backlog: String
        /// "1,204 handed over, 2 refused (each refusal went back to its device); last at 10:01 (just now)"
        var forwarded: String
        /// Why the last forward failed, while the line is down.
        var lastError: String?
        var waiting: Bool

        init(_ line: RelayLine, now: Timestamp) {
            upstream = line.upstream
            waiting = line.waiting > 0
            if let since = line.oldestWaitingSince, line.waiting > 0 {
                let writes = line.waiting == 1 ? "1 write" : "\(line.waiting) writes"
                backlog = "\(writes) waiting for the server, the oldest since \(MonitorPages.clock(since)) (\(MonitorPages.ago(since, now: now)))"
            } else {
                backlog = "Nothing waiting: the server has every write made here."
            }
            let last = line.lastForwardedAt.map { "; last at \(MonitorPages.clock($0)) (\(MonitorPages.ago($0, now: now)))" } ?? ""
            forwarded =
                "\(line.forwarded) handed over, \(line.refused) refused by the server (each refusal went back to its device)\(last)"
            lastError = line.lastError
        }
    }

    /// The event's name and how far its check-in has come.
    struct ProgressRow {
        var eventName: String
        var checkedIn: Int
        var onRoster: Int
        /// "412 of 1000 guests checked in (41 %) · 37 in the last 5 minutes"
        var text: String

        init(_ progress: EventProgress, eventName: String) {
            self.eventName = eventName
            checkedIn = progress.checkedIn
            onRoster = progress.onRoster
            let share = progress.onRoster > 0 ? " (\(progress.checkedIn * 100 / progress.onRoster) %)" : ""
            text = "\(progress.checkedIn) of \(progress.onRoster) guests checked in\(share) · \(progress.lastFiveMinutes) in the last 5 minutes"
        }
    }

    struct EventOption {
        var id: String
        var name: String
        var selected: Bool
    }

    struct DeviceRow {
        var fingerprint: String
        var staffName: String
        var status: String
        var isOk: Bool
        var isStale: Bool
        var isOffline: Bool
        var lastSeen: String
        var lastSeenISO: String
        var lastSeenAgo: String
        var rosterFetch: String
        var pendingCount: Int
        var failedNote: String?
        /// "12.4 MB of files to upload", when the device said any wait.
        var uploadNote: String?
        /// The chart's bars as SVG: numbers only, built here rather than by the template, which is 12× the rows.
        var chartBars: String
        var chartLabel: String

        init(_ device: MonitorDevice, now: Timestamp, bucketStart: Timestamp) {
            fingerprint = device.fingerprint
            staffName = device.staffName
            status = device.status.rawValue
            isOk = device.status == .ok
            isStale = device.status == .stale
            isOffline = device.status == .offline
            lastSeen = MonitorPages.clock(device.lastSeen)
            lastSeenISO = device.lastSeen.iso8601
            lastSeenAgo = MonitorPages.ago(device.lastSeen, now: now)
            rosterFetch = device.lastRosterFetch.map { MonitorPages.clock($0) } ?? "never"
            pendingCount = device.pendingCount
            failedNote =
                [device.failedCount > 0 ? "\(device.failedCount) failed" : nil, device.rejectedCount > 0 ? "\(device.rejectedCount) refused" : nil]
                .compactMap { $0 }.joined(separator: ", ").nilIfEmpty
            uploadNote = (device.pendingUploadBytes ?? 0) > 0 ? "\(MonitorPages.bytes(device.pendingUploadBytes ?? 0)) of files to upload" : nil
            let most = max(device.checkIns.max() ?? 0, 1)
            chartBars = device.checkIns.enumerated().map { index, count in
                let height = count == 0 ? 1 : max(2, Int((Double(count) / Double(most) * 22).rounded()))
                return "<rect x=\"\(index * 8)\" y=\"\(24 - height)\" width=\"6\" height=\"\(height)\"><title>\(count)</title></rect>"
            }.joined()
            chartLabel =
                "Check-ins per 5 minutes over the last hour, oldest first: "
                + device.checkIns.map(String.init).joined(separator: ", ")
        }

        /// The row's `<tr>`, every text escaped.
        var html: String {
            let e = MonitorPages.escape
            // A device not heard from carries the one test id, its state (stale, offline) as an attribute.
            var pill = ""
            if isStale { pill = #"<span class="pill stale" data-testid="sync-monitor-stale-pill" data-state="stale">Stale</span>"# }
            if isOffline { pill = #"<span class="pill offline" data-testid="sync-monitor-stale-pill" data-state="offline">Offline</span>"# }
            if isOk { pill = #"<span class="pill ok">OK</span>"# }
            let failed = failedNote.map { #" <span class="failed">("# + e($0) + ")</span>" } ?? ""
            let uploads =
                uploadNote.map { #"<br><span class="uploads" data-testid="sync-monitor-upload-bytes">"# + e($0) + "</span>" } ?? ""
            var row = #"<tr data-testid="sync-monitor-device-row" data-fingerprint=""# + e(fingerprint)
            row += #"" data-status=""# + e(status) + "\">\n"
            row += #"<td data-label="Device"><code>"# + e(fingerprint) + "</code></td>\n"
            row += #"<td data-label="Staff">"# + e(staffName) + "</td>\n"
            row += #"<td data-label="Last seen">"# + pill + #" <time datetime=""# + e(lastSeenISO) + "\">"
            row += e(lastSeen) + #"</time> <span class="ago">("# + e(lastSeenAgo) + ")</span></td>\n"
            row += #"<td data-label="Roster fetched">"# + e(rosterFetch) + "</td>\n"
            row += #"<td data-label="Pending">"# + String(pendingCount) + failed + uploads + "</td>\n"
            row += #"<td data-label="Check-ins, last hour"><svg class="chart" width="96" height="24" viewBox="0 0 96 24" role="img" aria-label=""#
            row += e(chartLabel) + "\">" + chartBars + "</svg></td>\n</tr>\n"
            return row
        }
    }

    struct FailureRow {
        var fingerprint: String
        var staffName: String
        var collection: String
        var recordId: String
        var firstAttempt: String
        var lastError: String

        init(_ failure: PersistentFailure) {
            fingerprint = failure.fingerprint
            staffName = failure.staffName
            collection = failure.collection
            recordId = failure.recordId
            firstAttempt = MonitorPages.clock(failure.firstAttempt)
            lastError = failure.lastError
        }
    }

    /// Text made safe for HTML content and attribute values: `& < > " '`, as Mustache escapes them.
    static func escape(_ text: String) -> String {
        // Byte by byte: the five characters are ASCII, which UTF-8 never uses inside a longer sequence, and
        // so a quote followed by a combining mark is escaped too. Most texts have none of them.
        let special: (UInt8) -> Bool = { $0 == 0x26 || $0 == 0x3C || $0 == 0x3E || $0 == 0x22 || $0 == 0x27 }
        guard text.utf8.contains(where: special) else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 16)
        for byte in text.utf8 {
            switch byte {
            case 0x26: out.append(contentsOf: "&amp;".utf8)
            case 0x3C: out.append(contentsOf: "&lt;".utf8)
            case 0x3E: out.append(contentsOf: "&gt;".utf8)
            case 0x22: out.append(contentsOf: "&quot;".utf8)
            case 0x27: out.append(contentsOf: "&#39;".utf8)
            default: out.append(byte)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// "2026-11-21 09:12:05 UTC".
    /// A size for people: "640 KB", "12.4 MB".
    static func bytes(_ count: Int64) -> String {
        count < 1_000_000 ? "\(max(count / 1000, 1)) KB" : String(format: "%.1f MB", Double(count) / 1_000_000)
    }

    static func clock(_ time: Timestamp) -> String {
        let iso = time.iso8601
        return "\(iso.prefix(10)) \(iso.dropFirst(11).prefix(8)) UTC"
    }

    /// "just now", "4 min ago", "2 h 5 min ago".
    static func ago(_ time: Timestamp, now: Timestamp) -> String {
        let minutes = max(0, (now.millisecondsSince1970 - time.millisecondsSince1970) / 60_000)
        if minutes < 1 { return "just now" }
        if minutes < 60 { return "\(minutes) min ago" }
        return "\(minutes / 60) h \(minutes % 60) min ago"
    }

    /// A `mailto:`, `tel:` or https link for an ops contact, or nil when it is none of these.
    static func contactLink(_ contact: String) -> String? {
        let text = contact.trimmingCharacters(in: .whitespaces)
        if text.hasPrefix("https://") || text.hasPrefix("mailto:") || text.hasPrefix("tel:") { return text }
        if Guest.isPlausibleEmail(text) {
            return "mailto:\(text)?subject=\("Urgent: sync monitor".addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "Urgent")"
        }
        let digits = text.filter { $0.isNumber || $0 == "+" }
        if digits.count >= 6, text.allSatisfy({ $0.isNumber || " +-().".contains($0) }) { return "tel:\(digits)" }
        return nil
    }
}

extension String {
    /// Nil for an empty text.
    fileprivate var nilIfEmpty: String? { isEmpty ? nil : self }
}
