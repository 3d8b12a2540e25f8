/// Writing pieces of JSON, for the types that write themselves without `JSONEncoder`.
public enum JSONWriter {
    /// A string literal, with the escapes JSON requires and no others.
    public static func string(_ value: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            // Runs that need no escape, most strings whole, are copied at once.
            var run = 0
            for position in 0..<bytes.count {
                let byte = bytes[position]
                guard byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 else { continue }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<position]))
                escape(byte, to: &output)
                run = position + 1
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run...]))
        }
        output.append(UInt8(ascii: "\""))
    }

    private static func escape(_ byte: UInt8, to output: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
        case UInt8(ascii: "\\"): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
        case 0x0A: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
        case 0x0D: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
        case 0x09: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
        case 0x08: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
        case 0x0C: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
        default:
            let hex = Array("0123456789abcdef".utf8)
            output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            output.append(hex[Int(byte >> 4)])
            output.append(hex[Int(byte & 0xF)])
        }
    }

    /// An array whose elements `write` writes, commas between.
    public static func array<Element>(
        _ elements: some Sequence<Element>, to output: inout [UInt8],
        write: (Element, inout [UInt8]) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "["))
        var first = true
        for element in elements {
            if !first { output.append(UInt8(ascii: ",")) }
            first = false
            try write(element, &output)
        }
        output.append(UInt8(ascii: "]"))
    }

    /// An object, keys sorted.
    public static func object(_ object: [String: JSONValue], to output: inout [UInt8]) throws(JSONSyntaxError) {
        output.append(UInt8(ascii: "{"))
        for (position, key) in sortedKeys(object.keys).enumerated() {
            if position > 0 { output.append(UInt8(ascii: ",")) }
            string(key, to: &output)
            output.append(UInt8(ascii: ":"))
            try object[key]!.write(to: &output)
        }
        output.append(UInt8(ascii: "}"))
    }

    /// Keys in the order a sorted-key `JSONEncoder` writes them: by their UTF-8 bytes. Swift's `<` compares
    /// canonical equivalents instead, which orders a decomposed "é" differently, and the server hashes these
    /// bytes.
    public static func sortedKeys(_ keys: some Sequence<String>) -> [String] {
        keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    /// `"key":` after a `{` or a `,`, as `first` says.
    public static func key(_ key: String, first: Bool = false, to output: inout [UInt8]) {
        if !first { output.append(UInt8(ascii: ",")) }
        string(key, to: &output)
        output.append(UInt8(ascii: ":"))
    }
}
