import ArgumentParser
import Foundation
import Logging
import OutpostProtocol
import OutpostServer

/// `outpost token`: prints a signed bearer token.
struct Token: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a bearer token for a user of a tenant.",
        discussion: "Signs with $OUTPOST_JWT_SECRET, or with the secret kept by the server's storage.")

    @Option(help: "Tenant id.")
    var tenant: String

    @Option(help: "User id (the token subject).")
    var user: String

    @Option(help: "staff, supervisor, organizer or admin; or relay, for a venue relay (with --scope).")
    var role: TokenRole

    @Option(
        name: .customLong("scope"),
        help: "An event the relay serves (repeatable; --role relay only). The relay reads its records and forwards writes in it.")
    var scopes: [String] = []

    @Option(help: "Display name (default: the user id).")
    var name: String?

    @Option(help: "Lifetime, such as 90s, 30m, 12h or 7d; a server refuses one beyond its --max-token-lifetime (30d by default).")
    var ttl: DurationArgument = DurationArgument(argument: "12h")!

    @Option(help: "The one device id the token may speak for (default: any the user owns).")
    var device: String?

    @OptionGroup var storageOptions: StorageOptions

    func validate() throws {
        guard Identifier.isValid(tenant) else { throw ValidationError("--tenant must be an identifier (A-Z a-z 0-9 . _ : @ -)") }
        guard Identifier.isValid(user) else { throw ValidationError("--user must be an identifier (A-Z a-z 0-9 . _ : @ -)") }
        if let name, name.isEmpty || name.count > 200 {
            throw ValidationError("--name must be 1 to 200 characters")
        }
        if let device, !Identifier.isValid(device) {
            throw ValidationError("--device must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        switch role {
        case .relay:
            guard !scopes.isEmpty else { throw ValidationError("a relay token needs at least one --scope") }
            guard scopes.count <= TokenAuthority.maxRelayScopes else {
                throw ValidationError("a relay token names at most \(TokenAuthority.maxRelayScopes) scopes")
            }
            guard scopes.allSatisfy(Identifier.isValid) else {
                throw ValidationError("--scope must be an identifier (A-Z a-z 0-9 . _ : @ -)")
            }
            guard device == nil else { throw ValidationError("a relay token speaks for no one device; leave out --device") }
        case .person:
            guard scopes.isEmpty else { throw ValidationError("--scope is for --role relay only") }
        }
    }

    func run() async throws {
        let secret: [UInt8]
        if let fromEnvironment = try StorageOptions.environmentSecret() {
            secret = fromEnvironment
        } else {
            var logger = Logger.cli("outpost")
            logger.logLevel = .critical
            let storage = try storageOptions.openStorage(logger: logger)
            do {
                secret = try await storage.withRunning { storage in
                    try await storage.migrate()
                    return try await storage.signingSecret(creatingWith: { TokenAuthority.generateSecret() })
                }
            } catch let error as StorageError {
                throw CLIError("cannot read the JWT secret: \(error.message)")
            }
        }
        let authority: TokenAuthority
        do {
            authority = try await TokenAuthority(secret: secret)
        } catch let error as TokenAuthority.Error {
            throw CLIError(error.description)
        }
        let identity =
            switch role {
            case .person(let role): Identity(tenant: tenant, userId: user, role: role, name: name ?? user, device: device)
            case .relay: Identity.relay(tenant: tenant, relayId: user, name: name ?? user, scopes: scopes)
            }
        print(try await authority.token(for: identity, lifetime: ttl.duration, now: Date()))
    }
}

extension Role: ExpressibleByArgument {}

/// What `outpost token --role` names: a person's role, or a venue relay.
enum TokenRole: ExpressibleByArgument, Equatable {
    case person(Role)
    case relay

    init?(argument: String) {
        if argument == "relay" {
            self = .relay
        } else if let role = Role(rawValue: argument) {
            self = .person(role)
        } else {
            return nil
        }
    }

    static var allValueStrings: [String] { Role.allCases.map(\.rawValue) + ["relay"] }
}
extension DurationArgument: @unchecked Sendable {}
