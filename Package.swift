// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Outpost",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "OutpostProtocol", targets: ["OutpostProtocol"]),
        .library(name: "OutpostRecords", targets: ["OutpostRecords"]),
        .library(name: "OutpostClient", targets: ["OutpostClient"]),
        .library(name: "OutpostServer", targets: ["OutpostServer"]),
        .library(name: "OutpostApps", targets: ["OutpostApps"]),
        .library(name: "OutpostHTTP", targets: ["OutpostHTTP"]),
        .library(name: "OutpostURLSession", targets: ["OutpostURLSession"]),
        .library(name: "OutpostTesting", targets: ["OutpostTesting"]),
        .executable(name: "outpost", targets: ["outpost"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.0.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.0"),
        .package(url: "https://github.com/apple/swift-async-algorithms.git", from: "1.0.0"),
        .package(url: "https://github.com/swift-extras/swift-extras-base64.git", from: "1.2.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/pointfreeco/swift-clocks.git", from: "1.0.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.0"),
        // Tests only: a client generated from openapi.yaml, as a team that does not use the SDK would make one.
        .package(url: "https://github.com/apple/swift-openapi-generator.git", from: "1.14.0"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.0"),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.0.0"),
        // Tests only: child processes without Foundation's `Process`, whose launch can crash on Linux.
        .package(url: "https://github.com/swiftlang/swift-subprocess.git", from: "1.0.0"),
        .package(url: "https://github.com/apple/swift-system.git", from: "1.5.0"),
    ],
    targets: [
        .target(
            name: "OutpostProtocol", dependencies: [.product(name: "ExtrasBase64", package: "swift-extras-base64")]),
        // What the server and the SDK share beyond the wire: deadlines for many operations on one task.
        .target(
            name: "OutpostConcurrency",
            dependencies: [.product(name: "NIOConcurrencyHelpers", package: "swift-nio")]
        ),
        // The field apps' collections: their names, fields and rules, shared by the server, the SDK and the apps.
        .target(
            name: "OutpostRecords",
            dependencies: ["OutpostProtocol", .product(name: "Crypto", package: "swift-crypto")]),
        .target(
            name: "OutpostClient",
            dependencies: [
                "OutpostProtocol",
                "OutpostConcurrency",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
            ]
        ),
        // The HTTP transport on AsyncHTTPClient, apart: an app on URLSession (OutpostURLSession) links no NIO stack.
        .target(
            name: "OutpostHTTP",
            dependencies: [
                "OutpostProtocol",
                "OutpostConcurrency",
                "OutpostClient",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ]
        ),
        .target(
            name: "OutpostServer",
            dependencies: [
                "OutpostProtocol",
                "OutpostConcurrency",
                "OutpostRecords",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "Yams", package: "Yams"),
            ],
            resources: [.copy("Resources/openapi.yaml"), .copy("Resources/Templates")]
        ),
        // Its own target: on Linux, URLSession (FoundationNetworking) costs every process that links it about 8 MB.
        .target(name: "OutpostURLSession", dependencies: ["OutpostProtocol", "OutpostClient"]),
        .target(
            name: "OutpostApps",
            dependencies: ["OutpostProtocol", "OutpostRecords", "OutpostClient"]
        ),
        .target(
            name: "OutpostTesting",
            dependencies: [
                "OutpostProtocol", "OutpostClient", "OutpostRecords",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "outpost",
            dependencies: [
                "OutpostRecords",
                "OutpostServer",
                "OutpostClient",
                "OutpostHTTP",
                "OutpostApps",
                // The benchmarks' doubles: a port that never answers.
                "OutpostTesting",
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The generated client: built from openapi.yaml by the generator's plugin at every build, never edited.
        .target(
            name: "OutpostOpenAPIClient",
            dependencies: [
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            path: "Tests/OpenAPIClient",
            // The generated files import more than each uses; their warnings say nothing about Outpost.
            swiftSettings: [.unsafeFlags(["-suppress-warnings"])],
            plugins: [.plugin(name: "OpenAPIGenerator", package: "swift-openapi-generator")]
        ),
        // The app of OutpostApps' article "Building the attendance screen", built without package access, as an
        // app's own package would be: the compiler refuses anything of the SDK that is not public.
        .target(
            name: "OutpostArticleApp",
            dependencies: ["OutpostApps", "OutpostClient", "OutpostURLSession"],
            path: "Tests/ArticleApp",
            packageAccess: false
        ),
        .testTarget(name: "OutpostProtocolTests", dependencies: ["OutpostProtocol"]),
        .testTarget(name: "OutpostRecordsTests", dependencies: ["OutpostRecords"]),
        .testTarget(
            name: "OutpostClientTests",
            dependencies: [
                "OutpostClient",
                "OutpostHTTP",
                "OutpostApps",
                "OutpostConcurrency",
                "OutpostRecords",
                "OutpostTesting",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Clocks", package: "swift-clocks"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "OutpostAppsTests",
            dependencies: [
                "OutpostApps",
                "OutpostRecords",
                "OutpostTesting",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Clocks", package: "swift-clocks"),
            ]
        ),
        .testTarget(
            name: "OutpostServerTests",
            dependencies: [
                "OutpostServer",
                "OutpostConcurrency",
                "OutpostRecords",
                "OutpostClient",
                "OutpostHTTP",
                "OutpostApps",
                "OutpostURLSession",
                "OutpostTesting",
                "OutpostOpenAPIClient",
                "OutpostArticleApp",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Clocks", package: "swift-clocks"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
