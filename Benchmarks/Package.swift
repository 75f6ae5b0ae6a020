// swift-tools-version: 6.0
//
// The benchmark harness: Cairn side by side with SQLite and LMDB. Its own
// package, so the library itself links only liblz4, libxxhash and libcrypto; this one
// also links SQLite (libsqlite3-dev) and LMDB (liblmdb-dev), and loads
// SQLCipher (libsqlcipher-dev) at run time for workload 18.

import PackageDescription

let package = Package(
  name: "CairnBenchmarks",
  // Named explicitly: a path dependency is otherwise known by its folder name.
  dependencies: [.package(name: "Cairn", path: "..")],
  targets: [
    .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", providers: [.apt(["libsqlite3-dev"])]),
    .systemLibrary(name: "CLMDB", path: "Sources/CLMDB", providers: [.apt(["liblmdb-dev"])]),
    .executableTarget(
      name: "cairn-bench",
      dependencies: [
        .product(name: "Engine", package: "Cairn"), .product(name: "Repo", package: "Cairn"),
        .product(name: "EngineTestSupport", package: "Cairn"), "CSQLite", "CLMDB",
      ]
    ),
  ],
  swiftLanguageModes: [.v6]
)
