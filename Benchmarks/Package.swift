// swift-tools-version: 6.0
//
// The benchmark harness: Cairn side by side with SQLite and LMDB. Its own
// package, so the library itself links only liblz4 and libxxhash.

import PackageDescription

let package = Package(
  name: "CairnBenchmarks",
  // Named explicitly: a path dependency is otherwise known by its folder name.
  dependencies: [.package(name: "Cairn", path: "..")],
  targets: [
    .executableTarget(
      name: "cairn-bench",
      dependencies: [.product(name: "Engine", package: "Cairn")]
    )
  ],
  swiftLanguageModes: [.v6]
)
