/// One reading of the device's position.
public struct LocationFix: Sendable, Hashable {
    public var latitude: Double
    public var longitude: Double
    /// Horizontal accuracy in metres, when the provider knows it.
    public var accuracy: Double?

    public init(latitude: Double, longitude: Double, accuracy: Double? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.accuracy = accuracy
    }
}

/// Where the device is. On a phone this wraps the platform's location service; attendance asks it once per
/// action and refuses the action when it has no fix.
public protocol LocationProvider: Sendable {
    /// The current fix, or nil when there is no signal.
    func currentFix() async -> LocationFix?
}

/// A provider that always answers the same: a given fix, or none. The CLI's `--lat/--lon` and `--no-fix`.
public struct FixedLocation: LocationProvider {
    public var fix: LocationFix?

    public init(_ fix: LocationFix?) {
        self.fix = fix
    }

    public func currentFix() async -> LocationFix? { fix }
}
