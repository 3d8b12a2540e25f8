import Foundation
import Testing

/// The tests' child processes: a program that is missing, or that ends without reading its input, is a failure
/// with its name or a status, never a crash of the test process.
@Suite("Child processes")
struct ChildLaunchTests {
    @Test("a program that does not exist throws, naming it; a long-running one too")
    func missingProgram() async throws {
        let name = "outpost-no-such-tool-\(UUID().uuidString.prefix(8))"
        let error = await #expect(throws: Child.LaunchError.self) { try await Child.run(name, ["--version"]) }
        #expect(error?.description.contains(name) == true)
        await #expect(throws: Child.LaunchError.self) { try await Tool.run(name, [], input: Data("input".utf8)) }
        await #expect(throws: Child.LaunchError.self) { try await RunningChild(name, []) }
        await #expect(throws: Child.LaunchError.self) { try await Child.run("/nonexistent/\(name)", []) }
    }

    /// A child that exits before it has read its input once made swift-subprocess trap in the test process: a megabyte
    /// to a program that reads nothing did so every time, `env` for a missing tool now and then.
    @Test("a child that ends without reading its input gives its status; the test process goes on")
    func unreadInput() async throws {
        let megabyte = Data(repeating: UInt8(ascii: "a"), count: 1 << 20)
        for _ in 0..<20 {
            #expect(try await Child.run("/bin/true", [], input: megabyte).status == 0)
            let missing = try await Child.run("/usr/bin/env", ["outpost-no-such-tool"], input: Data("input\n".utf8))
            #expect(missing.status == 127)
            #expect(missing.stderr.contains("outpost-no-such-tool"))
        }
        let head = try await Child.run("/usr/bin/head", ["-c", "5"], input: megabyte)
        #expect(head.status == 0 && head.stdout == "aaaaa")
        let cat = try await Child.run("/bin/cat", [], input: megabyte)
        #expect(cat.stdout.utf8.count == megabyte.count)
    }

    @Test("a tool is found on PATH, and a missing one is named with how to install it")
    func toolRequirement() {
        #expect(ExternalTool.missing([.python]) == nil)
        let absent = ExternalTool(name: "outpost-no-such-tool", install: "apt-get install outpost-tools")
        let sentence = ExternalTool.missing([.python, absent])
        #expect(sentence?.contains("outpost-no-such-tool") == true)
        #expect(sentence?.contains("apt-get install outpost-tools") == true)
        #expect(sentence?.contains("python3") == false)
    }
}
