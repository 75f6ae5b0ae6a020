import Engine
import EngineTestSupport
import Foundation
import Testing

/// Range deletes cost O(height), whatever the number of keys they remove.
@Suite struct RangeDeleteTests {
  /// A value that does not compress away, so sizes are honest.
  static func value(_ i: Int) -> [UInt8] {
    var x = UInt64(truncatingIfNeeded: i) &* 0x9E37_79B9_7F4A_7C15
    return (0..<12).map { _ in
      x ^= x >> 29
      x = x &* 0xBF58_476D_1CE4_E5B9
      return UInt8(truncatingIfNeeded: x)
    }
  }

  @Test(.enabled(if: !runningUnderTSan, "single-threaded and heavy"))
  func deleteCostGrowsWithHeightNotWithKeys() throws {
    let total = 2_000_000
    let db = try Database.inMemory()
    try db.write { tx in
      for i in 0..<total { try tx.put(key(i, width: 10), Self.value(i), in: "ks") }
    }
    let height = db.storage.keyspaces["ks"]!.height
    #expect(height >= 3)

    var start = 0
    for size in [1_000, 10_000, 100_000, 1_000_000] {
      let lo = key(start, width: 10)
      let hi = key(start + size, width: 10)
      let before = try db.snapshot()
      let storageBefore = db.storage
      let stats = db.statistics

      let removed = try db.write { try $0.deleteRange(from: lo, to: hi, in: "ks") }
      let delete = db.statistics.since(stats)
      try db.checkpoint()
      let written = db.statistics.since(stats).nodesWritten
      let storageAfter = db.storage

      #expect(removed == UInt64(size))
      // Reads: the two boundary paths and a neighbour to merge with, per level.
      #expect(delete.nodeReads <= 6 * height + 4, "\(size) keys: \(delete.nodeReads) node reads, height \(height)")
      // Writes: the changed nodes along those paths.
      #expect(written <= 4 * height + 2, "\(size) keys: \(written) nodes written, height \(height)")
      // One WAL record, far under 1 KiB.
      #expect(delete.walBytesWritten < 1024, "\(size) keys: \(delete.walBytesWritten) WAL bytes")
      #expect(delete.commits == 1)

      // The snapshot from before still sees every deleted key; a new one sees none.
      #expect(try before.count(in: "ks", range: KeyRange(from: lo, to: hi)) == UInt64(size))
      for probe in [start, start + size / 2, start + size - 1] {
        #expect(try before.get(key(probe, width: 10), in: "ks") == Self.value(probe))
        #expect(try db.read { try $0.get(key(probe, width: 10), in: "ks") } == nil)
      }
      let after = try db.snapshot()
      #expect(try after.count(in: "ks", range: KeyRange(from: lo, to: hi)) == 0)
      #expect(try after.get(key(start + size, width: 10), in: "ks") == Self.value(start + size))
      #expect(try after.count(in: "ks") == UInt64(total - start - size))

      // The cut subtrees' bytes are now garbage.
      let cut = storageBefore.liveBytes - storageAfter.liveBytes
      #expect(cut >= UInt64(size) * 12, "\(size) keys: live bytes fell by only \(cut)")
      #expect(storageAfter.garbageBytes >= storageBefore.garbageBytes + cut)
      print(
        "deleteRange \(size) keys: \(delete.nodeReads) node reads, \(written) nodes written, "
          + "\(delete.walBytesWritten) WAL bytes, \(cut) bytes to garbage (height \(height))")
      start += size
    }
    #expect(try db.snapshot().verify().isClean)
    try db.close()
  }

  @Test func anEmptyOrMissingRangeWritesNothing() throws {
    let db = try Database.inMemory()
    try db.write { tx in for i in 0..<100 { try tx.put(key(i), b("v"), in: "ks") } }
    let stats = db.statistics
    try db.write { tx throws in
      #expect(try tx.deleteRange(from: key(500), to: key(600), in: "ks") == 0)
      #expect(try tx.deleteRange(from: key(50), to: key(10), in: "ks") == 0)
      #expect(try tx.deleteRange(from: key(5), to: key(5), in: "ks") == 0)
      #expect(try tx.deleteRange(KeyRange.all, in: "nosuch") == 0)
    }
    #expect(db.statistics.since(stats).walBytesWritten == 0)
    #expect(try db.read { try $0.count(in: "ks") } == 100)
  }

  @Test func deletingEverythingLeavesAnEmptyKeyspace() throws {
    let db = try Database.inMemory(options: memoryOptions(MemoryFileSystem(), nodeSize: 512))
    try db.write { tx in for i in 0..<5_000 { try tx.put(key(i), b("v"), in: "ks") } }
    try db.checkpoint()
    #expect(try db.write { try $0.deleteRange(KeyRange.all, in: "ks") } == 5_000)
    #expect(try db.read { try $0.keyspaces() } == ["ks"])
    #expect(try db.read { try $0.count(in: "ks") } == 0)
    #expect(db.storage.keyspaces["ks"]?.height == 0)
    try db.write { try $0.put(key(1), b("again"), in: "ks") }
    #expect(try db.read { try $0.entries(in: "ks") } == [Entry(key: key(1), value: b("again"))])
  }

  @Test func rangeDeletesKeepTheTreeBalancedAndShallow() throws {
    // Many range deletes from both ends and the middle: every one keeps the
    // tree valid, and the height stays that of a tree of what is left.
    let db = try Database.inMemory(options: memoryOptions(MemoryFileSystem(), nodeSize: 512))
    try db.write { tx in for i in 0..<60_000 { try tx.put(key(i), Self.value(i), in: "ks") } }
    var rng = SplitMix64(seed: 11)
    var alive = Set(0..<60_000)
    for round in 0..<40 {
      let a = Int(rng.next() % 60_000)
      let n = Int(rng.next() % 3_000)
      try db.write { try $0.deleteRange(from: key(a), to: key(a + n), in: "ks") }
      for i in a..<min(60_000, a + n) { alive.remove(i) }
      if round % 10 == 9 { try db.checkpoint() }
      let snap = try db.snapshot()
      #expect(try snap.count(in: "ks") == UInt64(alive.count))
      let report = snap.verify()
      #expect(report.isClean, "round \(round): \(report.problems.prefix(3))")
    }
    try db.write { try $0.deleteRange(from: key(0), to: key(59_990), in: "ks") }
    // Ten keys left: a couple of levels at most, not the old height.
    #expect(db.storage.keyspaces["ks"]!.height <= 2)
    #expect(try db.snapshot().verify().isClean)
  }

  @Test func storageCountsGarbage() throws {
    let db = try Database.inMemory()
    let fresh = db.storage
    #expect(fresh.garbageBytes == 0)
    #expect(fresh.liveBytes == fresh.dataFileBytes)
    try db.write { tx in for i in 0..<10_000 { try tx.put(key(i), Self.value(i), in: "ks") } }
    try db.checkpoint()
    let loaded = db.storage
    try db.write { tx in for i in 0..<10_000 { try tx.put(key(i), Self.value(i + 1), in: "ks") } }
    try db.checkpoint()
    let rewritten = db.storage
    // Every node was rewritten: the old ones are garbage now.
    #expect(rewritten.garbageBytes > loaded.liveBytes / 2)
    #expect(rewritten.garbageRatio > 0.3)
    #expect(rewritten.keyspaces["ks"]?.keys == 10_000)
    #expect(rewritten.checkpointSequence == rewritten.lastSequence)
  }
}
