import AsyncHTTPClient
import Foundation
import NIOSSL
import Testing

/// `outpost serve --tls-cert --tls-key` as a real process: HTTPS with HTTP/2 and HTTP/1.1 chosen by ALPN,
/// with a certificate the test makes.
@Suite("TLS", .requires(.openssl), .timeLimit(.minutes(3)))
struct TLSTests {
    @Test("serve speaks HTTPS, HTTP/2 and HTTP/1.1, with the certificate it was given; bad TLS options are one line and exit 1")
    func https() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-tls-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let certificate = root.appendingPathComponent("cert.pem").path
        let key = root.appendingPathComponent("key.pem").path
        let made = try await Child.run(
            "openssl",
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", certificate,
            ])
        try #require(made.status == 0, "\(made.output)")
        let data = root.appendingPathComponent("server").path

        for (arguments, message) in [
            (["--tls-cert", certificate], "give --tls-cert and --tls-key together"),
            (["--tls-cert", key, "--tls-key", key], "--tls-cert: \(key) holds no"),
            (["--tls-cert", certificate, "--tls-key", certificate], "--tls-key: \(certificate) holds no readable PEM private key"),
        ] {
            let refused = try await OutpostProcess.run(["serve", "--port", "0", "--data-dir", data] + arguments)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains(message), "\(refused.stderr)")
            #expect(refused.stderr.split(separator: "\n").count <= 2, "\(refused.stderr)")
        }

        let server = try await OutpostProcess.start(
            ["serve", "--port", "0", "--data-dir", data, "--tls-cert", certificate, "--tls-key", key])
        let port = try await server.waitFor(#"listening on https://127\.0\.0\.1:(\d+)"#)
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(certificate))
        for (version, expected) in [(HTTPClient.Configuration.HTTPVersion.automatic, "2"), (.http1Only, "1.1")] {
            var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
            configuration.httpVersion = version
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            let response = try await client.execute(HTTPClientRequest(url: "https://127.0.0.1:\(port)/health"), timeout: .seconds(20))
            #expect(response.status == .ok)
            #expect("\(response.version.major)\(response.version.major == 1 ? ".\(response.version.minor)" : "")" == expected)
            try await client.shutdown()
        }
        // Plain HTTP on the HTTPS port gets no answer.
        let plain = HTTPClient(eventLoopGroupProvider: .singleton)
        await #expect(throws: (any Error).self) {
            _ = try await plain.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/health"), timeout: .seconds(5))
        }
        try await plain.shutdown()
        #expect(await server.stop() == 0)
    }
}
