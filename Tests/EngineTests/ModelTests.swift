import Engine
import EngineTestSupport
import Foundation
import Testing

/// Random operations against the engine and against a plain dictionary,
/// compared as they go. Replay a failure with CAIRN_SEED=<seed>; change the
/// length with CAIRN_MODEL_OPS.
@Suite struct ModelTests {
  typealias Space = [[UInt8]: [UInt8]]

  /// The expected state: dictionaries for values, sorted key arrays for
  /// ranks, so count(range) and skip(n) can be checked after every step.
  struct Model {
    var committed: [String: Space] = [:]
    var committedSorted: [String: [[UInt8]]] = [:]
    var working: [String: Space] = [:]
    var workingSorted: [String: [[UInt8]]] = [:]

    func sortedKeys(_ ks: String, in range: KeyRange) -> [[UInt8]] {
      let keys = workingSorted[ks] ?? []
      let (lo, hi) = Self.bounds(keys, range)
      return Array(keys[lo..<hi])
    }

    /// The first index whose key is >= `key`.
    static func rank(_ keys: [[UInt8]], _ key: [UInt8]) -> Int {
      var lo = 0
      var hi = keys.count
      while lo < hi {
        let mid = (lo + hi) / 2
        if lexLess(keys[mid], key) { lo = mid + 1 } else { hi = mid }
      }
      return lo
    }

    static func bounds(_ keys: [[UInt8]], _ range: KeyRange) -> (Int, Int) {
      let lo = range.lower.map { rank(keys, $0) } ?? 0
      let hi = range.upper.map { rank(keys, $0) } ?? keys.count
      return (lo, max(lo, hi))
    }

    mutating func begin() {
      working = committed
      workingSorted = committedSorted
    }

    mutating func commit() {
      committed = working
      committedSorted = workingSorted
    }

    mutating func put(_ ks: String, _ k: [UInt8], _ v: [UInt8]) {
      if working[ks]?[k] == nil {
        var keys = workingSorted[ks] ?? []
        keys.insert(k, at: Self.rank(keys, k))
        workingSorted[ks] = keys
      }
      working[ks, default: [:]][k] = v
    }

    mutating func delete(_ ks: String, _ k: [UInt8]) -> Bool {
      guard working[ks]?.removeValue(forKey: k) != nil else { return false }
      workingSorted[ks]!.remove(at: Self.rank(workingSorted[ks]!, k))
      return true
    }

    mutating func deleteRange(_ ks: String, _ range: KeyRange) -> Int {
      guard let keys = workingSorted[ks] else { return 0 }
      let (lo, hi) = Self.bounds(keys, range)
      for k in keys[lo..<hi] { working[ks]![k] = nil }
      workingSorted[ks]!.removeSubrange(lo..<hi)
      return hi - lo
    }

    mutating func create(_ ks: String) {
      if working[ks] == nil {
        working[ks] = [:]
        workingSorted[ks] = []
      }
    }

    mutating func drop(_ ks: String) -> Bool {
      workingSorted[ks] = nil
      return working.removeValue(forKey: ks) != nil
    }
  }

  static let keyspaces = ["alpha", "beta", "gamma"]

  /// The configurations: small nodes make deep trees out of a few thousand
  /// keys; a 64 KiB cache keeps evicting; 4 KiB nodes hold enough updates to
  /// compact their buffers. A low checkpoint threshold makes checkpoints
  /// happen by themselves too.
  struct Configuration: Sendable, CustomTestStringConvertible {
    var nodeSize: Int
    var cacheSize: Int
    var operations: Int
    var testDescription: String { "\(nodeSize)-byte nodes, \(cacheSize >> 10) KiB cache, \(operations) ops" }
  }

  static let configurations = [
    Configuration(nodeSize: 512, cacheSize: 128 << 20, operations: 100_000),
    Configuration(nodeSize: 4096, cacheSize: 64 << 10, operations: 30_000),
  ]

