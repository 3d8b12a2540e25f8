import ArgumentParser
import Foundation
import OutpostProtocol
import OutpostServer

/// `serve`'s bearer tokens: the server's own (HS256, `$OUTPOST_JWT_SECRET`), or those of the organization's
/// identity provider, verified against its published keys.
struct IdentityOptions: ParsableArguments {
    @Option(
        name: .customLong("jwks-url"),
        help: ArgumentHelp(
            "The identity provider's JSON Web Key Set (https, or http on loopback); its tokens replace the server's own (default $OUTPOST_JWKS_URL).",
            valueName: "url"))
    var jwksURL: String?

    @Option(name: .customLong("jwks"), help: ArgumentHelp("The identity provider's JSON Web Key Set, from a file.", valueName: "file"))
    var jwksFile: String?

    @Option(help: "The `iss` every provider token must carry (default $OUTPOST_JWT_ISSUER).")
    var issuer: String?

    @Option(help: "A value `aud` must carry (default $OUTPOST_JWT_AUDIENCE).")
    var audience: String?

    @Option(name: .customLong("tenant-claim"), help: "Where the tenant is in a provider token, as a dotted path such as app_metadata.tenant.")
    var tenantClaim = "tenant"

    @Option(help: "One tenant for every provider token, for a provider that serves one organization.")
    var tenant: String?

    @Option(name: .customLong("user-claim"), help: "Where the user id is in a provider token.")
    var userClaim = "sub"

    @Option(name: .customLong("role-claim"), help: "Where the role (staff, supervisor, organizer, admin) is in a provider token.")
    var roleClaim = "role"

    @Option(name: .customLong("default-role"), help: "The role of a provider token without one (default: such tokens are refused).")
    var defaultRole: Role?

    @Option(name: .customLong("name-claim"), help: "Where the display name is in a provider token.")
    var nameClaim = "name"

    @Option(name: .customLong("max-token-lifetime"), help: "The longest token lifetime accepted (exp less iat), such as 12h or 30d.")
    var maxTokenLifetime = DurationArgument(argument: "30d")!

    var rules: TokenRules { TokenRules(maxLifetime: maxTokenLifetime.duration) }

    /// The identity provider these options name, or nil for the server's own tokens.
    func provider(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> IdentityProviderConfiguration? {
        let url = jwksURL ?? environment["OUTPOST_JWKS_URL"].flatMap { $0.isEmpty ? nil : $0 }
        let keys: IdentityProviderConfiguration.Keys
        switch (url, jwksFile) {
        case (nil, nil): return nil
        case (.some, .some): throw ValidationError("give --jwks-url or --jwks, not both")
        case (nil, .some(let file)): keys = .file(file)
        case (.some(let text), nil):
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty,
                scheme == "https" || (scheme == "http" && ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host))
            else {
                throw ValidationError("--jwks-url must be an https URL (http only on loopback): the keys decide who may sign in")
            }
            keys = .url(url)
        }
        guard let issuer = issuer ?? environment["OUTPOST_JWT_ISSUER"], !issuer.isEmpty else {
            throw ValidationError("--issuer (or $OUTPOST_JWT_ISSUER) is required with an identity provider")
        }
        guard let audience = audience ?? environment["OUTPOST_JWT_AUDIENCE"], !audience.isEmpty else {
            throw ValidationError("--audience (or $OUTPOST_JWT_AUDIENCE) is required with an identity provider")
        }
        if let tenant, !Identifier.isValid(tenant) { throw ValidationError("--tenant must be an identifier") }
        return IdentityProviderConfiguration(
            keys: keys, issuer: issuer, audience: audience, tenantClaim: tenantClaim, tenant: tenant, userClaim: userClaim,
            roleClaim: roleClaim, defaultRole: defaultRole, nameClaim: nameClaim)
    }
}
