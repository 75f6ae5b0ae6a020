import Engine
import EngineTestSupport
import Foundation
import Testing

@Suite struct SnapshotTests {
  @Test func aSnapshotOutlivesTenThousandCommitsAndCheckpoints() throws {
    let fs = MemoryFileSystem()
    // A low threshold makes checkpoints run by themselves among the commits.
    let db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 1024, checkpointThreshold: 64 << 10))
    try db.write { tx in
      for i in 0..<2_000 { try tx.put(key(i), b("v0-\(i)"), in: "ks") }
    }
    let old = try db.snapshot()
    let expected = try contents(old, "ks")
    let checkpointsBefore = db.statistics.checkpoints
    var rng = SplitMix64(seed: 3)
    for n in 1...10_000 {
      try db.write { tx in
        let i = Int(rng.next() % 2_000)
        try tx.put(key(i), b("v\(n)-\(i)"), in: "ks")
        if n % 500 == 0 { try tx.deleteRange(from: key(i), to: key(i + 100), in: "ks") }
        if n % 997 == 0 { try tx.put(key(5_000 + n), [UInt8](repeating: 9, count: 5_000), in: "ks") }
      }
      if n % 2_500 == 0 { try db.checkpoint() }
    }
    #expect(db.statistics.checkpoints - checkpointsBefore >= 4)
    #expect(try contents(old, "ks") == expected)
    #expect(try old.count(in: "ks") == 2_000)
    #expect(try old.get(key(7), in: "ks") == b("v0-7"))
    #expect(old.verify().isClean)
    // The new state differs, and a new snapshot sees it.
    #expect(try contents(try db.snapshot(), "ks") != expected)
    try db.close()
  }

  @Test func readersAlwaysSeeTheBalanceInvariantWhileAWriterTransfers() throws {
    let accounts = 200
    let initial = 1_000
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/bank", options: memoryOptions(fs, nodeSize: 512, checkpointThreshold: 32 << 10))
    try db.write { tx in
      for a in 0..<accounts { try tx.put(key(a), b(String(initial)), in: "balances") }
    }

    final class Flag: @unchecked Sendable {
      private let lock = NSLock()
      private var value = false
      func set() { lock.lock(); value = true; lock.unlock() }
      var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
    }
    let stop = Flag()
    let readerCount = 3
    let group = DispatchGroup()
    let results = (0..<readerCount).map { _ in Locked2<(reads: Int, bad: [String])>((0, [])) }

    for r in 0..<readerCount {
      group.enter()
      Thread.detachNewThread {
        defer { group.leave() }
        while !stop.isSet {
          do {
            let snap = try db.snapshot()
            let cursor = try snap.cursor(in: "balances")
            var sum = 0
            var n = 0
            while let e = try cursor.next() {
              sum += Int(String(decoding: e.value, as: UTF8.self)) ?? -1_000_000
              n += 1
            }
            // Point reads from the same snapshot agree with the scan.
            let probe = Int.random(in: 0..<accounts)
            let again = try snap.get(key(probe), in: "balances")
            let scanned = try snap.cursor(in: "balances", range: .prefix(key(probe))).next()?.value
            results[r].update { value in
              value.reads += 1
              if sum != accounts * initial || n != accounts {
                value.bad.append("sequence \(snap.sequence): sum \(sum), \(n) accounts")
              }
              if again != scanned { value.bad.append("sequence \(snap.sequence): get and cursor disagree") }
            }
          } catch {
            results[r].update { $0.bad.append("\(error)") }
          }
        }
      }
    }

    var rng = SplitMix64(seed: testSeed())
    let transfers = 3_000
    for _ in 0..<transfers {
      try db.write { tx in
        let from = Int(rng.next() % UInt64(accounts))
        let to = Int(rng.next() % UInt64(accounts))
        let amount = Int(rng.next() % 50)
        let a = Int(String(decoding: try tx.get(key(from), in: "balances")!, as: UTF8.self))!
        try tx.put(key(from), b(String(a - amount)), in: "balances")
        let c = Int(String(decoding: try tx.get(key(to), in: "balances")!, as: UTF8.self))!
        try tx.put(key(to), b(String(c + amount)), in: "balances")
      }
    }
    stop.set()
    group.wait()
    let total = results.reduce(0) { $0 + $1.read { $0.reads } }
    for r in results { #expect(r.read { $0.bad }.isEmpty, "\(r.read { $0.bad.prefix(3) })") }
    #expect(total > readerCount, "readers made only \(total) reads")
    #expect(db.statistics.checkpoints > 0)
    print("snapshot isolation: \(transfers) transfers, \(total) consistent full reads by \(readerCount) threads")
    try db.close()
  }

  /// Random puts into a large store copy many leaves for a small WAL
  /// record; past checkpointMemoryThreshold of copies a checkpoint runs
  /// (and frees them) however small the WAL still is.
  @Test func copiesPastTheMemoryThresholdCheckpointBeforeTheWALDoes() throws {
    func run(memoryThreshold: Int?) throws -> (checkpoints: Int, walBytes: Int) {
      let fs = MemoryFileSystem()
      var options = memoryOptions(fs, nodeSize: 1024)
      options.checkpointMemoryThreshold = memoryThreshold
      var db = try Database.open(at: "/m", options: options)
      try db.write { tx in for i in 0..<20_000 { try tx.put(key(i), b("value \(i)"), in: "ks") } }
      try db.checkpoint()
      let before = db.statistics
      var rng = SplitMix64(seed: 11)
      var expected: [[UInt8]: [UInt8]] = [:]
      for t in 0..<20 {
        try db.write { tx in
          for _ in 0..<200 {
            let k = key(Int(rng.next() % 20_000))
            try tx.put(k, b("t\(t)"), in: "ks")
            expected[k] = b("t\(t)")
          }
        }
      }
      let after = db.statistics.since(before)
      try db.close()
      db = try Database.open(at: "/m", options: options)
      for (k, v) in expected { #expect(try db.read { try $0.get(k, in: "ks") } == v) }
      #expect(try db.read { try $0.count(in: "ks") } == 20_000)
      try db.close()
      return (after.checkpoints, after.walBytesWritten)
    }
    // 200 random puts copy ~180 leaves of 1 KB each: past 64 KiB every transaction.
    let bounded = try run(memoryThreshold: 64 << 10)
    #expect(bounded.checkpoints >= 15, "\(bounded)")
    #expect(bounded.walBytes < 1 << 20, "the WAL alone would not have checkpointed: \(bounded)")
    let unbounded = try run(memoryThreshold: nil)
    #expect(unbounded.checkpoints == 0, "\(unbounded)")
    var bad = memoryOptions(MemoryFileSystem())
    bad.checkpointMemoryThreshold = 100
    #expect(throws: EngineError.self) { try Database.open(at: "/x", options: bad) }
  }

  /// Runs `body(t)` for t in 0..<count, each on a thread of its own (real
  /// threads: concurrentPerform would run only one per core), and returns
  /// the errors they threw.
  static func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) throws -> Void) -> [String] {
    let group = DispatchGroup()
    let failures = Locked2<[String]>([])
    for t in 0..<count {
      group.enter()
      Thread.detachNewThread {
        defer { group.leave() }
        do { try body(t) } catch { failures.update { $0.append("\(error)") } }
      }
    }
    group.wait()
    return failures.read { $0 }
  }

  /// The cache counters are split per thread (StripedCounter); reads on
  /// several threads at once must still all be counted.
  @Test func nodeReadsOnSeveralThreadsAreAllCounted() throws {
    let folder = TempFolder("striped")
    var options = Options()
    options.cacheSize = 64 << 20
    let db = try Database.open(at: folder.path, options: options)
    try db.write { tx in for i in 0..<20_000 { try tx.put(key(i), b("value \(i)"), in: "ks") } }
    try db.checkpoint()
    let snapshot = try db.snapshot()
    let keys = (0..<2_000).map { key($0 * 10) }
    @Sendable func readAll() throws {
      for k in keys { #expect(try snapshot.get(k, in: "ks") != nil) }
    }
    try readAll()  // the pinned top and every leaf are loaded now
    var before = db.statistics
    try readAll()
    let one = db.statistics.since(before).nodeReads
    #expect(one >= keys.count, "each read should pass through the cache at least once")
    before = db.statistics
    let threads = 4
    #expect(Self.onThreads(threads) { _ in try readAll() }.isEmpty)
    #expect(db.statistics.since(before).nodeReads == threads * one)
    try db.close()
  }

  @Test func concurrentCommittersShareFsyncs() throws {
    let folder = TempFolder("group")
    let db = try Database.open(at: folder.path)
    let threads = 8
    let perThread = 60
    let before = db.statistics
    let failures = Self.onThreads(threads) { t in
      for i in 0..<perThread { try db.write { try $0.put(key(t * 1_000 + i), b("x"), in: "ks") } }
    }
    #expect(failures.isEmpty)
    let after = db.statistics.since(before)
    #expect(try db.read { try $0.count(in: "ks") } == UInt64(threads * perThread))
    #expect(after.commits == threads * perThread)
    // Every commit waited for durability, but not every commit needed its own fsync.
    #expect(after.walSyncs < after.commits)
    print("group commit: \(after.commits) commits, \(after.walSyncs) WAL fsyncs")
    try db.close()
  }
}

/// A value behind a lock, for test threads.
final class Locked2<Value>: @unchecked Sendable {
  private let lock = NSLock()
  private var value: Value
  init(_ value: Value) { self.value = value }
  func update(_ body: (inout Value) -> Void) { lock.lock(); body(&value); lock.unlock() }
  func read<T>(_ body: (Value) -> T) -> T { lock.lock(); defer { lock.unlock() }; return body(value) }
}
