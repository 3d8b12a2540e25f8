import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOHTTP1
import OutpostClient
import OutpostProtocol

/// `outpost connector …`: an organizer's connectors, which deliver a collection's changes to a URL outside.
struct ConnectorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "connector",
        abstract: "Deliver a collection's changes, in order and signed, to a URL (organizer token).",
        subcommands: [
            ConnectorAdd.self, ConnectorList.self, ConnectorPause.self, ConnectorResume.self, ConnectorRemove.self,
            ConnectorReplay.self,
        ])
}

struct ConnectorAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "add", abstract: "Start delivering a collection to a URL.")

    @Option(help: "The collection, such as builds or checkins.")
    var collection: String
    @Option(help: "The receiver: https (http only to this machine).")
    var url: String
    @Option(help: "Only this scope (an event id, say); every scope when left out.")
    var scope: String?
    @Option(help: "The key batches are signed with (16 to 256 characters); the server makes one when left out.")
    var secret: String?
    @Option(help: "json (the default: the batch) or slack (an incoming webhook's message).")
    var format: String = "json"
    @OptionGroup var connection: ConnectionOptions

    func validate() throws {
        guard ["json", "slack"].contains(format) else { throw ValidationError("--format is json or slack") }
        if let scope { _ = try checkedEvent(scope) }
    }

    func run() async throws {
        var body: [String: String] = ["collection": collection, "url": url, "format": format]
        body["scope"] = scope
        body["secret"] = secret
        let status = try await connection.withTransport { transport in
            try JSONDecoder().decode(
                ConnectorStatus.self,
                from: try await transport.exchange(.POST, path: "/v1/connectors", body: try JSONEncoder().encode(body)))
        }
        say("connector \(status.id) delivers \(status.collection)\(status.scope.map { " (\($0))" } ?? "") to \(status.host)")
        if let secret = status.secret {
            say("secret (shown once; give it to the receiver to check each batch's Outpost-Signature): \(secret)")
        }
    }
}

struct ConnectorList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the tenant's connectors and where each has got to.")

    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        let connectors = try await connection.withTransport { transport in
            try JSONDecoder().decode([ConnectorStatus].self, from: try await transport.exchange(.GET, path: "/v1/connectors"))
        }
        guard !connectors.isEmpty else {
            say("no connectors")
            return
        }
        for connector in connectors {
            say(ConnectorList.line(connector))
        }
    }

    /// One connector: what it delivers, where, its state, and how far it has got.
    static func line(_ connector: ConnectorStatus) -> String {
        var line = "\(connector.id)  \(connector.collection)\(connector.scope.map { " (\($0))" } ?? "")  → \(connector.host)  \(connector.state)"
        line +=
            "  \(connector.deliveredChanges) change\(connector.deliveredChanges == 1 ? "" : "s") in \(connector.delivered) batch\(connector.delivered == 1 ? "" : "es")"
        line += "  cursor \(connector.cursor)"
        if let lastError = connector.lastError {
            line += "  last error: \(lastError) (\(connector.failures) attempt\(connector.failures == 1 ? "" : "s"))"
        }
        return line
    }
}

/// The connector id argument of the commands on one connector.
struct ConnectorTarget: ParsableArguments {
    @Argument(help: "The connector's id (con_…).")
    var id: String

    func validate() throws {
        guard Identifier.isValid(id) else { throw ValidationError("the connector's id is con_ and hex digits") }
    }
}

/// Runs `method path` for one connector and prints its line.
private func changeConnector(
    _ method: HTTPMethod, _ suffix: String, _ target: ConnectorTarget, _ connection: ConnectionOptions, body: Data? = nil
) async throws -> ConnectorStatus {
    try await connection.withTransport { transport in
        try JSONDecoder().decode(
            ConnectorStatus.self,
            from: try await transport.exchange(method, path: "/v1/connectors/\(target.id)\(suffix)", body: body))
    }
}

struct ConnectorPause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pause", abstract: "Stop delivering; changes wait for resume.")
    @OptionGroup var target: ConnectorTarget
    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        let status = try await changeConnector(.POST, "/pause", target, connection)
        say("connector \(status.id) paused at \(status.cursor)")
    }
}

struct ConnectorResume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "resume", abstract: "Deliver again, from where it stopped.")
    @OptionGroup var target: ConnectorTarget
    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        let status = try await changeConnector(.POST, "/resume", target, connection)
        say("connector \(status.id) resumed from \(status.cursor)")
    }
}

struct ConnectorReplay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay", abstract: "Deliver again every change after a cursor (a batch's from or to), or from the start.")
    @OptionGroup var target: ConnectorTarget
    @Option(help: "A cursor from a batch (c1.N.N), or start.")
    var from: String
    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        let status = try await changeConnector(.POST, "/replay", target, connection, body: try JSONEncoder().encode(["from": from]))
        say("connector \(status.id) delivers again after \(status.cursor)")
    }
}

struct ConnectorRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "remove", abstract: "Stop delivering and forget the connector.")
    @OptionGroup var target: ConnectorTarget
    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        try await connection.withTransport { transport in
            _ = try await transport.exchange(.DELETE, path: "/v1/connectors/\(target.id)")
        }
        say("connector \(target.id) removed")
    }
}
