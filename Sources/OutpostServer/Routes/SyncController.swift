import Foundation
import HTTPTypes
import Hummingbird
import Logging
import OutpostProtocol
import OutpostRecords

/// `POST /v1/push`, `GET /v1/pull` and `GET /v1/snapshot`.
struct SyncController<Storage: SyncStorage> {
    let storage: Storage
    let configuration: ServerConfiguration
    let secrets: ServerSecrets
    let devices: DeviceOwners<Storage>
    let metrics: ServerMetrics
    /// Admits each page of a stream after its first, as it admits requests.
    let gate: AdmissionGate
    let now: @Sendable () -> Date

    func addRoutes(to group: RouterGroup<OutpostRequestContext>) {
        group.post("push", use: push)
        group.get("pull", use: pull)
        group.get("snapshot", use: snapshot)
        group.get("record-id-key", use: recordIdKey)
        group.post("relay/forward", use: forward)
        group.post("relay-tokens", use: relayToken)
        group.post("relay/status", use: relayStatus)
    }

    /// `GET /v1/record-id-key`: the caller's own key for attendance record ids (``Attendance/IdKey``), which
    /// each of their devices needs to name records so that the ids name no one.
    @Sendable func recordIdKey(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        let key = try secrets.attendanceKey(tenant: identity.tenant, userId: identity.userId)
        var response = try Response.json(RecordIdKeyResponse(attendance: key.hex, userId: identity.userId))
        response.headers[.cacheControl] = "no-store"
        return response
    }

    /// The most JSON values a push may hold: generous for a full batch of records with many fields, and a bound
    /// on what a body of junk costs.
    var maxPushValues: Int { max(configuration.maxBatchSize, 1) * 400 }

    /// A body up to this size is parsed at once: it cannot hold enough values to cost much.
    static var surveyedFrom: Int { 64 * 1024 }

    /// Refuses a large push body by its shape before a tree of it is built: a member other than `deviceId` and
    /// `mutations`, more values than ``maxPushValues``, or more mutations than a batch takes cost one read of
    /// the bytes. (A smaller body is checked for the same once parsed.)
    func checkPushShape(_ buffer: ByteBuffer) throws {
        guard buffer.readableBytes >= Self.surveyedFrom else { return }
        let survey: JSONSurvey
        do {
            survey = try JSONValue.survey(buffer.readableBytesView, members: PushRequest.members, maxValues: maxPushValues)
        } catch .unknownMember(let name) {
            throw OutpostHTTPError.badRequest(
                "a push has the members deviceId and mutations only, not \"\(name.prefix(64))\"", code: .invalidJSON)
        } catch .tooManyValues(let limit) {
            throw OutpostHTTPError(.contentTooLarge, .payloadTooLarge, "a push holds at most \(limit) JSON values; split the batch")
        } catch .syntax(let error) {
            throw OutpostHTTPError.badRequest(
                "the request body is not valid JSON: \(error.reason) at byte \(error.offset)", code: .invalidJSON)
        }
        guard survey.arrayCounts["mutations", default: 0] <= configuration.maxBatchSize else {
            throw OutpostHTTPError(
                .contentTooLarge, .batchTooLarge,
                "a push carries at most \(configuration.maxBatchSize) mutations; split the batch")
        }
    }

    @Sendable func push(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
        let body = try await RequestDecoding.parseBody(
            from: request, maxBytes: configuration.maxBodyBytes, timeout: configuration.bodyTimeout, checking: checkPushShape
        ) {
            (json: JSONValue) throws(JSONSyntaxError) in try PushRequest(json: json)
        }
        guard Identifier.isValid(body.deviceId) else {
            throw OutpostHTTPError.badRequest("deviceId must be an identifier (A-Z a-z 0-9 . _ : @ -)")
        }
        try await devices.authorize(body.deviceId, for: identity)
        guard body.mutations.count <= configuration.maxBatchSize else {
            throw OutpostHTTPError(
                .contentTooLarge, .batchTooLarge,
                "a push carries at most \(configuration.maxBatchSize) mutations; split the batch")
        }
        var results = try await apply(body.mutations, deviceId: body.deviceId, by: identity)
        let features = ProtocolFeature.named(in: request.headers[values: .outpostFeatures])
        if configuration.relay != nil {
            results = try await relayAnswers(results, tenant: identity.tenant)
            if !features.contains(.relay), results.contains(where: { $0.isHeldAtRelay || $0.error?.code == .notCarriedByRelay }) {
                throw OutpostHTTPError(
                    .serviceUnavailable, .serviceUnavailable,
                    "the venue relay holds these writes until the server has them; send them again later",
                    headers: [.retryAfter: "30"])
            }
        }
        let answer = features.contains(.superseded) ? results : results.map(\.withoutSuperseded)
        return .json(bytes: try PushResponse(results: answer).jsonBytes())
    }

