import Foundation
import OutpostProtocol
import Testing

/// A full day through a real `outpost serve` process, every app and route a person touches, then a scan
/// of everything the server logged for the values it must never write down.
@Suite("Log secrets")
struct LogSecretsTests {
    @Test("the server's logs of a full run hold no token, no payload value, no personal data and no device id", .requires(.curl))
    func scanLogs() async throws {
        let session = try AppSession()
        try await session.startServer()
        let staffToken = try await session.token(user: "anastasia")
        let organizerToken = try await session.token(user: "olgaorganizer", role: "organizer")
        let organizer = ["OUTPOST_SERVER": session.url, "OUTPOST_TOKEN": organizerToken]

        // Personal data in the roster, and a walk-in with a name and e-mail no log line could hold by chance.
        let csv = session.root.appendingPathComponent("roster.csv").path
        #expect(try await OutpostProcess.run(["roster", "generate", "--guests", "40", "--output", csv]).status == 0)
        #expect(try await OutpostProcess.run(["roster", "import", "--event", "gala", csv], environment: organizer).status == 0)
        let added = try await OutpostProcess.run(
            ["roster", "add", "--event", "gala", "guest_id=walkin-zq", "name=Zelda Quixotesecret", "email=zelda.quixote@example.org"],
            environment: organizer)
        #expect(added.status == 0, "\(added.stderr)")

        // Every field app, with values to look for.
        let door = try await session.device("door-7f3k", user: "anastasia")
        #expect(try await door(["event", "open", "gala"]).status == 0)
        #expect(try await door(["event", "find", "Zelda"]).stdout.contains("walkin-zq"))
        #expect(try await door(["event", "scan", "walkin-zq"]).status == 0)
        #expect(try await door(["attendance", "check-in", "--lat", "48.858844", "--lon", "2.294351"]).status == 0)
        #expect(
            try await door([
                "activity", "register", "--type", "home-visit", "--date", "2026-11-20", "--duration", "45", "--notes", "confided-about-xylophone",
            ]).status == 0)
        #expect(try await door(["builds", "save", "--name", "build-nebula-quartz", "site=harbour-quay-9"]).status == 0)
        #expect(try await door(["device", "put", "notes", "note-1", "text=payload-secret-4471"]).status == 0)
        #expect(try await door(["device", "sync"]).status == 0)

        // The monitor, through a sign-in link (a code in the address), its form and its cookie, and bad tokens.
        let jar = session.root.appendingPathComponent("cookies").path
        let issued = try await Tool.run(
            "curl", ["-s", "-X", "POST", "-H", "Authorization: Bearer \(organizerToken)", session.url + "/v1/sign-in-codes"])
        let code = try JSONDecoder().decode(SignInCode.self, from: Data(issued.output.utf8))
        let question = try await Tool.run("curl", ["-s", "-c", jar, session.url + code.path])
        let csrf = try #require(question.output.range(of: #"name="csrf" value=""#).map { question.output[$0.upperBound...].prefix { $0 != "\"" } })
        let signedIn = try await Tool.run(
            "curl",
            [
                "-s", "-o", "/dev/null", "-w", "%{http_code}", "-b", jar, "-c", jar, "-H", "Origin: \(session.url)",
                "-d", "csrf=\(csrf)&code=\(code.code)", session.url + "/admin/session",
            ])
        #expect(signedIn.output == "303")
        let page = try await Tool.run(
            "curl", ["-s", "-b", session.root.appendingPathComponent("cookies").path, session.url + "/admin/monitor?event=gala"])
        #expect(page.output.contains("Anastasia"))
        let forged = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJmb3JnZWQtc2VjcmV0In0.Zm9yZ2VkLXNpZ25hdHVyZQ"
        let refused = try await Tool.run(
            "curl", ["-s", "-H", "Authorization: Bearer \(forged)", session.url + "/v1/pull?collection=notes"])
        #expect(refused.output.contains("\"error\""))
        let badPush = try await Tool.run(
            "curl",
            [
                "-s", "-H", "Authorization: Bearer \(staffToken)", "-H", "Content-Type: application/json",
                "-d",
                #"{"deviceId":"door-7f3k","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","fields":{"a":"payload-in-bad-request-8812"},"clientTimestamp":"not-a-time"}]}"#,
                session.url + "/v1/push",
            ])
        #expect(badPush.output.contains("invalid_json"))

        let logs = await session.stopServer()
        #expect(logs.contains("\"path\":\"/v1/push\""), "the server logged no requests: \(logs.prefix(500))")
        let secrets = [
            staffToken, organizerToken, forged, String(organizerToken.split(separator: ".").last ?? ""),
            "Zelda", "Quixotesecret", "zelda.quixote@example.org", "Anastasia", "anastasia",
            "48.858844", "2.294351", "confided-about-xylophone", "build-nebula-quartz", "harbour-quay-9",
            "payload-secret-4471", "payload-in-bad-request-8812", "door-7f3k", "token=", code.code, String(csrf), "code=",
        ]
        for secret in secrets {
            #expect(!logs.contains(secret), "the server's log holds '\(secret)'")
        }
    }
}
