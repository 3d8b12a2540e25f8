import Foundation
import OutpostApps
import OutpostClient
import OutpostURLSession

// The app of the article "Building the attendance screen" (OutpostApps' documentation), on the SDK's public API
// alone (its target is built without package access): every Swift block of the article but the SwiftUI
// view is code of this file, and `GettingStartedArticleTests` checks that, then runs this app against a real server.

struct OfficeLocation: LocationProvider {
    func currentFix() async -> LocationFix? {
        LocationFix(latitude: 51.5072, longitude: -0.1276, accuracy: 8)
    }
}

@MainActor
final class AttendanceApp {
    let outpost: Outpost
    private(set) var screen: AttendanceScreen?
    private(set) var banner: SyncNoticeBanner?

    private init(outpost: Outpost) {
        self.outpost = outpost
    }

    static func launch(storeFolder: URL, server: URL, identity: some CredentialsProvider) async throws -> AttendanceApp {
        var configuration = Outpost.Configuration.fieldApps(
            location: .perUser(directory: storeFolder), server: server, transport: .urlSession())
        configuration.deviceId = "attendance-phone"
        configuration.appVersion = "attendance-ios/1.0"
        let outpost = try await Outpost(configuration, credentials: identity)
        await outpost.start()
        let app = AttendanceApp(outpost: outpost)
        if await outpost.status.signIn != .signedOut {
            try await app.openScreens()
        }
        return app
    }

    func signIn(token: String) async throws {
        try await outpost.signIn(token: token)
        try await openScreens()
    }

    private func openScreens() async throws {
        screen = try await AttendanceScreen(outpost: outpost, location: OfficeLocation())
        banner = try await SyncNoticeBanner(outpost: outpost)
    }

    func workAt(site: String) async throws {
        try await outpost.setCurrentEvent(site)
    }

    func signOut() async throws {
        try await outpost.signOut(wipe: true)
        screen = nil
        banner = nil
    }
}
