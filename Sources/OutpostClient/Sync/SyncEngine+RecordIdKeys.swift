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
}