    /// Validates and stores one device's mutations in one transaction, as `identity`; `refusing` may turn a valid
    /// mutation, its scope resolved, into a rejection before storage sees it.
    func apply(
        _ mutations: [Mutation], deviceId: String, by identity: Identity,
        refusing refusal: (Mutation) -> MutationResult? = { _ in nil }
    ) async throws -> [MutationResult] {
        let receivedAt = now()
        let validator = MutationValidator(
            collections: configuration.collections, earliest: configuration.earliestTimestamp,
            maxClockSkew: configuration.maxClockSkew)
        let attendanceKey =
            mutations.contains { $0.collection == Attendance.collection }
            ? try secrets.attendanceKey(tenant: identity.tenant, userId: identity.userId) : nil
        let relay = configuration.relay
        let validated = mutations.map { mutation -> PushItem in
            let item = validator.item(for: mutation, by: identity, now: receivedAt, attendanceKey: attendanceKey)
            if case .valid(let resolved, _) = item,
                let refused = relay?.refusal(of: resolved, by: identity) ?? refusal(resolved)
            {
                return .rejected(refused)
            }
            return item
        }
        let quota = configuration.tenantFileBytes
        let items = try await Self.refusingMissingFiles(
            validated,
            held: { [storage] digests in try await storage.completeFiles(tenant: identity.tenant, sha256s: digests) },
            overBound: { [storage] file in
                // An upload begun is counted already, and fits.
                guard let quota, try await storage.upload(tenant: identity.tenant, sha256: file.sha256) == nil else { return nil }
                return try await storage.tenantFileBytes(tenant: identity.tenant) + file.size > quota ? quota : nil
            })
        var context = PushContext(
            tenant: identity.tenant, deviceId: deviceId, userId: identity.userId, userName: identity.name,
            role: identity.role, receivedAt: Timestamp(receivedAt), attendanceKey: attendanceKey)
        if relay != nil {
            context.relayJournal = RelayJournaling(
                role: identity.role,
                sent: Dictionary(mutations.map { ($0.idempotencyKey, $0) }, uniquingKeysWith: { first, _ in first }))
        }
        let results = try await storage.push(items, context: context, collections: configuration.collections)
        metrics.count(results)
        return results
    }

    /// `items` with each valid upsert that names a file the server does not hold whole, as the mutation names it
    /// (its size and type), refused with `file_missing`: a record the server takes always has its files.
    ///
    /// `held` answers which of some digests are complete files; it is asked once, and only when a mutation names a
    /// file, so that a push of records without files costs no query more. `overBound` answers, for a file missing,
    /// the bound on the organization's file bytes when the file would take it past it (nil otherwise): such a file
    /// is refused with `file_quota_exceeded` and says so, since uploading it first would not help.
    static func refusingMissingFiles(
        _ items: [PushItem], held: ([String]) async throws -> [String: FileUpload],
        overBound: (FileReference) async throws -> Int64? = { _ in nil }
    ) async throws -> [PushItem] {
        var named: [(index: Int, files: [String: FileReference])] = []
        for (index, item) in items.enumerated() {
            guard case .valid(let mutation, _) = item, mutation.op == .upsert else { continue }
            let files = FileReference.references(in: mutation.fields)
            if !files.isEmpty { named.append((index, files)) }
        }
        guard !named.isEmpty else { return items }
        let digests = Set(named.flatMap { $0.files.values.map(\.sha256) })
        let held = try await held(digests.sorted())
        var items = items
        for (index, files) in named {
            guard case .valid(let mutation, _) = items[index] else { continue }
            for (field, file) in files.sorted(by: { $0.key < $1.key }) {
                var code = WireError.Code.fileMissing
                let message: String
                if let stored = held[file.sha256] {
                    guard stored.size != file.size || stored.type != file.type else { continue }
                    message = "the file in \(field) is on the server as \(stored.type) of \(stored.size) bytes, not as the record names it"
                } else {
                    if let quota = try await overBound(file) {
                        code = .fileQuotaExceeded
                        message = TenantFileQuota.message(field: field, quota: quota)
                    } else {
                        message = "the file in \(field) is not on the server whole; upload it first"
                    }
                }
                items[index] = .rejected(.rejected(mutation.idempotencyKey, code, message))
                break
            }
        }
        return items
    }

