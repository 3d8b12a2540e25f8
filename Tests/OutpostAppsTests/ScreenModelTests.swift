import Clocks
import Foundation
import GRDB
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostRecords
import OutpostTesting
import Testing

/// The field apps' screens as a SwiftUI view sees them: what each model shows after each user action and each
/// network change, on an in-memory server with injected clocks.
@MainActor
@Suite("Screen models")
struct ScreenModelTests {
    static let utc = TimeZone(identifier: "UTC")!
    static let office = LocationFix(latitude: 51.5072, longitude: -0.1276, accuracy: 8)

    /// A test device whose pushes go through ``HeldPushes``, which the test holds and releases.
    func withHeldPushes(
        online: Bool = false, server: InMemoryServer = InMemoryServer(), chunkSize: Int = 50,
        _ body: (TestDevice, HeldPushes) async throws -> Void
    ) async throws {
        var held: HeldPushes?
        try await withTestDevice(
            online: online, server: server,
            transport: { inner in
                let transport = HeldPushes(inner)
                held = transport
                return transport
            }, chunkSize: chunkSize
        ) { device async throws in
            try await body(device, try #require(held))
        }
    }

    // MARK: Attendance

    @Test("check-in offline answers at once: Checked In, pending badge read out, offline indicator with its count")
    func attendanceOffline() async throws {
        try await withTestDevice { device async throws in
            let screen = AttendanceScreen(
                log: AttendanceLog(engine: device.engine, userId: "ana", location: TestLocation(Self.office), timeZone: Self.utc))
            await screen.reload()
            #expect(screen.stateText == "Not checked in")
            #expect(screen.canCheckIn && !screen.canCheckOut)
            #expect(screen.connection.isOffline)
            #expect(screen.connection.text == "Offline — nothing waiting to sync")

            await screen.checkIn()
            #expect(screen.stateText == "Checked In at 09:00")
            #expect(!screen.canCheckIn && screen.canCheckOut)
            #expect(screen.state.isPendingSync)
            #expect(screen.history.map(\.title) == ["Checked In"])
            #expect(screen.history[0].badge.accessibilityLabel == "Record pending synchronization")
            #expect(screen.history[0].badge.systemImage == "icloud.and.arrow.up")
            #expect(screen.history[0].isOfflineEntry)
            #expect(screen.connection.waitingCount == 1)
            #expect(screen.connection.text == "1 record waiting to sync")

            device.now.advance(seconds: 8 * 3600)
            await screen.checkOut()
            #expect(screen.stateText == "Checked Out at 17:00")
            #expect(!screen.canCheckIn && !screen.canCheckOut)
            #expect(screen.connection.text == "2 records waiting to sync")
        }
    }

    @Test("while an action looks for a fix, both buttons are busy and a second press does nothing")
    func attendanceBusy() async throws {
        try await withTestDevice { device async throws in
            let location = TestLocation(Self.office)
            let screen = AttendanceScreen(
                log: AttendanceLog(engine: device.engine, userId: "ana", location: location, timeZone: Self.utc))
            await screen.reload()
            location.hold()
            let press = Task { await screen.checkIn() }
            try await next(location.arrivals, "the check-in asking for a fix")
            #expect(screen.isBusy)
            #expect(!screen.canCheckIn && !screen.canCheckOut)
            await screen.checkIn()  // ignored: one is running
            location.release()
            await press.value
            #expect(!screen.isBusy)
            #expect(try await device.store.records(collection: Attendance.collection).count == 1)
        }
    }

    @Test("the GPS error stays through reloads and network changes until an action finds a fix")
    func attendanceNoFix() async throws {
        try await withTestDevice { device async throws in
            let location = TestLocation(nil)
            let screen = AttendanceScreen(
                log: AttendanceLog(engine: device.engine, userId: "ana", location: location, timeZone: Self.utc))
            await screen.checkIn()
            #expect(screen.locationError == AppText.noLocationFix)
            #expect(screen.stateText == "Not checked in")
            #expect(screen.history.isEmpty)
            await device.setOnline(true)
            await screen.reload()
            #expect(screen.locationError == AppText.noLocationFix)
            #expect(screen.canCheckIn)

            location.set(Self.office)
            await screen.checkIn()
            #expect(screen.locationError == nil)
            #expect(screen.stateText == "Checked In at 09:00")
            // A refusal for another reason, with a fix, says so and leaves no GPS error.
            await screen.checkIn()
            #expect(screen.actionError == "Already checked in today at 09:00.")
            #expect(screen.locationError == nil)
        }
    }

    @Test("run() follows the network: back online, the entry syncs and the badge and indicator change by themselves")
    func attendanceLive() async throws {
        try await withTestDevice { device async throws in
            let screen = AttendanceScreen(
                log: AttendanceLog(engine: device.engine, userId: "ana", location: TestLocation(Self.office), timeZone: Self.utc))
            let running = Task { await screen.run() }
            defer { running.cancel() }
            await screen.checkIn()
            #expect(screen.history.first?.badge.status == .pending)
            // The connectivity monitor reports the network; nothing calls the screen.
            device.transport.isOnline = true
            await device.engine.setOnline(true)
            try await eventually("the entry shown synced") {
                screen.history.first?.badge.accessibilityLabel == "Record synchronized"
                    && screen.connection.text == "All records synced"
            }
            #expect(screen.history[0].badge.systemImage == "checkmark.icloud")
            #expect(!screen.state.isPendingSync)
            #expect(!screen.connection.isOffline)
        }
    }

    @Test("a check-in with a photo shows it on its row; the row is synced only once the photo and the check-in are up")
    func attendancePhoto() async throws {
        try await withTestDevice { device async throws in
            let screen = AttendanceScreen(
                log: AttendanceLog(engine: device.engine, userId: "ana", location: TestLocation(Self.office), timeZone: Self.utc))
            let sheet = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
            await screen.checkIn(photo: Attachment(data: sheet, type: "image/jpeg", name: "sheet.jpg"))
            #expect(screen.stateText == "Checked In at 09:00")
            #expect(screen.history.map(\.photoText) == ["Photo sheet.jpg"])
            #expect(screen.history[0].badge.status == .pending)
            let photo = try #require(screen.history[0].entry.photo)
            #expect(try await device.engine.fileState(photo).storedBytes == 300_000)
            await device.setOnline(true)
            _ = try await device.engine.sync(retrying: false)
            await screen.reload()
            #expect(screen.history[0].badge.accessibilityLabel == "Record synchronized")
            #expect(try await device.engine.fileState(photo).isOnServer)
            // A check-out without one has no photo line.
            device.now.advance(seconds: 3600)
            await screen.checkOut()
            #expect(screen.history.map(\.photoText) == [nil, "Photo sheet.jpg"])
        }
    }

    @Test("a screen whose read of the store fails says why with a code, keeps what it showed, and clears it once a read works")
    func attendanceReadError() async throws {
        try await withTestDevice { device async throws in
            let screen = AttendanceScreen(
                log: AttendanceLog(engine: device.engine, userId: "ana", location: TestLocation(Self.office), timeZone: Self.utc))
            await screen.checkIn()
            #expect(screen.history.count == 1 && screen.error == nil)

            // A row this version cannot read.
            let file = try DatabaseQueue(path: device.store.url.path)
            try await file.write { db in try db.execute(sql: "UPDATE records SET sync_status = 'teleported'") }
            await screen.reload()
            #expect(screen.error?.code == .storeCorrupt)
            #expect(screen.history.count == 1)

            try await file.write { db in try db.execute(sql: "UPDATE records SET sync_status = 'pending'") }
            await screen.reload()
            #expect(screen.error == nil)
        }
    }

    @Test("a check-in the server refuses reads refused with the reason, and offers no check-out")
    func attendanceRefused() async throws {
        let refusing = InMemoryServer(rejecting: { mutation in
            mutation.collection == "attendance" ? .init(code: .stateConflict, message: "already checked in on another phone") : nil
        })
        try await withTestDevice(online: true, server: refusing) { device async throws in
            let screen = AttendanceScreen(
                log: AttendanceLog(engine: device.engine, userId: "ana", location: TestLocation(Self.office), timeZone: Self.utc))
            await screen.checkIn()
            await device.delivered()
            await screen.reload()
            #expect(screen.stateText.hasPrefix("Check-in at ") && screen.stateText.hasSuffix(" refused: already checked in on another phone"))
            #expect(!screen.stateText.contains("Checked In"))
            #expect(!screen.canCheckOut)
            #expect(screen.history.first?.badge.status == .refused)
        }
    }

    @Test("run() of a screen opened with entries waiting from an earlier run sends them, with no save and no network change")
    func attendanceReopened() async throws {
        try await withTestDevice { device async throws in
            // Given a check-in saved offline by an earlier run of the app.
            let log = AttendanceLog(engine: device.engine, userId: "ana", location: TestLocation(Self.office), timeZone: Self.utc)
            _ = try await log.checkIn()
            #expect(device.transport.pushCount == 0)

            // When the app opens again with the server reachable, and nothing tells the engine so.
            device.transport.isOnline = true
            let screen = AttendanceScreen(log: log)
            let running = Task { await screen.run() }
            defer { running.cancel() }

            // Then the check-in is sent and the screen shows it synced.
            try await eventually("the waiting entry sent and shown synced") {
                screen.history.first?.badge.status == .synced && screen.connection.text == "All records synced"
            }
            #expect(device.transport.pushCount == 1)
        }
    }

    // MARK: Door

    /// A door whose roster of `count` guests g0… (g1 cancelled) is served by a reference server.
    func withDoor<T>(
        count: Int = 5, online: Bool = false, server: InMemoryServer = InMemoryServer(), pageSize: Int = 500,
        isolation: isolated (any Actor)? = #isolation, _ body: (DoorScreen, TestDevice) async throws -> T
    ) async throws -> T {
        let roster = CheckInDeskTests.roster(count: count)
        return try await withTestDevice(online: online, server: server, transport: { RosterAndServer(roster: roster, server: $0) }) {
            device in
            let data = ReferenceData(
                store: device.store, transport: RosterAndServer(roster: roster, server: device.transport), pageSize: pageSize)
            let desk = CheckInDesk(engine: device.engine, roster: data, event: "gala")
            return try await body(DoorScreen(desk: desk), device)
        }
    }

    @Test("scans wait behind the incomplete gate; the download moves the progress bar to ready")
    func doorGate() async throws {
        try await withDoor(count: 30, online: true, pageSize: 10) { screen, device async throws in
            await screen.reload()
            #expect(!screen.canScan)
            #expect(screen.rosterMessage == ReferenceMessages.incomplete)
            #expect(screen.downloadFraction == nil)
            await screen.scan("g0")
            #expect(screen.verdict?.kind == .rosterIncomplete)
            #expect(screen.verdict?.admits == false)
            #expect(try await device.store.records(collection: CheckIn.collection).isEmpty)

            await screen.downloadRoster()
            #expect(screen.downloadError == nil)
            #expect(screen.roster.isReady)
            #expect(screen.downloadFraction == 1)
            #expect(screen.canScan)
            #expect(screen.rosterMessage.hasPrefix(ReferenceMessages.ready))
        }
    }

    @Test("a download cut by the network shows how far it got and the incomplete gate")
    func doorDownloadOffline() async throws {
        try await withDoor(count: 30, online: true, pageSize: 10) { screen, device async throws in
            device.transport.isOnline = false
            await screen.downloadRoster()
            #expect(screen.downloadError != nil)
            #expect(!screen.canScan)
            #expect(screen.rosterMessage == ReferenceMessages.incomplete)
            device.transport.isOnline = true
            await screen.downloadRoster()
            #expect(screen.canScan)
        }
    }

    @Test("verdict banners: checked in admits; already checked in, cancelled and unknown guests do not")
    func doorVerdicts() async throws {
        try await withDoor(online: true) { screen, device async throws in
            await screen.downloadRoster()
            await device.setOnline(false)

            await screen.scan("g0")
            #expect(screen.verdict?.kind == .checkedIn)
            #expect(screen.verdict?.admits == true)
            #expect(screen.verdict?.title == "Checked in")
            #expect(screen.verdict?.message == "Guest 0 may go in.")
            #expect(screen.pendingCount == 1)
            #expect(screen.largeQueueWarning == nil)

            await screen.scan("g0")
            #expect(screen.verdict?.kind == .alreadyCheckedIn)
            #expect(screen.verdict?.admits == false)
            #expect(screen.verdict?.message.contains("by dev-a") == true)

            await screen.scan("g1")
            #expect(screen.verdict?.kind == .cancelled)
            #expect(screen.verdict?.title == "Registration cancelled")
            #expect(screen.verdict?.message == ReferenceMessages.cancelled)
            #expect(screen.verdict?.admits == false)

            await screen.scan("walk-in")
            #expect(screen.verdict?.kind == .unknownGuest)
            #expect(screen.verdict?.message == ReferenceMessages.notFound)
            #expect(screen.verdict?.admits == false)
            #expect(screen.pendingCount == 1)
        }
    }

    @Test("a check-in the server refuses is shown refused, never checked in")
    func doorRefused() async throws {
        let refusing = InMemoryServer(rejecting: { mutation in
            mutation.recordId == "g3" ? .init(code: .guestCancelled, message: "registration cancelled") : nil
        })
        try await withDoor(online: true, server: refusing) { screen, device async throws in
            await screen.downloadRoster()
            await screen.scan("g3")
            #expect(screen.verdict?.kind == .refused)
            #expect(screen.verdict?.admits == false)
            #expect(screen.verdict?.message == ReferenceMessages.cancelled)
        }
    }

    @Test("a refusal that arrives after the banner replaces the check-in's banner")
    func doorLateRefusal() async throws {
        let refusing = InMemoryServer(rejecting: { mutation in
            mutation.recordId == "g3" ? .init(code: .guestCancelled, message: "registration cancelled") : nil
        })
        try await withDoor(online: true, server: refusing) { screen, device async throws in
            await screen.downloadRoster()
            await device.setOnline(false)
            let running = Task { await screen.run() }
            defer { running.cancel() }
            await screen.scan("g3")
            #expect(screen.verdict?.admits == true)
            device.transport.isOnline = true
            await device.engine.setOnline(true)
            try await eventually("the banner turned to refused, nothing pending") {
                screen.verdict?.kind == .refused && screen.pendingCount == 0
            }
            #expect(screen.verdict?.admits == false)
            #expect(screen.verdict?.message == ReferenceMessages.cancelled)
        }
    }

    @Test("from 500 pending scans the door shows the large-queue warning")
    func doorLargeQueue() async throws {
        try await withDoor(count: 502, online: true) { screen, device async throws in
            await screen.downloadRoster()
            await device.setOnline(false)
            for index in 2..<501 { _ = try await screen.desk.scan("g\(index)") }
            await screen.reload()
            #expect(screen.pendingCount == 499)
            #expect(screen.largeQueueWarning == nil)
            await screen.scan("g501")
            #expect(screen.pendingCount == 500)
            #expect(screen.largeQueueWarning == AppText.largeQueueWarning(pending: 500))
            #expect(screen.verdict?.warning == screen.largeQueueWarning)
        }
    }

    // MARK: Activity form

    @Test("the confirmation follows the network: saved offline; online, syncing then registered")
    func activityConfirmation() async throws {
        try await withHeldPushes { device, pushes async throws in
            let screen = ActivityFormScreen(log: ActivityLog(engine: device.engine), date: CalendarDay("2026-05-01")!)
            screen.type = "workshop"
            screen.duration = "90"
            await screen.save()
            #expect(screen.formError == nil)
            #expect(screen.confirmation == AppText.savedOffline)
            #expect(screen.type.isEmpty && screen.duration.isEmpty)
            #expect(screen.activities.map(\.title) == ["workshop · 2026-05-01 · 90 min"])
            #expect(screen.activities[0].showsOfflineBadge)
            #expect(screen.activities[0].badge.accessibilityLabel == "Record pending synchronization")

            let running = Task { await screen.run() }
            defer { running.cancel() }
            pushes.hold()
            device.transport.isOnline = true
            let cameOnline = Task { await device.engine.setOnline(true) }
            try await next(pushes.arrivals, "the first activity's push")
            screen.type = "visit"
            screen.duration = "30"
            await screen.save()
            // Saved at once, while the network is still busy with the first one.
            #expect(screen.confirmation == "Saved — syncing now")
            pushes.release()
            await cameOnline.value
            try await eventually("the confirmation turned to registered, both shown synced") {
                screen.confirmation == "Activity registered" && screen.activities.count == 2
                    && screen.activities.allSatisfy { !$0.showsOfflineBadge }
            }
        }
    }

    @Test("a form the server would refuse shows why and saves nothing")
    func activityInvalid() async throws {
        try await withTestDevice { device async throws in
            let screen = ActivityFormScreen(log: ActivityLog(engine: device.engine), date: CalendarDay("2026-05-01")!)
            screen.type = "workshop"
            screen.duration = "ninety"
            #expect(screen.canSave)
            await screen.save()
            #expect(screen.formError == "The duration must be a whole number of minutes.")
            screen.duration = "5000"
            await screen.save()
            #expect(screen.formError?.contains("duration") == true)
            #expect(screen.confirmation == nil)
            #expect(screen.type == "workshop")
            #expect(try await device.store.records().isEmpty)
        }
    }

    // MARK: Build archive

    @Test("rows carry status icons and the error under a refused build; Retry is busy while it runs")
    func archiveRows() async throws {
        let refusing = InMemoryServer(rejecting: { mutation in
            mutation.fields["name"] == "Bad" ? .init(code: .invalidFields, message: "no permit attached") : nil
        })
        try await withHeldPushes(online: true, server: refusing) { device, pushes async throws in
            let screen = BuildArchiveScreen(archive: BuildArchive(engine: device.engine))
            // Held, so that the server's answer cannot arrive before the screen says what the save did.
            pushes.hold()
            await screen.save(name: "Bad")
            #expect(screen.saveMessage == "Build \"Bad\" saved; uploading shortly.")
            pushes.release()
            await device.delivered()
            await screen.reload()
            #expect(screen.saveMessage == "Build \"Bad\" saved on this device; the server refused it: no permit attached")
            let bad = try #require(screen.rows.first)
            #expect(bad.statusIcon == "xmark.icloud")
            #expect(bad.statusText == "Refused by the server")
            #expect(bad.errorText == "no permit attached")
            #expect(bad.canRetry)

            await device.setOnline(false)
            await screen.save(name: "Roof")
            #expect(screen.saveMessage == "Build \"Roof\" saved on this device; it will upload when connected.")
            #expect(screen.rows.first?.statusIcon == "icloud.and.arrow.up")
            #expect(screen.rows.first?.statusText == "Waiting to upload")
            #expect(screen.rows.first?.errorText == nil)

            device.transport.isOnline = true
            pushes.hold()
            let retry = Task { await screen.retry(bad.id) }
            try await next(pushes.arrivals, "the retry's push")
            #expect(screen.retrying == [bad.id])
            await screen.retry(bad.id)  // ignored while it runs
            pushes.release()
            await retry.value
            #expect(screen.retrying.isEmpty)
            #expect(screen.alert == ArchiveAlert(title: "Some builds did not upload", message: "0 synced, 0 failed, 1 refused: no permit attached"))
            screen.dismissAlert()
            #expect(screen.alert == nil)
        }
    }

    @Test("a failed upload shows its reason under the build; Sync All shows progress, then a summary alert")
    func archiveSyncAll() async throws {
        try await withHeldPushes(online: false, chunkSize: 1) { device, pushes async throws in
            let screen = BuildArchiveScreen(archive: BuildArchive(engine: device.engine))
            await screen.save(name: "Shed")
            // Offline, a sync fails: the build shows why, under it.
            _ = try await device.engine.sync()
            await screen.reload()
            #expect(screen.rows.first?.statusIcon == "exclamationmark.icloud")
            #expect(screen.rows.first?.statusText == "Upload failed")
            #expect(screen.rows.first?.errorText != nil)
            #expect(screen.rows.first?.badge.accessibilityLabel.hasPrefix("Synchronization failed, will retry") == true)
            for name in ["A", "B"] { await screen.save(name: name) }

            device.transport.isOnline = true
            pushes.hold()
            let syncing = Task { await screen.syncAll() }
            try await next(pushes.arrivals, "Sync All's first push")
            #expect(screen.isSyncingAll)
            #expect(!screen.canSyncAll)
            // From its start, Sync All shows how much there is to send.
            try await eventually("Sync All's start") { screen.progress?.sent == 0 && screen.progress?.total == 3 }
            pushes.release(keepHolding: true)
            try await next(pushes.arrivals, "Sync All's second push")
            try await eventually("the progress of the first build") { screen.progress?.sent == 1 && screen.progress?.total == 3 }
            pushes.release(keepHolding: true)
            try await next(pushes.arrivals, "Sync All's third push")
            try await eventually("the progress of the second build") { screen.progress?.sent == 2 }
            pushes.release()
            await syncing.value
            #expect(!screen.isSyncingAll)
            #expect(screen.progress == nil)
            #expect(screen.alert == ArchiveAlert(title: "Sync complete", message: "3 synced, 0 failed"))
            #expect(screen.rows.map(\.statusIcon) == ["checkmark.icloud", "checkmark.icloud", "checkmark.icloud"])
            #expect(screen.rows.allSatisfy { $0.errorText == nil && !$0.canRetry }, "\(screen.rows)")
        }
    }

    // MARK: 24-hour banner

    @Test("the 24-hour banner: shown past the threshold, not dismissible; Retry is busy, toasts on failure, clears on success")
    func banner() async throws {
        try await withHeldPushes { device, pushes async throws in
            let banner = SyncNoticeBanner(engine: device.engine)
            let log = AttendanceLog(engine: device.engine, userId: "ana", location: TestLocation(Self.office), timeZone: Self.utc)
            try await log.checkIn()
            await banner.reload()
            #expect(!banner.isVisible)

            device.now.advance(seconds: 25 * 3600)
            try await device.engine.refreshPersistentFailureNotice()
            await banner.reload()
            #expect(banner.isVisible)
            #expect(!banner.isDismissible)
            #expect(banner.message == "1 record has not synced for over 24 hours")
            #expect(banner.guidance == PersistentFailureNotice.guidance)
            #expect(banner.retryTitle == "Retry sync")

            // Offline: Retry fails; the banner stays, with a toast.
            await banner.retry()
            #expect(banner.isVisible)
            #expect(!banner.isRetrying)
            #expect(banner.toast?.hasPrefix("Retry failed") == true)
            banner.dismissToast()
            #expect(banner.toast == nil)

            // Online: Retry is busy while it runs, then the banner goes.
            device.transport.isOnline = true
            pushes.hold()
            let retry = Task { await banner.retry() }
            try await next(pushes.arrivals, "the retry's push")
            #expect(banner.isRetrying)
            pushes.release()
            await retry.value
            #expect(!banner.isVisible)
            #expect(banner.toast == nil)
            #expect(!banner.isRetrying)
        }
    }

    @Test("run() shows the banner when the engine raises it, without a call to the banner")
    func bannerLive() async throws {
        try await withTestDevice { device async throws in
            let banner = SyncNoticeBanner(engine: device.engine)
            let running = Task { await banner.run() }
            defer { running.cancel() }
            let log = AttendanceLog(engine: device.engine, userId: "ana", location: TestLocation(Self.office), timeZone: Self.utc)
            try await log.checkIn()
            device.now.advance(seconds: 25 * 3600)
            try await device.engine.refreshPersistentFailureNotice()
            try await eventually("the banner shown") { banner.isVisible }
            device.transport.isOnline = true
            await device.engine.setOnline(true)
            try await device.engine.refreshPersistentFailureNotice()
            try await eventually("the banner cleared") { !banner.isVisible }
        }
    }

    @Test("the connection indicator offers a sign-in while the token is refused, counting what waits for it")
    func signInIndicator() {
        var status = SyncStatus(isOnline: true, pendingCount: 2, failedCount: 1)
        #expect(ConnectionIndicator(status).signInText == nil)
        status.needsSignIn = true
        #expect(ConnectionIndicator(status).needsSignIn)
        #expect(ConnectionIndicator(status).signInText == "Sign in again to send 3 records")
        status.pendingCount = 0
        status.failedCount = 0
        #expect(ConnectionIndicator(status).signInText == "Sign in again to sync")
    }
}
