import Engine
import Foundation
import Testing

/// UTF-8 bytes of a string.
func b(_ s: String) -> [UInt8] { Array(s.utf8) }

/// A zero-padded decimal key, so byte order equals numeric order.
func key(_ i: Int, width: Int = 8) -> [UInt8] {
  let s = String(i)
  return Array((String(repeating: "0", count: max(0, width - s.count)) + s).utf8)
}

/// A fresh folder under the system temp directory, removed by `cleanup()`.
final class TempFolder {
  let path: String

  init(_ name: String = "cairn") {
    path = NSTemporaryDirectory() + "\(name)-\(UUID().uuidString)"
  }

  /// A path inside the folder that does not exist yet.
  func sub(_ name: String) -> String { path + "/" + name }

  deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Options for a store on an in-memory file system (shared across reopenings).
func memoryOptions(
  _ fs: any FileSystem, nodeSize: Int = 4096, checkpointThreshold: Int = 64 << 20,
  durability: Durability = .full
) -> Options {
  var o = Options()
  o.fileSystem = fs
  o.nodeSize = nodeSize
  o.checkpointThreshold = checkpointThreshold
  o.durability = durability
  return o
}

/// Every entry of a keyspace as a dictionary.
func contents(_ reader: some KeyValueReader, _ keyspace: String) throws -> [[UInt8]: [UInt8]] {
  var result: [[UInt8]: [UInt8]] = [:]
  for e in try reader.entries(in: keyspace) { result[e.key] = e.value }
  return result
}

/// The seed for a randomized test: CAIRN_SEED if set, else random. Printed
/// with every failure so a run can be replayed.
func testSeed() -> UInt64 {
  if let s = ProcessInfo.processInfo.environment["CAIRN_SEED"], let v = UInt64(s) { return v }
  return UInt64.random(in: 1...UInt64.max)
}

/// Lexicographic comparison of byte strings (the engine's key order).
func lexLess(_ a: [UInt8], _ b: [UInt8]) -> Bool { a.lexicographicallyPrecedes(b) }

/// Whether the suite runs under ThreadSanitizer (`make test-tsan` sets
/// CAIRN_SANITIZER=thread). Heavy single-threaded tests skip there: they
/// have no concurrency to check and run ten times slower.
let runningUnderTSan = ProcessInfo.processInfo.environment["CAIRN_SANITIZER"] == "thread"
