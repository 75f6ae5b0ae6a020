// swift-tools-version: 6.0
//
// Cairn: an embedded storage engine for Swift.
//
// The library links only liblz4 (node compression) and libxxhash (checksums),
// both from Debian packages through system-library targets. The benchmark
// harness, which also links SQLite and LMDB, is its own package in Benchmarks/.

import PackageDescription

let package = Package(
  name: "Cairn",
  products: [
    .library(name: "Engine", targets: ["Engine"]),
    .library(name: "Repo", targets: ["Repo"]),
    // Test doubles (simulated and fault-injecting file systems, a seedable
    // random generator) for the tests, the fuzzers and the benchmarks.
    .library(name: "EngineTestSupport", targets: ["EngineTestSupport"]),
    .executable(name: "enginectl", targets: ["enginectl"]),
  ],
  targets: [
    .systemLibrary(
      name: "CLZ4",
      path: "Sources/CLZ4",
      providers: [.apt(["liblz4-dev"])]
    ),
    .systemLibrary(
      name: "CXXHash",
      path: "Sources/CXXHash",
      providers: [.apt(["libxxhash-dev"])]
    ),
    .target(name: "Engine", dependencies: ["CLZ4", "CXXHash"]),
    .target(name: "Repo", dependencies: ["Engine"]),
    .target(name: "EngineTestSupport", dependencies: ["Engine"]),
    .executableTarget(name: "enginectl", dependencies: ["Engine"]),
    // `make demo`: the README quick start, compiled and run as is.
    .executableTarget(name: "cairn-demo", dependencies: ["Engine"]),
    // `make demo`, part two: the README's models example.
    .executableTarget(name: "cairn-models-demo", dependencies: ["Repo"]),
    .executableTarget(name: "cairn-observe-demo", dependencies: ["Repo"]),
    // Child process for the crash tests: commits numbered transactions and
    // reports each one on stdout until it is killed.
    .executableTarget(name: "cairn-crash-writer", dependencies: ["Engine", "EngineTestSupport"]),
    // The file-reader fuzz target (libFuzzer with -DFUZZING; a plain build
    // replays inputs, which the test suite does with the saved corpus).
    .executableTarget(name: "FuzzStore", dependencies: ["Engine", "EngineTestSupport"]),
    .testTarget(name: "EngineTests", dependencies: ["Engine", "EngineTestSupport"]),
    .testTarget(name: "RepoTests", dependencies: ["Repo", "EngineTestSupport"]),
  ],
  swiftLanguageModes: [.v6]
)
