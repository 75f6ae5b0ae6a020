import Engine
import EngineTestSupport
import Foundation
import Testing

/// Point reads of a store larger than its node cache: once the cache is
/// full, a leaf is kept only on its second miss within a short window, and
/// one it does not keep is searched where it was read. Every answer must be
/// what a decoded, cached leaf would give.
@Suite struct PointReadTests {
  /// Value of key `i`: every 97th a large value (its own block), every
  /// 13th empty, the rest short.
  static func value(_ i: Int) -> [UInt8] {
    if i % 97 == 0 { return (0..<(1500 + i % 700)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) } }
    if i % 13 == 0 { return [] }
    return b("value \(i) padded to a realistic length")
  }

  /// A closed store of 20,000 keys (even numbers only, so odd ones fall
  /// between), and the node-cache budget a quarter of what reading it all
  /// takes.
  static func store() throws -> (MemoryFileSystem, n: Int, cacheSize: Int) {
    let fs = MemoryFileSystem()
    let n = 20_000
    var db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 1024))
    try db.write { tx in
      for i in 0..<n { try tx.put(key(2 * i), value(i), in: "ks") }
    }
    try db.close()
    db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 1024))
    for i in 0..<n { _ = try db.snapshot().get(key(2 * i), in: "ks") }
    let whole = db.statistics.cacheBytes
    try db.close()
    return (fs, n, whole / 4)
  }

  static func open(_ fs: MemoryFileSystem, cacheSize: Int) throws -> Database {
    var options = memoryOptions(fs, nodeSize: 1024)
    options.cacheSize = cacheSize
    return try Database.open(at: "/s", options: options)
  }

  @Test func readsOfAStoreFourTimesItsCacheFindEveryValue() throws {
    let (fs, n, cacheSize) = try Self.store()
    let db = try Self.open(fs, cacheSize: cacheSize)
    defer { try? db.close() }
    var rng = SplitMix64(seed: testSeed())
    let snap = try db.snapshot()
    for _ in 0..<3 * n {
      let probe = Int(rng.next() % UInt64(2 * n + 2))
      let want = probe % 2 == 0 && probe < 2 * n ? Self.value(probe / 2) : nil
      switch rng.next() % 3 {
      case 0: #expect(try snap.get(key(probe), in: "ks") == want, "get \(probe)")
      case 1: #expect(try snap.withValue(for: key(probe), in: "ks") { Array($0) } == want, "withValue \(probe)")
      default: #expect(try snap.contains(key(probe), in: "ks") == (want != nil), "contains \(probe)")
      }
    }
    // Before the first key and past the last.
    #expect(try snap.get([0], in: "ks") == nil)
    #expect(try snap.get([0xFF, 0xFF], in: "ks") == nil)
    #expect(db.statistics.cacheBytes <= cacheSize)
  }

  /// A body that reads again while the outer read's value is still in use
  /// (both from memory the thread reuses) sees both values intact.
  @Test func aReadInsideAnotherReadsBodyLeavesTheOuterValueIntact() throws {
    let (fs, n, cacheSize) = try Self.store()
    let db = try Self.open(fs, cacheSize: cacheSize)
    defer { try? db.close() }
    let snap = try db.snapshot()
    var rng = SplitMix64(seed: testSeed())
    for i in 0..<n { _ = try snap.get(key(2 * i), in: "ks") }  // fills the cache
    for _ in 0..<2000 {
      let (a, c) = (Int(rng.next() % UInt64(n)), Int(rng.next() % UInt64(n)))
      let inner = try snap.withValue(for: key(2 * a), in: "ks") { outer -> [UInt8]? in
        let before = Array(outer)
        let inner = try snap.withValue(for: key(2 * c), in: "ks") { Array($0) }
        #expect(Array(outer) == before && before == Self.value(a), "outer \(a) after inner \(c)")
        return inner
      }
      #expect(inner == Self.value(c), "inner \(c) inside outer \(a)")
    }
  }

  /// Once the cache is full, leaves read once do not push out leaves read
  /// again and again; and those, read twice, get in.
  @Test func aWorkingSetGetsIntoAFullCacheAndOneTimeReadsDoNotPushItOut() throws {
    let (fs, n, cacheSize) = try Self.store()
    let db = try Self.open(fs, cacheSize: cacheSize)
    defer { try? db.close() }
    let snap = try db.snapshot()
    for i in 0..<n { _ = try snap.get(key(2 * i), in: "ks") }  // fills the cache
    let hot = (0..<24).map { $0 * (n / 24) }
    func readHot() throws {
      for i in hot { #expect(try snap.get(key(2 * i), in: "ks") == Self.value(i)) }
    }
    for _ in 0..<4 { try readHot() }
    var misses = db.statistics.nodeCacheMisses
    try readHot()
    #expect(db.statistics.nodeCacheMisses == misses, "the hot keys' leaves should be cached after repeated reads")
    // Keys far enough apart that no leaf is read twice, twice the cache's
    // worth of leaves: each is read once and should be passed by.
    for i in stride(from: 7, to: n, by: 40) { _ = try snap.get(key(2 * i), in: "ks") }
    misses = db.statistics.nodeCacheMisses
    try readHot()
    #expect(db.statistics.nodeCacheMisses == misses, "one-time reads should not have evicted the hot leaves")
    #expect(db.statistics.cacheBytes <= cacheSize)
  }

  /// Readers on four threads over a full cache, through the per-thread
  /// scratch memory; run under ThreadSanitizer by `make test-tsan`.
  @Test func readersOnFourThreadsOverAFullCacheFindEveryValue() throws {
    let (fs, n, cacheSize) = try Self.store()
    let db = try Self.open(fs, cacheSize: cacheSize)
    defer { try? db.close() }
    let wrong = Counter()
    let failures = Counter()
    let seed = testSeed()
    DispatchQueue.concurrentPerform(iterations: 4) { t in
      var rng = SplitMix64(seed: seed &+ UInt64(t))
      do {
        let snap = try db.snapshot()
        for _ in 0..<4000 {
          let i = Int(rng.next() % UInt64(n))
          if try snap.get(key(2 * i), in: "ks") != Self.value(i) { wrong.add() }
        }
      } catch {
        failures.add()
      }
    }
    #expect(wrong.value == 0 && failures.value == 0)
  }
}

/// A count several threads add to.
final class Counter: @unchecked Sendable {
  private let lock = NSLock()
  private var count = 0
  func add() { lock.withLock { count += 1 } }
  var value: Int { lock.withLock { count } }
}
