import Foundation
import GRDB
import OutpostClient
import OutpostProtocol
import Testing

@testable import OutpostServer

/// A device whose token expired while it was offline, through real `outpost` processes and a real server.
@Suite("Device login end to end")
struct DeviceLoginTests {
    /// What the CLI says, on stderr, when the server refuses a device's token.
    static let signInLine = "outpost: the token is invalid or expired: sign in again with `outpost device login --token T`"

    /// When a token from `outpost token` expires, as its `exp` claim says.
    static func expiry(of token: String) throws -> Date {
        let parts = token.split(separator: ".")
        var base64 = String(try #require(parts.dropFirst().first))
            .replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        let claims = try JSONSerialization.jsonObject(with: try #require(Data(base64Encoded: base64))) as? [String: Any]
        return Date(timeIntervalSince1970: try #require((claims?["exp"] as? NSNumber)?.doubleValue))
    }

    @Test(
        "records saved offline wait out an expired token, `device sync` says to sign in again, `device login` sends them; another user's token changes nothing"
    )
    func expiredTokenThenLogin() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-login-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("server").path
        let store = root.appendingPathComponent("device/device.sqlite").path
        let port = String(try TestPostgres.freePort())
        func token(user: String = "ana", name: String = "Ana Staff", ttl: String) async throws -> String {
            try await OutpostProcess.run(
                ["token", "--tenant", "acme", "--user", user, "--name", name, "--role", "staff", "--ttl", ttl, "--data-dir", data]
            ).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func device(_ arguments: String...) async throws -> OutpostProcess.Output {
            try await OutpostProcess.run(["device"] + arguments + ["--store", store])
        }

        // Given a device set up with a token that lasts a second, and three records saved while the server is down,
        let shortLived = try await token(ttl: "1s")
        let setup = try await device("init", "--server", "http://127.0.0.1:\(port)", "--token", shortLived, "--device-id", "dev-login")
        #expect(setup.status == 0, "\(setup.stderr)")
        for id in ["a", "b", "c"] {
            let put = try await device("put", "notes", id, "n=1")
            #expect(put.status == 0 && put.stdout.contains("pending sync"), "\(put.stdout) \(put.stderr)")
        }
        // and a token that has expired by the time the server is back (a wait of at most a second or so),
        let wait = try Self.expiry(of: shortLived).timeIntervalSinceNow + 0.2
        try #require(wait < 3, "the one-second token expires in \(wait) s")
        if wait > 0 { try await Task.sleep(for: .milliseconds(Int(wait * 1000))) }
        let server = try await OutpostProcess.start(["serve", "--port", port, "--data-dir", data])
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)

        // when the device syncs, it fails, says to sign in again, and keeps every record queued;
        let refused = try await device("sync")
        #expect(refused.status == 1)
        #expect(refused.stdout.contains("0 synced, 3 failed: The token is invalid or expired: sign in again"), "\(refused.stdout)")
        #expect(refused.stderr == Self.signInLine + "\n")
        let failed = try await device("records", "--failed")
        #expect(failed.stdout.components(separatedBy: "The token is invalid or expired: sign in again").count == 4, "\(failed.stdout)")
        let status = try await device("status")
        #expect(status.stdout.contains("failed:   3"), "\(status.stdout)")
        #expect(status.stderr == Self.signInLine + "\n")

        // a login with another user's token, or with something that is not a token, is refused in one line and
        // changes nothing;
        for bad in [try await token(user: "bob", name: "Bob", ttl: "1h"), "not-a-token"] {
            let login = try await device("login", "--token", bad)
            #expect(login.status != 0)
            #expect(login.stderr.split(separator: "\n").count == 1 && login.stderr.hasPrefix("outpost: "), "\(login.stderr)")
            #expect(login.stdout.isEmpty)
        }
        let stillRefused = try await device("sync")
        #expect(stillRefused.status == 1 && stillRefused.stderr == Self.signInLine + "\n")

        // and `device login` with a fresh token of the same user sends the three records.
        let login = try await device("login", "--token", try await token(ttl: "1h"))
        #expect(login.status == 0, "\(login.stderr)")
        #expect(login.stdout == "signed in as Ana Staff; 3 records synced\n")
        #expect(login.stderr.isEmpty)
        #expect(try await device("records", "--pending").stdout.contains("no records"))
        #expect(try await device("records", "--failed").stdout.contains("no records"))
        let pool = try DatabasePool(path: data + "/" + SQLiteStorage.databaseFileName)
        let stored = try await pool.read { db in
            try String.fetchAll(db, sql: "SELECT record_id FROM records WHERE collection = 'notes' ORDER BY change_seq")
        }
        #expect(stored == ["a", "b", "c"])

        // Signed in while the server is down, a device says its records wait.
        #expect(await server.stop() == 0)
        #expect(try await device("put", "notes", "d", "n=1").stdout.contains("pending sync"))
        let offline = try await device("login", "--token", try await token(ttl: "1h"))
        #expect(offline.status == 0, "\(offline.stderr)")
        #expect(offline.stdout == "signed in as Ana Staff; the server could not be reached, 1 record waits to sync\n")
    }
}
