import Foundation
import OutpostProtocol

extension SyncEngine {
    /// The signed-in user's keys for record ids that must name no one (`GET /v1/record-id-key`), as this device
    /// last fetched them; nil before the first fetch, and again after a sign-in.
    public func recordIdKeys() async throws -> RecordIdKeyResponse? {
        guard let json = try await store.setting(Device.SettingName.recordIdKeys) else { return nil }
        return try? JSONDecoder().decode(RecordIdKeyResponse.self, from: Data(json.utf8))
    }

    /// The keys for record ids, fetched from the server when the device holds none. A sync that reached the
    /// server fetches them; an app that needs them sooner (before its first sync) calls this.
    ///
    /// - Returns: the keys, or nil while the server cannot be reached or gives none (a server older than the
    ///   route, or a transport without it).
    @discardableResult
    public func fetchRecordIdKeys() async -> RecordIdKeyResponse? {
        if let known = try? await recordIdKeys() { return known }
        guard let transport = transport as? any RecordIdKeyTransport,
            let keys = try? await transport.recordIdKey(),
            (try? await store.setSetting(Device.SettingName.recordIdKeys, String(decoding: JSONEncoder().encode(keys), as: UTF8.self)))
                != nil
        else { return nil }
        return keys
    }

    /// Renames the records stored under provisional ids to the ids `settlements` derive with the user's keys,
    /// with their discarded copies; does nothing before the device holds the keys. A record waiting or refused
    /// beside a stored copy of its new id keeps its id until it is settled (see
    /// ``LocalStore/renameRecords(collection:scope:to:)``).
    ///
    /// After every sync that reached the server the engine runs it with its configuration's settlements.
    ///
    /// - Returns: the keys it used, or nil when the device holds none.
    @discardableResult
    public func settleRecordIds(_ settlements: [RecordIdSettlement]? = nil) async throws -> RecordIdKeyResponse? {
        guard let keys = try await recordIdKeys() else { return nil }
        for settlement in settlements ?? configuration.recordIdSettlements {
            let candidates = try await store.recordIds(collection: settlement.collection, containing: settlement.marker)
            let renames = candidates.reduce(into: [String: String]()) { renames, id in
                if let settled = settlement.settledId(id, keys), settled != id { renames[id] = settled }
            }
            if !renames.isEmpty { try await store.renameRecords(collection: settlement.collection, to: renames) }
        }
        return keys
    }

    /// Before a push: fetches the keys when the device holds none and renames what waits under provisional ids,
    /// so that the push carries settled ids, and none that names a person leaves the device where the server
    /// gives the key. Does nothing without settlements, or while the server is not known to be reachable (the
    /// fetch would only wait).
    func settleBeforeSending() async {
        guard !configuration.recordIdSettlements.isEmpty, status.isOnline else { return }
        if (try? await recordIdKeys()) == nil, await fetchRecordIdKeys() == nil { return }
        _ = try? await settleRecordIds()
    }

    /// The id the record named `recordId` has on this device: `recordId` while a record is stored under it,
    /// else, once the device holds the keys, the id a settlement of the collection derives from it. A save
    /// under a provisional id writes the settled record, and a screen that saved one reads it back by this
    /// after a sync may have renamed it.
    public func currentId(of recordId: String, in collection: String, scope: String = "") async -> String {
        guard let settlement = configuration.recordIdSettlements.first(where: { $0.collection == collection }),
            recordId.contains(settlement.marker), let keys = try? await recordIdKeys(),
            let settled = settlement.settledId(recordId, keys), settled != recordId,
            (try? await store.record(collection: collection, scope: scope, recordId: recordId)) == nil
        else { return recordId }
        return settled
    }
}

/// How one collection's records are named once the device holds the user's keys for record ids: ids that
/// would name a person (a user and a day) are derived from a key only that user's devices hold, and a device
/// that wrote before it held the key used a provisional id it renames later.
public struct RecordIdSettlement: Sendable {
    public var collection: String
    /// Text every provisional id holds and no settled one does, so that only those are read.
    public var marker: String
    /// The id a record stored as the first argument takes under the keys; nil or the same id to keep it.
    public var settledId: @Sendable (_ recordId: String, _ keys: RecordIdKeyResponse) -> String?

    public init(
        collection: String, marker: String,
        settledId: @escaping @Sendable (_ recordId: String, _ keys: RecordIdKeyResponse) -> String?
    ) {
        self.collection = collection
        self.marker = marker
        self.settledId = settledId
    }
}
