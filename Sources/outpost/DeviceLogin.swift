import ArgumentParser
import Foundation
import OutpostClient
import OutpostProtocol

/// `outpost device login --token T`: signs a device in again after its token expired, keeping what it queued.
struct DeviceLogin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Sign in again with a new token; what waits to sync stays queued and is sent.",
        discussion: """
            The token must be for the device's tenant and user. Exits non-zero when the token is refused, \
            locally or by the server; a server that cannot be reached leaves the records queued for later.
            """)

    @Option(help: "A new bearer token from `outpost token`, for the same tenant and user.")
    var token: String
    @OptionGroup var options: DeviceStoreOptions

    /// What the CLI says when the server refuses a device's token.
    static let signInAgain = "the token is invalid or expired: sign in again with `outpost device login --token T`"

    func run() async throws {
        guard DeviceUser(token: token) != nil else {
            throw CLIError("that is not an Outpost token (a JWT with tenant, sub and role claims): get one from `outpost token`")
        }
        let user: DeviceUser?
        do {
            // The store is let go before the device opens it again.
            user = try await Device.signIn(store: try options.openStore(), token: token)
        } catch let error as ClientError where error.code == .notConfigured {
            throw CLIError(cliMessage(error))
        }
        let name = user?.name ?? "the new token's user"
        let outcome = try await options.withDevice { try await Self.syncOnce($0) }
        say("signed in as \(name); \(outcome.text)")
        if outcome.refused { throw ExitCode(1) }
    }

    /// One quick sync with the new token: what happened, in words.
    private static func syncOnce(_ device: Device) async throws -> (text: String, refused: Bool) {
        let engine = device.engine
        func waiting() async -> String {
            let status = await engine.status
            let count = status.pendingCount + status.failedCount
            return "\(records(count)) \(count == 1 ? "waits" : "wait") to sync"
        }
        guard await engine.probe(syncingPending: false) else {
            return ("the server could not be reached, \(await waiting())", false)
        }
        let summary = try await engine.sync(retrying: false)
        if summary.requiresSignIn { return ("the server refused this token too, \(await waiting())", true) }
        guard await engine.status.isOnline else {
            return ("the server could not be reached, \(records(summary.synced)) synced, \(await waiting())", false)
        }
        if summary.synced == 0, summary.failed == 0 { return ("nothing waited to sync", false) }
        var text = "\(records(summary.synced)) synced"
        if summary.failed > 0 { text += ", \(summary.failed) failed: " + summary.reasons.joined(separator: "; ") }
        return (text, false)
    }

    private static func records(_ count: Int) -> String { count == 1 ? "1 record" : "\(count) records" }
}

extension TransportError {
    /// The error's words on the command line: a refused device token says how to sign in again here.
    var cliMessage: String { requiresSignIn ? DeviceLogin.signInAgain : message }
}

extension DeviceStoreOptions {
    /// The device store `command` acts on, when it acts on one: every such command holds these options.
    static func of(_ command: any ParsableCommand) -> DeviceStoreOptions? {
        Mirror(reflecting: command).children.lazy
            .compactMap { ($0.value as? OptionGroup<DeviceStoreOptions>)?.wrappedValue }
            .first
    }

    /// Whether the server refused the token of the device store, if there is one, and nothing replaced it since.
    func needsSignIn() async -> Bool {
        guard FileManager.default.fileExists(atPath: url.path), let store = try? openStore() else { return false }
        return (try? await Device.needsSignIn(store: store)) == true
    }
}
