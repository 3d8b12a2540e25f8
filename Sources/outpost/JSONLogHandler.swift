import Foundation
import Logging

/// Writes each log entry as one JSON object on one line of standard error, for log collectors:
/// `{"time":"…","severity":"ERROR","logger":"outpost","message":"…", …metadata}`.
///
/// The server's code decides what goes into an entry and never passes a token, a payload or a name; this
/// handler only formats it.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    private static let lock = NSLock()

    init(label: String, level: Logger.Level) {
        self.label = label
        self.logLevel = level
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var entry: [String: Any] = [:]
        for (key, value) in metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) {
            entry[key] = Self.plain(value)
        }
        entry["time"] = Self.timestamp(Date())
        entry["severity"] = Self.severity(event.level)
        entry["logger"] = label
        entry["message"] = event.message.description
        guard var data = try? JSONSerialization.data(withJSONObject: entry, options: [.sortedKeys, .withoutEscapingSlashes])
        else { return }
        data.append(0x0A)
        Self.lock.withLock { FileHandle.standardError.write(data) }
    }

    /// Cloud logging's severity names.
    static func severity(_ level: Logger.Level) -> String {
        switch level {
        case .trace, .debug: return "DEBUG"
        case .info: return "INFO"
        case .notice: return "NOTICE"
        case .warning: return "WARNING"
        case .error: return "ERROR"
        case .critical: return "CRITICAL"
        }
    }

    static func plain(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let text): return text
        case .stringConvertible(let value): return value.description
        case .array(let values): return values.map(plain)
        case .dictionary(let values): return values.mapValues(plain)
        }
    }

    static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }
}
