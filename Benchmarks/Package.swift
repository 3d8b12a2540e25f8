// swift-tools-version: 6.1
// Micro-benchmarks of the device's local store, with ordo-one/benchmark:
//     cd Benchmarks && swift package benchmark
// A package of its own, so that CI and `swift test` never build it.
import Foundation
import PackageDescription

/// The Outpost package, one folder up; SwiftPM names a path dependency after its folder.
let outpost = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()

let package = Package(
    name: "OutpostBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: outpost.path),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.0", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.0.0"),
    ],
    targets: [
        .executableTarget(
            name: "LocalStoreBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "OutpostClient", package: outpost.lastPathComponent),
                .product(name: "OutpostProtocol", package: outpost.lastPathComponent),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Benchmarks/LocalStoreBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    ]
)
