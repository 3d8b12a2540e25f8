import Foundation
import NIOConcurrencyHelpers
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A program from the machine that some tests drive and `swift test` cannot build, with the package that brings it.
///
/// A test that needs one says so with ``Testing/Trait/requires(_:)``: where the tool is missing, the test is skipped
/// with a note naming it and how to install it; under `CI=true` (`.ci/run`, which installs every tool first) a
/// missing tool fails the test with the same words instead.
struct ExternalTool: Sendable, CustomStringConvertible {
    /// The command looked up on `PATH`, or the Python module looked up by `python3`.
    let name: String
    /// How to install it on Debian, as a person would type it.
    let install: String
    private let kind: Kind

    private enum Kind { case command, pythonModule }

    /// A command, or with `pythonModule` a module that `python3` imports.
    init(name: String, install: String, pythonModule: Bool = false) {
        self.name = name
        self.install = install
        kind = pythonModule ? .pythonModule : .command
    }

    static let promtool = ExternalTool(name: "promtool", install: "apt-get install prometheus")
    static let schemathesis = ExternalTool(name: "schemathesis", install: "pip install schemathesis")
    static let chromium = ExternalTool(name: "chromium", install: "apt-get install chromium")
    static let chromedriver = ExternalTool(name: "chromedriver", install: "apt-get install chromium-driver")
    static let selenium = ExternalTool(name: "selenium", install: "pip install selenium", pythonModule: true)
    static let faketime = ExternalTool(name: "faketime", install: "apt-get install faketime")
    static let compiler = ExternalTool(name: "cc", install: "apt-get install gcc")
    static let python = ExternalTool(name: "python3", install: "apt-get install python3")
    static let node = ExternalTool(name: "node", install: "apt-get install nodejs")
    static let openssl = ExternalTool(name: "openssl", install: "apt-get install openssl")
    static let curl = ExternalTool(name: "curl", install: "apt-get install curl")
    static let openapiPythonClient = ExternalTool(
        name: "openapi-python-client", install: "pip install openapi-python-client")
    static let openapiSpecValidator = ExternalTool(
        name: "openapi-spec-validator", install: "pip install openapi-spec-validator")

    var description: String { kind == .command ? name : "python3's \(name) module" }

    /// Whether the tool is there: a command on `PATH` now, a Python module as first found in this test process.
    var isInstalled: Bool {
        switch kind {
        case .command: Child.path(of: name) != nil
        case .pythonModule:
            Self.pythonModules.withLockedValue { found in
                if let known = found[name] { return known }
                let present = Child.path(of: "python3") != nil && Self.exitsCleanly("python3", ["-c", "import \(name)"])
                found[name] = present
                return present
            }
        }
    }

    /// Whether a missing tool fails its tests rather than skipping them: CI installs every tool first.
    static let isRequired = ProcessInfo.processInfo.environment["CI"] == "true"

    /// The sentence that names what `tools` lacks here and how to install it; nil when nothing is missing.
    static func missing(_ tools: [ExternalTool]) -> String? {
        let missing = tools.filter { !$0.isInstalled }
        guard !missing.isEmpty else { return nil }
        let names = missing.map(\.description).joined(separator: ", ")
        let installs = missing.map(\.install).joined(separator: "; ")
        return "needs \(names), not installed here (\(installs); .ci/run installs every tool, at the versions it names)"
    }

    private static let pythonModules = NIOLockedValueBox<[String: Bool]>([:])

    /// Runs `program` with its output discarded, synchronously, before any test of the process needs it.
    private static func exitsCleanly(_ program: String, _ arguments: [String]) -> Bool {
        guard let path = Child.path(of: program) else { return false }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for descriptor: Int32 in [0, 1, 2] {
            posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid = pid_t()
        guard posix_spawn(&pid, path, &actions, nil, argv, environ) == 0 else { return false }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return status == 0
    }
}

/// A command-line tool from the machine, run to completion.
enum Tool {
    /// Runs `name`, found on `PATH`, with both streams' text; throws ``Child/LaunchError`` when it is not there.
    static func run(
        _ name: String, _ arguments: [String], input: Data? = nil, in directory: URL? = nil
    ) async throws -> (status: Int32, output: String) {
        let ran = try await Child.run(name, arguments, input: input, in: directory)
        return (ran.status, ran.output)
    }
}

/// The error of a test whose tool is missing where every tool must be there.
struct MissingToolError: Error, CustomStringConvertible {
    var description: String
}

extension ConditionTrait {
    /// Runs the test only where every one of `tools` is installed; elsewhere it is skipped with a note that names the
    /// missing tools and how to install them, except under `CI=true`, where the missing tools fail it.
    static func requiring(_ tools: [ExternalTool]) -> Self {
        let missing = ExternalTool.missing(tools)
        return .enabled(Comment(rawValue: missing ?? "needs \(tools.map(\.description).joined(separator: ", "))")) {
            guard let missing = ExternalTool.missing(tools) else { return true }
            if ExternalTool.isRequired { throw MissingToolError(description: missing) }
            return false
        }
    }
}

extension TestTrait where Self == ConditionTrait {
    /// See ``ConditionTrait/requiring(_:)``.
    static func requires(_ tools: ExternalTool...) -> Self { .requiring(tools) }
}

extension SuiteTrait where Self == ConditionTrait {
    /// See ``ConditionTrait/requiring(_:)``.
    static func requires(_ tools: ExternalTool...) -> Self { .requiring(tools) }
}
