import Engine
import EngineTestSupport
import Foundation
import Synchronization

/// Deterministic test data: the same seed gives every system the same keys
/// and values, generated before any timer starts.
struct DataSet {
  var keys: [[UInt8]]
  var values: [[UInt8]]
  /// The keys in ascending byte order.
  var sorted: [[UInt8]]

  enum Values: String {
    /// Half-compressible: 50 random printable bytes, repeated (db_bench's
    /// CompressibleString(0.5)); LZ4 roughly halves it.
    case text
    /// 100 random bytes: LZ4 cannot help.
    case random
  }

  /// `count` records with 16-byte random keys and 100-byte values.
  init(count: Int, values kind: Values, seed: UInt64) {
    var rng = SplitMix64(seed: seed)
    keys = (0..<count).map { _ in
      var k = [UInt8](repeating: 0, count: 16)
      for i in stride(from: 0, to: 16, by: 8) {
        let x = rng.next()
        for j in 0..<8 { k[i + j] = UInt8(truncatingIfNeeded: x >> (8 * UInt64(j))) }
      }
      return k
    }
    values = (0..<count).map { _ in Self.value(kind, &rng) }
    sorted = keys.sorted { $0.lexicographicallyPrecedes($1) }
  }

  static func value(_ kind: Values, _ rng: inout SplitMix64) -> [UInt8] {
    switch kind {
    case .text:
      let half = (0..<50).map { _ in UInt8(32 + rng.next() % 95) }
      return half + half
    case .random:
      return (0..<100).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
    }
  }
}

/// Monotonic seconds.
func now() -> Double {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// How long `body` takes. Also notes the peak resident memory while it
/// ran (``lastTimedPeak``), which a row recorded right after takes as its
/// peak memory unless it names its own.
func time(_ body: () throws -> Void) rethrows -> Double {
  resetPeakRSS()
  let t = now()
  try body()
  let elapsed = now() - t
  lastTimedPeak.store(peakRSSSinceReset(), ordering: .relaxed)
  return elapsed
}

/// The peak resident memory of the last `time { }` (0 if unknown).
let lastTimedPeak = Atomic<UInt64>(0)

/// Starts a new peak: Linux resets VmHWM to the current resident size when
/// "5" is written to clear_refs.
func resetPeakRSS() {
  let fd = open("/proc/self/clear_refs", O_WRONLY)
  guard fd >= 0 else { return }
  _ = write(fd, "5", 1)
  close(fd)
}

/// VmHWM: the peak resident memory since the process started or the last
/// ``resetPeakRSS()``; falls back to getrusage's lifetime peak.
func peakRSSSinceReset() -> UInt64 {
  guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
    let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
    let kb = line.split(separator: " ").dropFirst().first.flatMap({ UInt64($0) })
  else { return peakRSS() }
  return kb * 1024
}

/// Peak resident memory of this process so far, in bytes.
func peakRSS() -> UInt64 {
  var u = rusage()
  getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
  return UInt64(u.ru_maxrss) * 1024
}

/// Resident memory now, in bytes.
func currentRSS() -> UInt64 {
  guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
  let fields = text.split(separator: " ")
  guard fields.count > 1, let pages = UInt64(fields[1]) else { return 0 }
  return pages * UInt64(sysconf(Int32(_SC_PAGESIZE)))
}

/// Runs `body` on `threads` threads at once and waits for all.
func parallel(_ threads: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws {
  let group = DispatchGroup()
  let errors = ErrorBox()
  for t in 0..<threads {
    group.enter()
    Thread.detachNewThread {
      defer { group.leave() }
      do { try body(t) } catch { errors.set(error) }
    }
  }
  group.wait()
  if let e = errors.error { throw e }
}

final class ErrorBox: @unchecked Sendable {
  private let lock = NSLock()
  private var stored: Error?
  func set(_ e: Error) {
    lock.lock()
    if stored == nil { stored = e }
    lock.unlock()
  }
  var error: Error? {
    lock.lock()
    defer { lock.unlock() }
    return stored
  }
}

/// A flag one thread sets and others poll.
final class StopFlag: @unchecked Sendable {
  private let lock = NSLock()
  private var value = false
  func stop() {
    lock.lock()
    value = true
    lock.unlock()
  }
  var stopped: Bool {
    lock.lock()
    defer { lock.unlock() }
    return value
  }
}

/// A counter threads add to.
final class SharedCount: @unchecked Sendable {
  private let lock = NSLock()
  private var value = 0
  func add(_ n: Int) {
    lock.lock()
    value += n
    lock.unlock()
  }
  var current: Int {
    lock.lock()
    defer { lock.unlock() }
    return value
  }
}