    @Sendable func pull(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        let scope = try RequestDecoding.scope(in: request)
        let identity = try context.requireReader(of: policy, scope: scope)
        if let refusal = policy.readRefusal(for: identity, scope: scope) { throw OutpostHTTPError.forbidden(refusal) }
        let owner = policy.readOwner(for: identity)
        let limit = try RequestDecoding.limit(
            in: request, default: configuration.pullDefaultLimit, max: configuration.pullMaxLimit)
        let sealer = try secrets.cursorSealer()
        var cursor = PullCursor.start
        if let token = try RequestDecoding.optional("cursor", in: request) {
            guard let parsed = sealer.cursor(token, tenant: identity.tenant) else {
                throw OutpostHTTPError.badRequest("the cursor is not one this server issued", code: .invalidCursor)
            }
            cursor = parsed
        }
        let pages = try RequestDecoding.pages(in: request, max: configuration.pullMaxPages)
        let maxBytes = configuration.pageMaxBytes
        let page = try await storage.pull(
            tenant: identity.tenant, collection: policy.name, scope: scope, owner: owner, after: cursor, limit: limit,
            maxBytes: maxBytes)
        metrics.pulls.increment()
        let token = { @Sendable (cursor: PullCursor) in sealer.token(cursor, tenant: identity.tenant) }
        guard let pages else { return .json(bytes: try Self.pageBytes(page, token: token)) }
        return try Self.stream(
            from: page, pages: pages, gate: gate, caller: identity.admissionKey, metrics: metrics,
            logger: context.logger, token: token
        ) { [storage] cursor in
            try await storage.pull(
                tenant: identity.tenant, collection: policy.name, scope: scope, owner: owner, after: cursor,
                limit: limit, maxBytes: maxBytes)
        }
    }

    /// A pull of several pages: one JSON document a line, each written as soon as it is read, up to `pages` or a
    /// page without `hasMore`. The first page is read before the answer starts, so that a failure then is an
    /// ordinary error answer. Each later page is read under the admission gate, like a request of its own, so
    /// that a long stream to a slow device holds no place while it waits on the network. A failure after the
    /// first page ends the stream with an error line (the body of the answer it would have been); the device
    /// has stored the pages before it, and pulls again from the last cursor.
    static func stream(
        from first: PulledChanges, pages: Int, gate: AdmissionGate, caller: String, metrics: ServerMetrics,
        logger: Logger,
        token: @escaping @Sendable (PullCursor) -> String,
        next: @escaping @Sendable (PullCursor) async throws -> PulledChanges
    ) throws -> Response {
        var firstLine = try Self.pageBytes(first, token: token)
        firstLine.append(UInt8(ascii: "\n"))
        let line = firstLine
        return Response(
            status: .ok, headers: [.contentType: "application/x-ndjson", .cacheControl: "no-store"],
            body: ResponseBody { writer in
                try await writer.write(ByteBuffer(bytes: line))
                var last = first
                var sent = 1
                var failed = false
                while last.hasMore && sent < pages && !failed {
                    var line: [UInt8]
                    do {
                        last = try await gate.withAdmission(caller: caller) { try await next(last.cursor) }
                        metrics.pulls.increment()
                        line = try Self.pageBytes(last, token: token)
                    } catch {
                        logger.notice("a stream of pulls ended early", metadata: ["pages": "\(sent)"])
                        line = Self.streamErrorLine(ErrorMiddleware<OutpostRequestContext>.answer(for: error, logger: logger))
                        failed = true
                    }
                    line.append(UInt8(ascii: "\n"))
                    try await writer.write(ByteBuffer(bytes: line))
                    sent += 1
                }
                try await writer.finish(nil)
            })
    }

