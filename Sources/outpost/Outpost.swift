import ArgumentParser
import AsyncHTTPClient
import Foundation
import OutpostClient
import OutpostHTTP
import OutpostProtocol

/// The `outpost` command: serves the server, and issues tokens.
struct OutpostCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "outpost",
        abstract: "Offline-first capture and sync: the server, field devices, tokens.",
        subcommands: [
            Serve.self, Token.self, DeviceCommand.self, RosterCommand.self, EventCommand.self, AttendanceCommand.self,
            ActivityCommand.self, BuildsCommand.self, ConnectorCommand.self, Demo.self, Bench.self,
        ]
    )
}

@main
enum Main {
    static func main() async {
        // A reader that stops early (`| head -1`) closes the pipe: writes then fail and `say` ends the process
        // quietly, instead of the signal killing it.
        signal(SIGPIPE, SIG_IGN)
        var device: DeviceStoreOptions?
        do {
            var command = try OutpostCommand.parseAsRoot()
            device = DeviceStoreOptions.of(command)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if error is ExitCode { await remindToSignIn(device) }
            exit(reporting: error, device: device != nil)
        }
        await remindToSignIn(device)
    }

    /// After a device command that printed its own outcome (a sync's summary, a record saved but not synced),
    /// says how to sign in again when the server refused the device's token: the SDK's words name no command.
    static func remindToSignIn(_ device: DeviceStoreOptions?) async {
        guard let device, await device.needsSignIn() else { return }
        FileHandle.standardError.write(Data("outpost: \(DeviceLogin.signInAgain)\n".utf8))
    }

    /// Help and version go out as ArgumentParser prints them; any failure is one line on stderr.
    ///
    /// - Parameter device: whether the command acted as a device, which signs in again with `device login`.
    static func exit(reporting error: any Error, device: Bool = false) -> Never {
        let code = OutpostCommand.exitCode(for: error)
        if code == .success {
            OutpostCommand.exit(withError: error)
        }
        // A command that already said why (a failed sync, a missed benchmark target) exits with its code.
        if let exitCode = error as? ExitCode {
            Foundation.exit(exitCode.rawValue)
        }
        // The SDK's and the apps' errors carry the words field staff read.
        let refusedDevice = device ? (error as? TransportError).map(\.cliMessage) : nil
        let message =
            (refusedDevice ?? (error as? ClientError).map(cliMessage) ?? OutpostCommand.message(for: error))
            .split(separator: "\n").first.map(String.init) ?? "failed"
        FileHandle.standardError.write(Data("outpost: \(message)\n".utf8))
        Foundation.exit(code.rawValue == 0 ? 1 : code.rawValue)
    }
}

/// An SDK error's words, with the command that helps where there is one: the SDK's own words name none.
func cliMessage(_ error: ClientError) -> String {
    switch error.code {
    case .notConfigured: return "\(error.message): run `outpost device init --server URL --token T` first"
    case .signedOut:
        return "this device is not set up with a server and a token: run `outpost device init --server URL --token T` first"
    case .noUser: return "\(error.message); initialise it with a token from `outpost token`"
    default: return error.message
    }
}

/// Writes a line to stdout at once: stdout is block-buffered in a pipe, and scripts and tests read these
/// lines while the process runs (or after it was killed).
func say(_ text: String) {
    do {
        try FileHandle.standardOutput.write(contentsOf: Data((text + "\n").utf8))
    } catch {
        // The reader went away: nobody is left to tell anything.
        exit(0)
    }
}

/// Splits a `key=value` argument; the value may be empty or hold more `=`.
func keyValue(_ pair: String) throws -> (key: String, value: String) {
    guard let equals = pair.firstIndex(of: "="), equals != pair.startIndex else {
        throw CLIError("fields are key=value; got '\(pair.prefix(40))'")
    }
    return (String(pair[..<equals]), String(pair[pair.index(after: equals)...]))
}

/// Fields given as `key=value` arguments; values that parse as JSON (numbers, true, null, {…}) keep their type.
func fieldValues(_ pairs: [String]) throws -> [String: JSONValue] {
    var values: [String: JSONValue] = [:]
    for pair in pairs {
        let (key, text) = try keyValue(pair)
        values[key] = (try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))) ?? .string(text)
    }
    return values
}

/// Runs `body` with an HTTP client made for devices, and shuts the client down however `body` ends.
func withDeviceHTTPClient<T>(_ body: (HTTPClient) async throws -> T) async throws -> T {
    let client = HTTPSyncTransport.makeDeviceClient()
    do {
        let result = try await body(client)
        try? await client.shutdown()
        return result
    } catch {
        try? await client.shutdown()
        throw error
    }
}

/// A failure the CLI reports as one line.
struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
