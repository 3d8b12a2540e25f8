import Foundation
import Logging
import NIOConcurrencyHelpers
import OutpostProtocol

/// Writes each log entry as one JSON object on one line of standard error, for log collectors:
/// `{"time":"…","severity":"ERROR","logger":"outpost","message":"…", …metadata}`.
///
/// The server's code decides what goes into an entry and never passes a token, a payload or a name; this
/// handler only formats it.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    /// Held while a line is written, so that lines from several threads never interleave.
    private static let writing = NIOLock()

    init(label: String, level: Logger.Level) {
        self.label = label
        self.logLevel = level
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var entry = metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 })
        entry["time"] = .string(Timestamp(Date()).iso8601)
        entry["severity"] = .string(Self.severity(event.level))
        entry["logger"] = .string(label)
        entry["message"] = .string(event.message.description)
        // Written with the protocol's JSON writer, no date formatter made per entry: the server logs every
        // request, so a log line must cost little beside the request it records.
        var line: [UInt8] = []
        line.reserveCapacity(256)
        Self.write(.dictionary(entry), to: &line)
        line.append(0x0A)
        Self.writing.withLock { FileHandle.standardError.write(Data(line)) }
    }

    /// A metadata value as JSON; an object's keys sorted.
    static func write(_ value: Logger.Metadata.Value, to output: inout [UInt8]) {
        switch value {
        case .string(let text): JSONWriter.string(text, to: &output)
        case .stringConvertible(let value): JSONWriter.string(value.description, to: &output)
        case .array(let values):
            output.append(UInt8(ascii: "["))
            for (position, value) in values.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                write(value, to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .dictionary(let values):
            output.append(UInt8(ascii: "{"))
            for (position, key) in JSONWriter.sortedKeys(values.keys).enumerated() {
                JSONWriter.key(key, first: position == 0, to: &output)
                write(values[key]!, to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
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
}