    private static func pageBytes(_ page: PulledChanges, token: (PullCursor) -> String) throws -> [UInt8] {
        let rows = page.changes
        return try PullResponse.jsonBytes(count: rows.count, cursor: token(page.cursor), hasMore: page.hasMore) {
            (output: inout [UInt8]) throws(JSONSyntaxError) in
            try RecordRow.writeJSON(rows, to: &output)
        }
    }

    /// The line that ends a stream the server could not finish: the error body its answer would have carried.
    private static func streamErrorLine(_ error: OutpostHTTPError) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(error.wire)).map(Array.init)
            ?? Array(#"{"error":{"code":"internal_error","message":"internal server error"}}"#.utf8)
    }

    @Sendable func snapshot(_ request: Request, context: OutpostRequestContext) async throws -> Response {
        let policy = try RequestDecoding.collection(in: request, registry: configuration.collections)
        guard policy.kind == .reference else {
            throw OutpostHTTPError.badRequest(
                "snapshots serve reference collections; use /v1/pull for \(policy.name)")
        }
        let scope = try RequestDecoding.scope(in: request)
        let identity = try context.requireReader(of: policy, scope: scope)
        // A reference collection is read by the whole tenant, by scope at most (`CollectionRegistry` refuses one
        // of own records).
        if let refusal = policy.readRefusal(for: identity, scope: scope) { throw OutpostHTTPError.forbidden(refusal) }
        let limit = try RequestDecoding.limit(
            in: request, default: configuration.snapshotDefaultPageSize, max: configuration.snapshotMaxPageSize)
        let key = try secrets.continuationKey()

        var state: SnapshotContinuation
        if let token = try RequestDecoding.optional("continuation", in: request) {
            guard let parsed = SnapshotContinuation(token: token, key: key) else {
                throw OutpostHTTPError.badRequest(
                    "the continuation token is not one this server issued", code: .invalidContinuation)
            }
            guard parsed.tenant == identity.tenant, parsed.collection == policy.name, parsed.scope == scope else {
                throw OutpostHTTPError.badRequest(
                    "the continuation token belongs to another snapshot", code: .invalidContinuation)
            }
            state = parsed
        } else {
            let start = try await storage.snapshotStart(tenant: identity.tenant, collection: policy.name, scope: scope)
            state = SnapshotContinuation(
                tenant: identity.tenant, collection: policy.name, scope: scope, after: "",
                cursor: try secrets.cursorSealer().token(start.cursor, tenant: identity.tenant), total: start.total)
        }
        // One row more than the page says whether another page follows, sparing the client an empty request.
        // A page that ended by size may be followed by another, which may be empty.
        var records = try await storage.snapshotPage(
            tenant: identity.tenant, collection: policy.name, scope: scope, after: state.position, limit: limit + 1,
            maxBytes: configuration.pageMaxBytes)
        metrics.snapshots.increment()
        let bytes = records.reduce(0) { $0 + $1.fieldsJSON.utf8.count }
        let isLast = records.count <= limit && (records.isEmpty || bytes < configuration.pageMaxBytes)
        records = Array(records.prefix(limit))
        var continuation: String?
        if !isLast, let last = records.last {
            state.after = last.recordId
            state.afterScope = last.scope
            continuation = try state.token(key: key)
        }
        let page = records
        return .json(
            bytes: try SnapshotResponse.jsonBytes(
                count: page.count, total: state.total, continuation: continuation, cursor: isLast ? state.cursor : nil
            ) { (output: inout [UInt8]) throws(JSONSyntaxError) in
                try RecordRow.writeJSON(page, to: &output)
            })
    }
}

extension HTTPField.Name {
    /// ``ProtocolFeature/header``.
    static let outpostFeatures = HTTPField.Name(ProtocolFeature.header)!
}
