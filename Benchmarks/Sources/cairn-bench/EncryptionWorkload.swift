import Engine
import EngineTestSupport
import Foundation

// Workload 18: encryption at rest. Cairn encrypted against the same store
// in clear, and against SQLCipher (and plain SQLite, to show what
// SQLCipher's encryption costs it).

/// The key every encrypted system uses, raw (no key derivation in the timings).
let benchmarkKey: [UInt8] = (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ 3) }

/// Load, random reads and scans on an encrypted store.
struct EncryptedStore: Workload {
  let id = "18"
  let name = "encryption"
  let title =
    "Encrypted store, 1M records: load, random reads, full scan, range scans — Cairn encrypted (AES-256-GCM) "
    + "against Cairn in clear and SQLCipher (AES-256-CBC + HMAC), raw 256-bit keys"

  /// "cairn" here is the encrypted store; "cairn-clear" the same in clear;
  /// with SQLite chosen, SQLCipher runs too.
  func systems(chosen: [String]) -> [String] {
    chosen.flatMap { s -> [String] in
      switch s {
      case "cairn": ["cairn", "cairn-clear"]
      case "sqlite": ["sqlcipher", "sqlite"]
      case "lmdb": []
      default: [s]
      }
    }
  }

  func open(_ name: String, folder: String) throws -> any KVSystem {
    switch name {
    case "cairn": try CairnSystem(folder: folder, durable: true, encryption: .key(benchmarkKey))
    case "cairn-clear": try CairnSystem(folder: folder, durable: true)
    case "sqlcipher": try SQLCipherSystem(folder: folder, key: benchmarkKey)
    default: try openSystem(name, folder: folder)
    }
  }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let N = Workloads.label(n)
    let data = DataSet(count: n, values: .text, seed: c.seed)
    let s = try open(name, folder: c.folder + "/store")
    let load = try time { try s.load(data.keys, data.values) }
    out.add("load \(N), random keys, one durable transaction", .time, seconds: load, ops: n)
    // The size now, before any reader is open: SQLite's checkpoint to
    // truncate its WAL waits for readers.
    let size = try s.fileSize()

    let order = shuffledIndices(n, seed: c.seed ^ 18).map { data.keys[$0] }
    let reader = try s.reader()
    _ = try readAll(reader, order[...])  // warm
    let reads = try time { _ = try readAll(reader, order[...]) }
    out.add("\(N) random reads, warm", .time, seconds: reads, ops: n)

    try Scans.timeFullScan(reader, n, into: out)
    try Scans.timeRangeScans(reader, data, c, into: out)
    reader.close()

    // Cold reads: a fresh reader over a store just reopened, so every node
    // (or page) read is decrypted once more.
    try s.close()
    let again = try open(name, folder: c.folder + "/store")
    let cold = try again.reader()
    let coldCount = c.n(100_000)
    let coldReads = try time { _ = try readAll(cold, order.prefix(coldCount)) }
    out.add("\(Workloads.label(coldCount)) random reads after reopening", .time, seconds: coldReads, ops: coldCount)
    cold.close()
    out.add("file size", .size, seconds: 0, ops: n, bytes: size)
    try again.close()
  }
}
