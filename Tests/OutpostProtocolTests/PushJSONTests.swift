import Foundation
import OutpostProtocol
import Testing

/// Pushes read and written without Codable: the same bytes as a sorted-key `JSONEncoder`, which the server's
/// content hashes depend on, and the same values both ways.
@Suite("Push JSON")
struct PushJSONTests {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    @Test("a mutation is written byte for byte as a sorted-key JSONEncoder writes it", arguments: 0..<20)
    func mutationBytes(seed: Int) throws {
        var random = SplitMix(seed: UInt64(seed) + 3000)
        for _ in 0..<40 {
            let mutation = Mutation.random(using: &random)
            #expect(try mutation.jsonBytes() == Array(Self.encoder.encode(mutation)))
        }
    }

    @Test("a relay's forwards and their answers read back as written, and as Foundation reads and writes them", arguments: 0..<10)
    func relayRoundTrips(seed: Int) throws {
        var random = SplitMix(seed: UInt64(seed) + 5000)
        let batches = (0..<Int.random(in: 0...4, using: &random)).map { index in
            RelayBatch(
                deviceId: "door-\(index)", userId: "user-\(seed)", userName: "Ana \"Door\" Staff", role: Role.allCases.randomElement(using: &random)!,
                mutations: (0..<Int.random(in: 0...10, using: &random)).map { _ in Mutation.random(using: &random) })
        }
        let request = RelayForwardRequest(batches: batches)
        let canonical = RelayForwardRequest(
            batches: batches.map { batch in
                var batch = batch
                batch.mutations = batch.mutations.map(\.canonical)
                return batch
            })
        #expect(try RelayForwardRequest(jsonBytes: request.jsonBytes()) == canonical)
        #expect(try RelayForwardRequest(jsonBytes: JSONEncoder().encode(request)) == canonical)
        #expect(try request.jsonBytes() == Array(Self.encoder.encode(request)))

        let response = RelayForwardResponse(
            batches: (0..<Int.random(in: 0...4, using: &random)).map { _ in
                PushResponse(results: (0..<Int.random(in: 0...10, using: &random)).map { _ in MutationResult.random(using: &random) })
            })
        let answers = RelayForwardResponse(batches: response.batches.map { PushResponse(results: $0.results.map(\.canonical)) })
        #expect(try RelayForwardResponse(jsonBytes: response.jsonBytes()) == answers)
        #expect(
            try JSONDecoder().decode(RelayForwardResponse.self, from: Data(response.jsonBytes())).batches.map { $0.results.map(\.canonical) }
                == answers.batches.map(\.results))
        #expect(try response.jsonBytes() == Array(Self.encoder.encode(response)))
        for result in response.batches.flatMap(\.results) {
            #expect(try MutationResult(jsonBytes: result.jsonBytes()) == result.canonical)
        }
    }

    @Test("requests and responses read back as written, and as Foundation reads and writes them", arguments: 0..<10)
    func roundTrips(seed: Int) throws {
        var random = SplitMix(seed: UInt64(seed) + 4000)
        let request = PushRequest(
            deviceId: "phone-\(seed)", mutations: (0..<Int.random(in: 0...30, using: &random)).map { _ in Mutation.random(using: &random) })
        #expect(try PushRequest(jsonBytes: request.jsonBytes()) == request.canonical)
        #expect(try JSONDecoder().decode(PushRequest.self, from: Data(request.jsonBytes())).canonical == request.canonical)
        #expect(try PushRequest(jsonBytes: JSONEncoder().encode(request)) == request.canonical)
        #expect(try request.jsonBytes() == Array(Self.encoder.encode(request)))

        let response = PushResponse(results: (0..<Int.random(in: 0...30, using: &random)).map { _ in MutationResult.random(using: &random) })
        #expect(try PushResponse(jsonBytes: response.jsonBytes()) == response.canonical)
        #expect(try JSONDecoder().decode(PushResponse.self, from: Data(response.jsonBytes())).canonical == response.canonical)
        #expect(try PushResponse(jsonBytes: JSONEncoder().encode(response)) == response.canonical)
        #expect(try response.jsonBytes() == Array(Self.encoder.encode(response)))
    }

    @Test("optional members may be absent or null; a mutation's unknown members are ignored")
    func optionalMembers() throws {
        let text =
            #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"delete","clientTimestamp":"2026-11-21T09:00:00.000Z","fields":null,"baseVersion":null,"other":{}}]}"#
        let request = try PushRequest(jsonBytes: Array(text.utf8))
        #expect(request == (try JSONDecoder().decode(PushRequest.self, from: Data(text.utf8))))
        #expect(request.mutations[0].fields.isEmpty && request.mutations[0].baseVersion == nil)
    }

    @Test(
        "a malformed request is refused, naming the member and never quoting the value",
        arguments: [
            (#"{"mutations":[]}"#, "deviceId is missing"),
            (#"{"deviceId":"d","mutations":"SECRET"}"#, "mutations must be an array"),
            (#"{"deviceId":"d","mutations":["SECRET"]}"#, "mutations[0] must be an object"),
            (
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"SECRET","clientTimestamp":"2026-11-21T09:00:00.000Z"}]}"#,
                "mutations[0].op must be upsert or delete"
            ),
            (
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","clientTimestamp":"SECRET"}]}"#,
                "mutations[0].clientTimestamp must be an RFC 3339 date-time"
            ),
            (
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","fields":["SECRET"],"clientTimestamp":"2026-11-21T09:00:00.000Z"}]}"#,
                "mutations[0].fields must be an object"
            ),
            (
                #"{"deviceId":"d","mutations":[{"idempotencyKey":"k","collection":"notes","recordId":"r","op":"upsert","baseVersion":"SECRET","clientTimestamp":"2026-11-21T09:00:00.000Z"}]}"#,
                "mutations[0].baseVersion must be an integer"
            ),
            (
                #"{"deviceId":"d","mutations":[{"collection":"notes","recordId":"r","op":"upsert","clientTimestamp":"2026-11-21T09:00:00.000Z"}]}"#,
                "mutations[0].idempotencyKey is missing"
            ),
            (#"["SECRET"]"#, "the body must be an object"),
        ])
    func malformed(text: String, expected: String) throws {
        let error = #expect(throws: JSONSyntaxError.self) { try PushRequest(jsonBytes: Array(text.utf8)) }
        #expect(error?.reason.hasPrefix(expected) == true, "\(String(describing: error))")
        #expect(error?.reason.contains("SECRET") == false)
        // Foundation refuses each of them too.
        #expect(throws: (any Error).self) { try JSONDecoder().decode(PushRequest.self, from: Data(text.utf8)) }
    }

    @Test("a push with a member other than deviceId and mutations is refused by name, where Foundation would ignore it")
    func unknownMember() throws {
        let text = #"{"deviceId":"d","extra":["SECRET"],"mutations":[]}"#
        let error = #expect(throws: JSONSyntaxError.self) { try PushRequest(jsonBytes: Array(text.utf8)) }
        #expect(error?.reason == #"a push has the members deviceId and mutations only, not "extra""#)
    }
}

