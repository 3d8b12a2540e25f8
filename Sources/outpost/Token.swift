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

    @Option(help: "staff, supervisor, organizer or admin.")
    var role: Role

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
        let identity = Identity(tenant: tenant, userId: user, role: role, name: name ?? user, device: device)
        print(try await authority.token(for: identity, lifetime: ttl.duration, now: Date()))
    }
}

extension Role: ExpressibleByArgument {}
extension DurationArgument: @unchecked Sendable {}