  @Test(arguments: configurations)
  func randomOperationsMatchADictionary(_ configuration: Configuration) throws {
    let seed = testSeed()
    let scale =
      Double(ProcessInfo.processInfo.environment["CAIRN_MODEL_OPS"] ?? "") ?? (runningUnderTSan ? 20_000 : 100_000)
    let ops = Int(Double(configuration.operations) * scale / 100_000)
    var rng = SplitMix64(seed: seed)
    let fs = MemoryFileSystem()
    var options = memoryOptions(fs, nodeSize: configuration.nodeSize, checkpointThreshold: 256 << 10)
    options.cacheSize = configuration.cacheSize
    var db = try Database.open(at: "/model", options: options)
    var model = Model()
    var tx: WriteTransaction?
    var snapshot: (snap: Snapshot, model: [String: Space])?
    var step = 0
    var commits = 0

    func fail(_ what: String) -> Comment { "seed \(seed), step \(step): \(what)" }

    func randomKey() -> [UInt8] {
      switch rng.next() % 20 {
      case 0: return []
      case 1: return (0..<Int(rng.next() % 40)).map { _ in UInt8.random(in: 0...255, using: &rng) }
      default: return key(Int(rng.next() % 3000), width: 5)
      }
    }

    func randomValue() -> [UInt8] {
      let n: Int
      switch rng.next() % 50 {
      case 0: n = 200 + Int(rng.next() % 3000)  // out-of-line large values
      case 1: n = 0
      default: n = Int(rng.next() % 60)
      }
      let fill = UInt8(truncatingIfNeeded: rng.next())
      return (0..<n).map { i in fill &+ UInt8(truncatingIfNeeded: i) }
    }

    func randomRange() -> KeyRange {
      switch rng.next() % 8 {
      case 0: return .all
      case 1: return KeyRange(from: key(Int(rng.next() % 3000), width: 5), to: nil)
      case 2: return KeyRange(from: nil, to: key(Int(rng.next() % 3000), width: 5))
      case 3:
        let k = key(Int(rng.next() % 3000), width: 5)
        return KeyRange(from: k, to: k + [0])  // a single key
      case 4: return KeyRange(from: b("9"), to: b("99"))  // beyond the end
      case 5: return .prefix(Array(key(Int(rng.next() % 3000), width: 5).prefix(3)))
      default:
        let a = Int(rng.next() % 3000)
        let c = a + Int(rng.next() % 400)
        return KeyRange(from: key(a, width: 5), to: key(c, width: 5))
      }
    }

    func open() throws -> WriteTransaction {
      if let tx { return tx }
      let t = try db.beginWrite()
      tx = t
      model.begin()
      return t
    }

    func compareAll(_ reader: some KeyValueReader, _ expected: [String: Space], _ what: String) throws {
      let names = expected.keys.sorted()
      #expect(try reader.keyspaces() == names, fail("\(what): keyspaces"))
      for ks in names {
        let got = try reader.entries(in: ks)
        let want = expected[ks]!.sorted { lexLess($0.key, $1.key) }
        #expect(got.count == want.count, fail("\(what): \(ks) holds \(got.count), expected \(want.count)"))
        #expect(got.map(\.key) == want.map(\.key), fail("\(what): \(ks) keys differ"))
        #expect(got.map(\.value) == want.map(\.value), fail("\(what): \(ks) values differ"))
        #expect(try reader.count(in: ks) == UInt64(want.count), fail("\(what): \(ks) count"))
      }
    }

    func compareSample(_ reader: some KeyValueReader, _ expected: [String: Space]) throws {
      for ks in Self.keyspaces {
        #expect(try reader.count(in: ks) == UInt64(expected[ks]?.count ?? 0), fail("count of \(ks)"))
        for _ in 0..<8 {
          let k = randomKey()
          #expect(try reader.get(k, in: ks) == expected[ks]?[k], fail("get in \(ks)"))
        }
      }
    }

    /// count(range) and skip(n) against the model, after every step.
    func checkCounts() throws {
      let ks = Self.keyspaces[Int(rng.next() % 3)]
      let reader: any KeyValueReader = try tx ?? db.snapshot()
      let sorted = (tx != nil ? model.workingSorted : model.committedSorted)[ks] ?? []
      let r = randomRange()
      let (lo, hi) = Model.bounds(sorted, r)
      #expect(try reader.count(in: ks, range: r) == UInt64(hi - lo), fail("count(range) in \(ks)"))
      let n = Int(rng.next() % UInt64(hi - lo + 2))
      let c = try reader.cursor(in: ks, range: r)
      try c.seek(toOffset: UInt64(n))
      #expect(try c.next()?.key == (lo + n < hi ? sorted[lo + n] : nil), fail("skip(\(n)) in \(ks)"))
    }

    for s in 0..<ops {
      step = s
      let roll = rng.next() % 1000
      let ks = Self.keyspaces[Int(rng.next() % 3)]
      switch roll {
      case 0..<430:  // put
        let t = try open()
        let k = randomKey()
        let v = randomValue()
        try t.put(k, v, in: ks)
        model.put(ks, k, v)
        #expect(try t.get(k, in: ks) == v, fail("get after put"))
      case 430..<580:  // delete
        let t = try open()
        let k = randomKey()
        let existed = try t.delete(k, in: ks)
        let modelExisted = model.delete(ks, k)
        #expect(existed == modelExisted, fail("delete reported \(existed)"))
        #expect(try t.get(k, in: ks) == nil, fail("get after delete"))
      case 580..<620:  // deleteRange
        let t = try open()
        let r = randomRange()
        let removed = try t.deleteRange(r, in: ks)
        let expected = model.deleteRange(ks, r)
        #expect(removed == UInt64(expected), fail("deleteRange removed \(removed), expected \(expected)"))
        #expect(try t.count(in: ks, range: r) == 0, fail("range not empty after deleteRange"))
        #expect(try t.count(in: ks) == UInt64(model.working[ks]?.count ?? 0), fail("count after deleteRange"))
      case 620..<700:  // count(range), skip(n) and a cursor walk over a range
        let reader: any KeyValueReader = try tx ?? db.snapshot()
        let sorted = (tx != nil ? model.workingSorted : model.committedSorted)[ks] ?? []
        let r = randomRange()
        let (lo, hi) = Model.bounds(sorted, r)
        let expected = Array(sorted[lo..<hi])
        #expect(try reader.count(in: ks, range: r) == UInt64(expected.count), fail("count(range)"))
        let c = try reader.cursor(in: ks, range: r)
        let n = Int(rng.next() % UInt64(expected.count + 2))
        try c.seek(toOffset: UInt64(n))
        #expect(try c.next()?.key == (n < expected.count ? expected[n] : nil), fail("seek(toOffset: \(n))"))
        if rng.next() % 4 == 0 {
          var forward: [[UInt8]] = []
          try c.seekToFirst()
          while let e = try c.next() { forward.append(e.key) }
          #expect(forward == expected, fail("forward walk"))
          var backward: [[UInt8]] = []
          while let e = try c.previous() { backward.append(e.key) }
          #expect(backward == expected.reversed(), fail("backward walk"))
        } else if !expected.isEmpty {
          let probe = expected[Int(rng.next() % UInt64(expected.count))]
          try c.seek(to: probe)
          #expect(try c.next()?.key == probe, fail("seek(to:) an existing key"))
          let before = try c.previous()
          #expect(before?.key == probe, fail("previous after next"))
        }
      case 700..<790:  // get of a random key
        let reader: any KeyValueReader = try tx ?? db.snapshot()
        let view = tx != nil ? model.working : model.committed
        let k = randomKey()
        #expect(try reader.get(k, in: ks) == view[ks]?[k], fail("get"))
      case 790..<830:  // create or drop a keyspace
        let t = try open()
        if rng.next() % 3 == 0 {
          let existed = try t.dropKeyspace(ks)
          #expect(existed == model.drop(ks), fail("drop"))
        } else {
          try t.createKeyspace(ks)
          model.create(ks)
        }
      case 830..<930:  // commit
        guard let t = tx else { break }
        try t.commit()
        tx = nil
        model.commit()
        commits += 1
        let snap = try db.snapshot()
        if commits % 25 == 0 {
          try compareAll(snap, model.committed, "after commit")
        } else {
          try compareSample(snap, model.committed)
        }
      case 930..<960:  // rollback
        guard let t = tx else { break }
        t.rollback()
        tx = nil
        model.begin()
        try compareSample(try db.snapshot(), model.committed)
      case 960..<975:  // hold a snapshot, or check and release the one held
        if let held = snapshot {
          try compareAll(held.snap, held.model, "old snapshot")
          snapshot = nil
        } else {
          snapshot = (try db.snapshot(), model.committed)
        }
      case 975..<990:  // checkpoint
        guard tx == nil else { break }
        try db.checkpoint()
        let snap = try db.snapshot()
        try compareAll(snap, model.committed, "after checkpoint")
        let report = snap.verify()
        #expect(report.isClean, fail("verify after checkpoint: \(report.problems.prefix(3))"))
      default:  // close and reopen
        tx?.rollback()
        tx = nil
        if let held = snapshot { try compareAll(held.snap, held.model, "old snapshot before close") }
        snapshot = nil
        try db.close()
        db = try Database.open(at: "/model", options: options)
        let snap = try db.snapshot()
        try compareAll(snap, model.committed, "after reopen")
        let report = snap.verify()
        #expect(report.isClean, fail("verify after reopen: \(report.problems.prefix(3))"))
      }
      try checkCounts()
    }
    tx?.rollback()
    try compareAll(try db.snapshot(), model.committed, "at the end")
    try db.close()
    #expect(commits > ops / 200, "seed \(seed): only \(commits) commits")
  }
}
