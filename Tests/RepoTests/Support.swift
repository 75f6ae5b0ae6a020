import Foundation

/// The seed for a randomized test: CAIRN_SEED if set, else random. Put it
/// in every failure message so a run can be replayed.
func testSeed() -> UInt64 {
  if let s = ProcessInfo.processInfo.environment["CAIRN_SEED"], let v = UInt64(s) { return v }
  return UInt64.random(in: 1...UInt64.max)
}

/// Whether the suite runs under ThreadSanitizer (`make test-tsan`), where
/// heavy tests do less.
let runningUnderTSan = ProcessInfo.processInfo.environment["CAIRN_SANITIZER"] == "thread"

/// A fresh folder under the system temp directory, removed when released.
final class TempFolder {
  let path = NSTemporaryDirectory() + "cairn-repo-\(UUID().uuidString)"
  deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Starts `cairn-store-worker MODE PATH` and returns once it has printed
/// `word` (the point a test kills it after).
func startWorker(_ mode: String, _ path: String, until word: String) throws -> Process {
  let p = Process()
  p.executableURL = URL(fileURLWithPath: SharedStoreTests.workerPath)
  p.arguments = [mode, path]
  let out = Pipe()
  p.standardOutput = out
  p.standardError = FileHandle.nullDevice
  try p.run()
  var seen = ""
  while !seen.contains(word) {
    let chunk = out.fileHandleForReading.availableData
    if chunk.isEmpty { break }
    seen += String(decoding: chunk, as: UTF8.self)
  }
  return p
}