extension Mutation {
    static func random(using random: inout SplitMix) -> Mutation {
        var fields: [String: JSONValue] = [:]
        for _ in 0..<Int.random(in: 0...5, using: &random) {
            fields[JSONValue.randomString(using: &random)] = JSONValue.random(depth: 1, using: &random)
        }
        return Mutation(
            idempotencyKey: "dev:" + JSONValue.randomString(using: &random), collection: "notes",
            recordId: JSONValue.randomString(using: &random),
            op: Bool.random(using: &random) ? .upsert : .delete, fields: fields,
            clientTimestamp: Timestamp(millisecondsSince1970: Int64.random(in: 0...4_000_000_000_000, using: &random)),
            baseVersion: Bool.random(using: &random) ? Int64.random(in: 0...Int64.max, using: &random) : nil)
    }

    var canonical: Mutation {
        var mutation = self
        mutation.fields = fields.mapValues(\.canonical)
        return mutation
    }
}

extension PushRequest {
    var canonical: PushRequest { PushRequest(deviceId: deviceId, mutations: mutations.map(\.canonical)) }
}

extension MutationResult {
    static func random(using random: inout SplitMix) -> MutationResult {
        let status = MutationResult.Status.allCases.randomElement(using: &random)!
        let conflict =
            Bool.random(using: &random)
            ? ConflictDetail(
                conflictId: "c-\(Int.random(in: 0...999, using: &random))",
                fields: (0..<Int.random(in: 0...3, using: &random)).map { _ in JSONValue.randomString(using: &random) },
                serverFields: ["status": JSONValue.random(depth: 1, using: &random)],
                serverVersion: Int64.random(in: 1...99, using: &random))
            : nil
        return MutationResult(
            idempotencyKey: JSONValue.randomString(using: &random), status: status,
            version: Bool.random(using: &random) ? Int64.random(in: 1...1000, using: &random) : nil,
            originalStatus: Bool.random(using: &random) ? .applied : nil, conflict: conflict,
            error: Bool.random(using: &random) ? .init(code: .stateConflict, message: JSONValue.randomString(using: &random)) : nil,
            serverFields: Bool.random(using: &random) ? ["scanned_by": JSONValue.random(depth: 1, using: &random)] : nil,
            serverCreatedAt: Bool.random(using: &random)
                ? Timestamp(millisecondsSince1970: Int64.random(in: 0...4_000_000_000_000, using: &random)) : nil)
    }

    var canonical: MutationResult {
        var result = self
        result.conflict?.serverFields = conflict?.serverFields.mapValues(\.canonical) ?? [:]
        result.serverFields = serverFields?.mapValues(\.canonical)
        return result
    }
}

extension PushResponse {
    var canonical: PushResponse { PushResponse(results: results.map(\.canonical)) }
}
