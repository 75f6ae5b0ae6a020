import Dispatch
import EngineTestSupport
import Synchronization
import Testing

@testable import Engine

/// An on-disk tree keeps its root branch, and the root's children when they
/// are branches (each from the first read through it), decoded: a point
/// read then looks up two levels fewer in the node cache (in a three-level
/// tree, only its leaf). The cache counters show how many lookups a read
/// made.
@Suite struct PinnedTopTests {
  static let keyspace = "ks"
  static let keys = 20_000

  static func value(_ i: Int) -> [UInt8] { [UInt8](repeating: UInt8(i & 0xFF), count: 16) }

  /// A store of `keys` keys in 512-byte nodes: three levels or more.
  static func open(_ fs: MemoryFileSystem, cacheSize: Int = 64 << 20) throws -> Database {
    var options = memoryOptions(fs, nodeSize: 512)
    options.cacheSize = cacheSize
    return try Database.open(at: "/pinned", options: options)
  }

  static func fill(_ db: Database) throws {
    try db.write { tx in
      for i in 0..<keys { try tx.put(key(i), value(i), in: keyspace) }
    }
    try db.checkpoint()
  }

  /// Cache lookups made by reading `count` keys, checking every value.
  static func lookupsPerRead(_ db: Database, step: Int = 97) throws -> Double {
    let snapshot = try db.snapshot()
    let before = db.statistics.nodeCacheHits + db.statistics.nodeCacheMisses
    var reads = 0
    for i in stride(from: 0, to: keys, by: step) {
      #expect(try snapshot.get(key(i), in: keyspace) == value(i))
      reads += 1
    }
    #expect(try snapshot.get(key(keys + 1), in: keyspace) == nil)
    reads += 1
    let after = db.statistics.nodeCacheHits + db.statistics.nodeCacheMisses
    return Double(after - before) / Double(reads)
  }

  @Test func aCheckpointedTreeLooksUpTwoLevelsFewerInTheCache() throws {
    let fs = MemoryFileSystem()
    let db = try Self.open(fs)
    try Self.fill(db)
    let tree = try #require(try db.snapshot().version.tree(Self.keyspace))
    #expect(tree.height >= 3)
    let pinned = try #require(tree.pinned)
    #expect(pinned.pinsChildren)
    let fewer = Double(tree.height - 2)
    // The first reads through each child pin it (one lookup each); then
    // every read makes only the levels below.
    #expect(try Self.lookupsPerRead(db, step: 1) < fewer + 0.01)
    #expect(try Self.lookupsPerRead(db) == fewer)

    // A checkpoint that did not change the tree keeps its pin as it is.
    try db.write { try $0.put([1], [1], in: "other") }
    try db.checkpoint()
    #expect(try db.snapshot().version.tree(Self.keyspace)?.pinned === pinned)

    // A write replaces the root: nothing is pinned until the next checkpoint.
    try db.write { try $0.put(key(5), [1], in: Self.keyspace) }
    #expect(try db.snapshot().version.tree(Self.keyspace)?.pinned == nil)
    try db.checkpoint()
    #expect(try db.snapshot().get(key(5), in: Self.keyspace) == [1])
    try db.write { try $0.put(key(5), Self.value(5), in: Self.keyspace) }
    try db.checkpoint()
    _ = try Self.lookupsPerRead(db, step: 1)
    #expect(try Self.lookupsPerRead(db) == fewer)

    // Recovery pins too, and so does compaction. Opening reads one node
    // of each tree (the root), not the root's children.
    try db.close()
    let reopened = try Self.open(fs)
    #expect(reopened.statistics.nodeReads <= 2, "opening read \(reopened.statistics.nodeReads) nodes")
    _ = try Self.lookupsPerRead(reopened, step: 1)
    #expect(try Self.lookupsPerRead(reopened) == fewer)
    try reopened.compact()
    _ = try Self.lookupsPerRead(reopened, step: 1)
    #expect(try Self.lookupsPerRead(reopened) == fewer)
    let cursor = try reopened.snapshot().cursor(in: Self.keyspace)
    var n = 0
    while let e = try cursor.next() {
      #expect(e.key == key(n) && e.value == Self.value(n))
      n += 1
    }
    #expect(n == Self.keys)
    try reopened.close()
  }

  /// Threads reading a store just opened race to pin the same children:
  /// each gets a whole node (one wins, the others use it), and afterwards
  /// reads look up two levels fewer.
  @Test func threadsRacingToPinTheSameChildrenReadRight() throws {
    let fs = MemoryFileSystem()
    let db = try Self.open(fs)
    try Self.fill(db)
    try db.close()
    let reopened = try Self.open(fs)
    let snapshot = try reopened.snapshot()
    let wrong = Atomic<Int>(0)
    DispatchQueue.concurrentPerform(iterations: 8) { t in
      for i in stride(from: t * 13, to: Self.keys, by: 37)
      where (try? snapshot.get(key(i), in: Self.keyspace)) != Self.value(i) {
        wrong.add(1, ordering: .relaxed)
      }
    }
    #expect(wrong.load(ordering: .relaxed) == 0)
    let tree = try #require(snapshot.version.tree(Self.keyspace))
    #expect(try Self.lookupsPerRead(reopened) == Double(tree.height - 2))
    try reopened.close()
  }

  @Test func aSmallCacheKeepsOnlyTheRootPinned() throws {
    // With a 64 KiB cache, the root's children exceed an eighth of it.
    let db = try Self.open(MemoryFileSystem(), cacheSize: 64 << 10)
    try Self.fill(db)
    let tree = try #require(try db.snapshot().version.tree(Self.keyspace))
    #expect(tree.height >= 3)
    let pinned = try #require(tree.pinned)
    #expect(!pinned.pinsChildren)
    #expect(try Self.lookupsPerRead(db) == Double(tree.height - 1))
    try db.close()
  }
}
