import EngineTestSupport
import Testing

@testable import Engine

/// How full nodes split: in halves, except when keys arrive after every key
/// of the tree, where the full node stays full.
@Suite struct SplitTests {
  static let keyspace = "ks"
  static let valueSize = 100

  /// Entries of a 16-byte key and a 100-byte value that fit in one leaf.
  static var perLeaf: Int { (4096 - LeafLayout.header) / (LeafLayout.entrySize + 16 + valueSize) }

  static func key16(_ i: Int) -> [UInt8] { [UInt8](repeating: 0x41, count: 8) + key(i, width: 8) }
  static func value(_ i: Int) -> [UInt8] { [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: valueSize) }

  static func load(_ order: [Int]) throws -> (Database, TreeShape) {
    let db = try Database.open(at: "/split", options: memoryOptions(MemoryFileSystem()))
    try db.write { tx in
      for i in order { try tx.put(key16(i), value(i), in: keyspace) }
    }
    try db.checkpoint()
    return (db, try db.snapshot().shape(of: keyspace))
  }

  @Test func aSortedLoadFillsItsLeaves() throws {
    let n = 20_000
    let (db, sorted) = try Self.load(Array(0..<n))
    let full = (n + Self.perLeaf - 1) / Self.perLeaf
    #expect(sorted.leaves <= full + 1, "\(sorted.leaves) leaves for \(n) keys, \(Self.perLeaf) to a leaf")
    #expect(try contents(db.snapshot(), Self.keyspace).count == n)
    for i in stride(from: 0, to: n, by: 37) {
      #expect(try db.snapshot().get(Self.key16(i), in: Self.keyspace) == Self.value(i))
    }
    try db.close()

    // Random order still splits in halves (about 69% full), and descending
    // order, which always inserts first, too: neither is mistaken for an append.
    var rng = SplitMix64(seed: testSeed())
    let (db2, random) = try Self.load(Array(0..<n).shuffled(using: &rng))
    #expect(random.leaves > full * 5 / 4)
    try db2.close()
    let (db3, descending) = try Self.load(Array((0..<n).reversed()))
    #expect(descending.leaves > full * 3 / 2)
    #expect(try contents(db3.snapshot(), Self.keyspace).count == n)
    try db3.close()
  }

  @Test func appendingAfterExistingKeysFillsTheNewLeaves() throws {
    let db = try Database.open(at: "/split", options: memoryOptions(MemoryFileSystem()))
    // A first half in random order, then the second half appended in order,
    // one transaction each, with checkpoints between (on-disk nodes copied).
    var rng = SplitMix64(seed: testSeed())
    let n = 10_000
    for chunk in Array(0..<n).shuffled(using: &rng).chunks(of: 1_000) {
      try db.write { tx in for i in chunk { try tx.put(Self.key16(i), Self.value(i), in: Self.keyspace) } }
      try db.checkpoint()
    }
    let before = try db.snapshot().shape(of: Self.keyspace).leaves
    for start in stride(from: n, to: 2 * n, by: 1_000) {
      try db.write { tx in
        for i in start..<(start + 1_000) { try tx.put(Self.key16(i), Self.value(i), in: Self.keyspace) }
      }
      try db.checkpoint()
    }
    let added = try db.snapshot().shape(of: Self.keyspace).leaves - before
    #expect(added <= (n + Self.perLeaf - 1) / Self.perLeaf + 2, "\(added) leaves for \(n) appended keys")
    #expect(try contents(db.snapshot(), Self.keyspace).count == 2 * n)
    try db.close()
  }

  /// A put of a key already in the leaf the previous put stored into
  /// changes that leaf in place. Deletes that merge it into a neighbour
  /// take it out of the tree; a later put must not write into it.
  @Test func replacingInThePreviousLeafAfterMergesKeepsEveryValue() throws {
    let db = try Database.open(at: "/split", options: memoryOptions(MemoryFileSystem()))
    let n = Self.perLeaf * 12
    var expected: [[UInt8]: [UInt8]] = [:]
    try db.write { tx in
      for i in 0..<n {
        try tx.put(Self.key16(i), Self.value(i), in: Self.keyspace)
        expected[Self.key16(i)] = Self.value(i)
      }
    }
    try db.checkpoint()
    var rng = SplitMix64(seed: testSeed())
    try db.write { tx in
      for round in 0..<40 {
        // Replace a few neighbours (the second and third in place), then
        // delete around them, one key or a range, so leaves merge, then
        // replace keys of the same stretch again.
        let at = Int(rng.next() % UInt64(n - 8))
        for i in at..<(at + 3) {
          let v = Self.value(i + round * 7)
          try tx.put(Self.key16(i), v, in: Self.keyspace)
          expected[Self.key16(i)] = v
        }
        if round % 2 == 0 {
          let lo = max(0, at - Self.perLeaf)
          try tx.deleteRange(KeyRange(from: Self.key16(lo), to: Self.key16(at)), in: Self.keyspace)
          for i in lo..<at { expected[Self.key16(i)] = nil }
        } else {
          for i in max(0, at - 6)..<at where expected[Self.key16(i)] != nil {
            try tx.delete(Self.key16(i), in: Self.keyspace)
            expected[Self.key16(i)] = nil
          }
        }
        for i in at..<(at + 3) {
          let v = Self.value(i + round * 11 + 1)
          try tx.put(Self.key16(i), v, in: Self.keyspace)
          expected[Self.key16(i)] = v
        }
        #expect(try contents(tx, Self.keyspace) == expected, "round \(round)")
      }
    }
    try db.checkpoint()
    #expect(try contents(db.snapshot(), Self.keyspace) == expected)
    try db.close()
  }
}

extension Array {
  fileprivate func chunks(of size: Int) -> [ArraySlice<Element>] {
    stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
  }
}
