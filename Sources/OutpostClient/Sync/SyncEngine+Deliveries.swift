import OutpostProtocol

extension SyncEngine {
    /// Whether the server's connectors have sent these records on (such as to a crew's sheet): the records the
    /// server has of `recordIds`, at most 200, each with how many connectors send it and whether all of them
    /// delivered the version the server has.
    ///
    /// - Throws: the transport's error when the server cannot be reached, or
    ///   ``TransportError`` when the transport does not adopt ``DeliveryStatusTransport``.
    public func deliveries(collection: String, scope: String? = nil, recordIds: [String]) async throws -> RecordDeliveries {
        try await transport.deliveryStatus(collection: collection, scope: scope, recordIds: recordIds)
    }

    /// Has the server's failing connectors that have not delivered these records (such as to a crew's sheet) try
    /// them again now, instead of at the end of their wait, and says where the records then stand.
    ///
    /// - Throws: as ``deliveries(collection:scope:recordIds:)``.
    public func retryDeliveries(collection: String, scope: String? = nil, recordIds: [String]) async throws -> RecordDeliveries {
        try await transport.deliveryRetry(collection: collection, scope: scope, recordIds: recordIds)
    }
}
