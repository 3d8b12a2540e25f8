import Foundation
import PostgresNIO
import Testing

@testable import OutpostServer

/// The database URL, and the pool it configures: at most `pool_size` connections, without keep-alive timers.
@Suite("PostgreSQL location")
struct PostgresLocationTests {
    @Test("a URL gives host, port, user, database, TLS mode, pool size and operation timeout; the pool has no keep-alive and a short idle timeout")
    func parsesAndConfigures() throws {
        let plain = try PostgresLocation(url: "postgres://app:s3cret@db.example:6543/outpost")
        #expect(plain.host == "db.example")
        #expect(plain.port == 6543)
        #expect(plain.username == "app")
        #expect(plain.password == "s3cret")
        #expect(plain.database == "outpost")
        #expect(plain.tlsMode == "prefer")
        #expect(plain.poolSize == 32)
        #expect(plain.operationTimeout == .seconds(20))
        let sized = try PostgresLocation(
            url: "postgresql://app@db.example/outpost?sslmode=disable&pool_size=8&operation_timeout=45")
        #expect(sized.poolSize == 8)
        #expect(sized.operationTimeout == .seconds(45))
        #expect(sized.tlsMode == "disable")
        // No keep-alive timers, and short idle timers: each is started whenever a connection goes back to the pool.
        let options = sized.clientConfiguration.options
        #expect(options.maximumConnections == 8)
        #expect(options.minimumConnections == 0)
        #expect(options.connectionIdleTimeout == .seconds(10))
        #expect(options.keepAliveBehavior == nil)
    }

    @Test(
        "a bad URL is refused with a configuration error that names what is wrong, never the password",
        arguments: [
            ("mysql://app:s3cret@db/outpost", "postgres://"),
            ("postgres://app:s3cret@/outpost", "no host"),
            ("postgres://app:s3cret@db/", "no database"),
            ("postgres://app:s3cret@db/outpost?sslmode=verify", "sslmode"),
            ("postgres://app:s3cret@db/outpost?pool_size=0", "pool_size"),
            ("postgres://app:s3cret@db/outpost?pool_size=1001", "pool_size"),
            ("postgres://app:s3cret@db/outpost?pool_size=eight", "pool_size"),
            ("postgres://app:s3cret@db/outpost?pool_size=", "pool_size"),
            ("postgres://app:s3cret@db/outpost?operation_timeout=0", "operation_timeout"),
            ("postgres://app:s3cret@db/outpost?operation_timeout=601", "operation_timeout"),
            ("postgres://app:s3cret@db/outpost?operation_timeout=1.5", "operation_timeout"),
        ])
    func refusesBadURLs(url: String, names: String) {
        #expect {
            _ = try PostgresLocation(url: url)
        } throws: { error in
            guard let error = error as? StorageError else { return false }
            return error.code == .configuration && "\(error)".contains(names) && !"\(error)".contains("s3cret")
        }
    }
}
