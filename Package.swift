// swift-tools-version: 6.0
//
// Cairn: an embedded storage engine for Swift.
//
// The library links only liblz4 (node compression), libxxhash (checksums)
// and libcrypto (encryption at rest), all from Debian packages through
// system-library targets. The benchmark
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
    // AES-256-GCM, PBKDF2 and random bytes for encrypted stores (libcrypto).
    .systemLibrary(
      name: "CCrypto",
      path: "Sources/CCrypto",
      providers: [.apt(["libssl-dev"])]
    ),
    .systemLibrary(
      name: "CXXHash",
      path: "Sources/CXXHash",
      providers: [.apt(["libxxhash-dev"])]
    ),
    // Atomic loads and stores: on the coordination file's shared mapping
    // (Engine), and on where byte predicates last found a field (Repo).
    .target(name: "CAtomics", path: "Sources/CAtomics"),
    .target(name: "Engine", dependencies: ["CLZ4", "CXXHash", "CAtomics", "CCrypto"]),
    .target(name: "Repo", dependencies: ["Engine", "CAtomics", "CXXHash"]),
    .target(name: "EngineTestSupport", dependencies: ["Engine"]),
    // enginectl's commands, as a library the executable, the tests and the
    // fuzzer run.
    .target(name: "EnginectlKit", dependencies: ["Engine"]),
    .executableTarget(name: "enginectl", dependencies: ["EnginectlKit"]),
    // `make demo`: the README quick start, compiled and run as is.
    .executableTarget(name: "cairn-demo", dependencies: ["Engine"]),
    // `make demo`, part two: the README's models example.
    .executableTarget(name: "cairn-models-demo", dependencies: ["Repo"]),
    .executableTarget(name: "cairn-observe-demo", dependencies: ["Repo"]),
    .executableTarget(name: "cairn-schema-demo", dependencies: ["Repo"]),
    .executableTarget(name: "cairn-relationships-demo", dependencies: ["Repo"]),
    .executableTarget(name: "cairn-search-demo", dependencies: ["Repo"]),
    // Child process for the crash tests: commits numbered transactions and
    // reports each one on stdout until it is killed.
    .executableTarget(name: "cairn-crash-writer", dependencies: ["Engine", "EngineTestSupport"]),
    // Child processes for the multi-process tests: writers, followers, a
    // lock holder, a repository writer.
    .executableTarget(name: "cairn-store-worker", dependencies: ["Engine", "Repo"]),
    // The fuzz targets: the harnesses (FuzzTargets) and one executable each,
    // libFuzzer's with -DFUZZING; a plain build replays inputs. `make fuzz`.
    .target(name: "FuzzTargets", dependencies: ["Engine", "Repo", "EnginectlKit", "EngineTestSupport"]),
    .executableTarget(name: "FuzzStore", dependencies: ["FuzzTargets"]),
    .executableTarget(name: "FuzzWAL", dependencies: ["FuzzTargets"]),
    .executableTarget(name: "FuzzRecord", dependencies: ["FuzzTargets"]),
    .executableTarget(name: "FuzzHistory", dependencies: ["FuzzTargets"]),
    .executableTarget(name: "FuzzCLI", dependencies: ["FuzzTargets"]),
    .executableTarget(name: "FuzzOps", dependencies: ["FuzzTargets"]),
    .executableTarget(name: "FuzzShm", dependencies: ["FuzzTargets"]),
    .testTarget(name: "EngineTests", dependencies: ["Engine", "EngineTestSupport", "FuzzTargets"]),
    .testTarget(name: "RepoTests", dependencies: ["Repo", "EngineTestSupport", "EnginectlKit"]),
  ],
  swiftLanguageModes: [.v6]
)
