import Engine
import EngineTestSupport
import Foundation
import Synchronization

/// One measured row of one run of one system.
struct Measurement: Codable {
  enum Kind: String, Codable {
    /// `seconds` for `ops` operations; lower is better.
    case time
    /// `ops` done in `seconds`; higher ops/s is better.
    case throughput
    /// `bytes`; lower is better.
    case size
  }
  var workload: String
  var row: String
  var system: String
  var kind: Kind
  var seconds: Double
  var ops: Int
  var bytes: UInt64?
  var peakMemory: UInt64?
  var note: String?
}

/// What a child process is told to run.
struct Config: Codable {
  var scale: Double
  var seed: UInt64
  var folder: String

  func n(_ base: Int) -> Int { max(1, Int((Double(base) * scale).rounded())) }
  var records: Int { n(1_000_000) }
}

/// Opens `name`'s store in `folder`. `cacheBytes` sets Cairn's node cache
/// and SQLite's page cache (LMDB has none: it reads through its map).
func openSystem(_ name: String, folder: String, durable: Bool = true, cacheBytes: Int? = nil) throws -> any KVSystem {
  switch name {
  case "cairn", "cairn-perkey":
    return try CairnSystem(folder: folder, durable: durable, encryption: nil, cacheBytes: cacheBytes)
  case "sqlite": return try SQLiteSystem(folder: folder, durable: durable, cacheBytes: cacheBytes ?? 128 << 20)
  case "lmdb": return try LMDBSystem(folder: folder, durable: durable)
  default: throw BenchError("unknown system \(name)")
  }
}

/// Opens another handle on the same store for a second writer thread:
/// SQLite needs a connection per thread; Cairn and LMDB share theirs.
func secondWriter(_ system: any KVSystem, name: String, folder: String) throws -> any KVSystem {
  name == "sqlite" ? try SQLiteSystem(folder: folder, durable: true) : system
}

/// Reads `keys` in the given order through one reader, checking every one is found.
func readAll(_ reader: KVReader, _ keys: ArraySlice<[UInt8]>, expectFound: Bool = true) throws -> Int {
  var found = 0
  for k in keys where try reader.get(k) >= 0 { found += 1 }
  if expectFound && found != keys.count { throw BenchError("found \(found) of \(keys.count) keys") }
  return found
}

/// A fixed random order over 0..<n.
func shuffledIndices(_ n: Int, seed: UInt64) -> [Int] {
  var rng = SplitMix64(seed: seed)
  var order = Array(0..<n)
  order.shuffle(using: &rng)
  return order
}

/// Collects the measurements of one run of one workload on one system.
final class Recorder {
  let workload: String
  let system: String
  private(set) var measurements: [Measurement] = []

  init(workload: String, system: String) {
    self.workload = workload
    self.system = system
  }

  /// Records one row.
  func add(
    _ row: String, _ kind: Measurement.Kind, seconds: Double, ops: Int, bytes: UInt64? = nil,
    memory: UInt64? = nil, note: String? = nil, system: String? = nil
  ) {
    measurements.append(
      Measurement(
        workload: workload, row: row, system: system ?? self.system, kind: kind, seconds: seconds, ops: ops,
        bytes: bytes, peakMemory: memory ?? timedPeak(kind), note: note))
  }
}

/// The peak memory of the last timed body, for a timed row.
private func timedPeak(_ kind: Measurement.Kind) -> UInt64? {
  let peak = lastTimedPeak.load(ordering: .relaxed)
  return kind == .size || peak == 0 ? nil : peak
}

/// A workload of the harness: what it measures, on which systems, and how.
protocol Workload: Sendable {
  /// Its number in the tables ("1").
  var id: String { get }
  /// Its short name for `--workloads` ("load").
  var name: String { get }
  /// One line saying what it measures.
  var title: String { get }
  /// The systems it runs on, of those chosen on the command line.
  func systems(chosen: [String]) -> [String]
  /// Whether a child must first build the store (`run` with `build` true)
  /// in its own process, so the measured child's peak memory excludes loading.
  var needsBuild: Bool { get }
  /// Runs it once on `system`, recording rows into `out`.
  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws
}

extension Workload {
  func systems(chosen: [String]) -> [String] { chosen }
  var needsBuild: Bool { false }
}

/// Every workload, in table order, found by id or name.
enum Workloads {
  static let all: [any Workload] = [
    BulkLoad(),
    DurableCommits(),
    RandomReads(),
    Scans(),
    BatchDelete(),
    BatchUpdate(),
    BatchedRead(),
    ReadsDuringWrites(),
    FileSize(),
    DiskLimit(),
    Models(),
    Codec(),
    Changes(),
    Processes(),
    Migration(),
    Relationships(),
    TextSearch(),
    EncryptedStore(),
    LargeStore(),
  ]

  /// The workload with this id or name.
  static func named(_ idOrName: some StringProtocol) -> (any Workload)? {
    all.first { $0.id == idOrName || $0.name == idOrName }
  }

  static func label(_ n: Int) -> String {
    if n >= 1_000_000 && n % 1_000_000 == 0 { return "\(n / 1_000_000)M" }
    if n >= 1_000 && n % 1_000 == 0 { return "\(n / 1_000)K" }
    return String(n)
  }
}
