import Foundation
import NIOConcurrencyHelpers
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostClient

/// A token renewed before it expires, through the app's provider, so that a device never sends an expired one
/// while the provider can give another.
@Suite("Token expiry")
struct TokenExpiryTests {
    /// A JWT-shaped token whose claims expire at `exp` (seconds since 1970); its signature is not checked here.
    static func token(_ name: String, exp: Int) -> String {
        let claims = #"{"sub":"\#(name)","exp":\#(exp)}"#
        let payload = Data(claims.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return "e30.\(payload).sig"
    }

    /// Gives `fresh` when asked, counting the questions.
    final class Provider: CredentialsProvider, Sendable {
        let fresh: String?
        let asked = NIOLockedValueBox(0)
        init(fresh: String?) { self.fresh = fresh }
        func refreshedToken(after rejected: String) async throws -> String? {
            asked.withLockedValue { $0 += 1 }
            return fresh
        }
    }

    @Test("a token within five minutes of its expiry is renewed before the request; one further off is sent as it is")
    func renewsBeforeExpiry() async throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let expiring = Self.token("ana", exp: 1_800_000_000 + 120)
        let fresh = Self.token("ana", exp: 1_800_000_000 + 12 * 3600)
        let provider = Provider(fresh: fresh)
        let bearer = BearerToken(expiring, credentials: provider, now: { now })
        let sent = try await bearer.authorizing { $0 }
        #expect(sent == fresh)
        #expect(provider.asked.withLockedValue { $0 } == 1)
        // The fresh one is far from expiry: sent as it is, the provider not asked again.
        #expect(try await bearer.authorizing { $0 } == fresh)
        #expect(provider.asked.withLockedValue { $0 } == 1)
    }

    @Test("a provider with nothing to give keeps the expiring token in use, and is not asked again for it")
    func keepsTheExpiringToken() async throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let expiring = Self.token("ana", exp: 1_800_000_000 + 60)
        let provider = Provider(fresh: nil)
        let bearer = BearerToken(expiring, credentials: provider, now: { now })
        #expect(try await bearer.authorizing { $0 } == expiring)
        #expect(try await bearer.authorizing { $0 } == expiring)
        #expect(provider.asked.withLockedValue { $0 } == 1)
        // A token that names no expiry is never renewed ahead.
        let plain = BearerToken("opaque-token", credentials: provider, now: { now })
        #expect(try await plain.authorizing { $0 } == "opaque-token")
        #expect(provider.asked.withLockedValue { $0 } == 1)
    }

    @Test(
        "through the store's credentials a renewal is saved for the next launch, and an expiring token with no renewal is not taken for a refused one"
    )
    func storeCredentials() async throws {
        try await withStore { store, _ in
            let now = Date(timeIntervalSince1970: 1_800_000_000)
            let expiring = Self.token("ana", exp: 1_800_000_000 + 60)
            try await Device.initialize(store: store, server: URL(string: "http://127.0.0.1:9")!, token: expiring, deviceId: "d")
            let declining = BearerToken(expiring, credentials: Device.storedCredentials(store: store, app: Provider(fresh: nil)), now: { now })
            #expect(try await declining.authorizing { $0 } == expiring)
            #expect(try await Device.needsSignIn(store: store) == false)

            let fresh = Self.token("ana", exp: 1_800_000_000 + 12 * 3600)
            let renewing = BearerToken(expiring, credentials: Device.storedCredentials(store: store, app: Provider(fresh: fresh)), now: { now })
            #expect(try await renewing.authorizing { $0 } == fresh)
            #expect(try await store.setting(Device.SettingName.token) == fresh)
        }
    }
}
