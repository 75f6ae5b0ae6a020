import Engine
import EngineTestSupport
import Foundation
import Testing

@Suite struct CursorTests {
  static func database(_ n: Int = 1_000) throws -> Database {
    let db = try Database.inMemory(options: memoryOptions(MemoryFileSystem(), nodeSize: 512))
    try db.write { tx in for i in 0..<n { try tx.put(key(i), b("v\(i)"), in: "ks") } }
    return db
  }

  /// 3,000 keys, one of them with a large value, a snapshot, and the
  /// entries of keys 1,000 to 2,000 (the large one among them), copied.
  static func rangeWithALargeValue() throws -> (Database, Snapshot, KeyRange, [Entry]) {
    let db = try database(3_000)
    try db.write { tx in
      try tx.put(key(1_500), [UInt8](repeating: 4, count: 5_000), in: "ks")  // a large value
    }
    let snap = try db.snapshot()
    let range = KeyRange(from: key(1_000), to: key(2_000))
    return (db, snap, range, try snap.entries(in: "ks", range: range))
  }

  /// A closed store at "/s" of 20,000 keys with values of a realistic
  /// length on 1 KiB nodes, for the cache-fill tests: its file system and
  /// its key count.
  static func closedStoreOfTwentyThousandKeys() throws -> (MemoryFileSystem, Int) {
    let fs = MemoryFileSystem()
    let n = 20_000
    let db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 1024))
    try db.write { tx in
      for i in 0..<n { try tx.put(key(i), b("value \(i) padded to a realistic length"), in: "ks") }
    }
    try db.close()
    return (fs, n)
  }

  @Test func aLongScanLeavesTheCacheAloneOrFillsOnlyItsSpareRoomWhenAsked() throws {
    let (fs, n) = try Self.closedStoreOfTwentyThousandKeys()
    var db: Database
    func scanAll(_ db: Database, keep: Bool) throws {
      var count = 0
      let scan = try db.snapshot().cursor(in: "ks")
      scan.keepsScannedLeaves = keep
      while let batch = Optional(try scan.next(batch: 50)), !batch.isEmpty { count += batch.count }
      #expect(count == n)
    }
    // By default a long scan adds nothing past its first leaves: memory
    // stays where it was, and the same scan reads the file again.
    db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 1024))
    try scanAll(db, keep: false)
    let resistant = db.statistics.cacheBytes
    var misses = db.statistics.nodeCacheMisses
    try scanAll(db, keep: false)
    #expect(db.statistics.cacheBytes == resistant)
    #expect(db.statistics.nodeCacheMisses > misses + 100, "a scan-resistant scan should read its leaves again")

    // Asked to keep them, with room for the whole tree: the next scan
    // reads nothing from the file.
    try scanAll(db, keep: true)
    let whole = db.statistics.cacheBytes
    #expect(whole > resistant * 4)
    misses = db.statistics.nodeCacheMisses
    try scanAll(db, keep: true)
    #expect(db.statistics.nodeCacheMisses == misses, "a second kept scan should be served by the cache")
    try db.close()

    // A cache a quarter of the tree's size, holding a working set: a kept
    // scan fills what is free and evicts none of it.
    var small = memoryOptions(fs, nodeSize: 1024)
    small.cacheSize = whole / 4
    db = try Database.open(at: "/s", options: small)
    let workingSet = stride(from: 0, to: n / 20, by: 7)
    for i in workingSet { _ = try db.snapshot().get(key(i), in: "ks") }
    let withWorkingSet = db.statistics.cacheBytes
    try scanAll(db, keep: true)
    #expect(db.statistics.cacheBytes > withWorkingSet, "the scan should use the free room")
    #expect(db.statistics.cacheBytes <= small.cacheSize)
    misses = db.statistics.nodeCacheMisses
    for i in workingSet { _ = try db.snapshot().get(key(i), in: "ks") }
    #expect(db.statistics.nodeCacheMisses == misses, "the scan evicted part of the working set")
    try db.close()

    // Short range scans enter the cache as point reads do.
    db = try Database.open(at: "/s", options: small)
    for start in stride(from: n / 2, to: n / 2 + 2_000, by: 500) {
      let c = try db.snapshot().cursor(in: "ks", range: KeyRange(from: key(start), to: key(start + 100)))
      #expect(try c.next(batch: 200).count == 100)
    }
    misses = db.statistics.nodeCacheMisses
    for start in stride(from: n / 2, to: n / 2 + 2_000, by: 500) {
      let c = try db.snapshot().cursor(in: "ks", range: KeyRange(from: key(start), to: key(start + 100)))
      _ = try c.next(batch: 200)
    }
    #expect(db.statistics.nodeCacheMisses == misses, "the same short scans again should hit the cache")
    try db.close()
  }

  @Test func aLongSeriesOfLookupsThroughOneCursorIsScanResistant() throws {
    let (fs, n) = try Self.closedStoreOfTwentyThousandKeys()
    var db: Database
    // Every third key, ascending, through one cursor: every leaf read.
    func lookUpAll(_ db: Database, keep: Bool) throws {
      let c = try db.snapshot().cursor(in: "ks")
      c.keepsScannedLeaves = keep
      var found = 0
      for i in stride(from: 0, to: n, by: 3) {
        let hit = try key(i).withUnsafeBytes { k in try c.visitValue(forKey: k) { #expect($0.count > 10) } }
        if hit { found += 1 }
      }
      #expect(found == (n + 2) / 3)
    }
    func size(keeping keep: Bool) throws -> Int {
      let opened = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 1024))
      defer { try? opened.close() }
      try lookUpAll(opened, keep: keep)
      return opened.statistics.cacheBytes
    }
    // Not kept: past its first leaves the series adds nothing, and reads
    // them again the next time.
    let resistant = try size(keeping: false)
    let whole = try size(keeping: true)
    #expect(whole > resistant * 4, "kept lookups should fill the free room: \(whole) vs \(resistant)")
    db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 1024))
    try lookUpAll(db, keep: false)
    var misses = db.statistics.nodeCacheMisses
    try lookUpAll(db, keep: false)
    #expect(db.statistics.nodeCacheMisses > misses + 100)
    try db.close()

    // A cache a quarter of the tree's size, holding a working set: kept
    // lookups take the free room and evict none of it.
    var small = memoryOptions(fs, nodeSize: 1024)
    small.cacheSize = whole / 4
    db = try Database.open(at: "/s", options: small)
    let workingSet = stride(from: n / 2, to: n / 2 + n / 20, by: 7)
    for i in workingSet { _ = try db.snapshot().get(key(i), in: "ks") }
    let withWorkingSet = db.statistics.cacheBytes
    try lookUpAll(db, keep: true)
    #expect(db.statistics.cacheBytes > withWorkingSet, "the lookups should use the free room")
    #expect(db.statistics.cacheBytes <= small.cacheSize)
    misses = db.statistics.nodeCacheMisses
    for i in workingSet { _ = try db.snapshot().get(key(i), in: "ks") }
    #expect(db.statistics.nodeCacheMisses == misses, "the lookups evicted part of the working set")

    // A few lookups enter the cache as point reads do, evicting if need
    // be: in a full cache, on a leaf's second miss.
    let few = stride(from: n - 1_000, to: n, by: 100)
    for _ in 0..<2 {
      let c = try db.snapshot().cursor(in: "ks")
      for i in few { _ = try key(i).withUnsafeBytes { k in try c.visitValue(forKey: k) { _ in } } }
    }
    misses = db.statistics.nodeCacheMisses
    for i in few { _ = try db.snapshot().get(key(i), in: "ks") }
    #expect(db.statistics.nodeCacheMisses == misses, "a short series of lookups should fill the cache")
    try db.close()
  }

  @Test func walksForwardAndBackward() throws {
    let db = try Self.database()
    let c = try db.snapshot().cursor(in: "ks")
    var n = 0
    while let e = try c.next() {
      #expect(e.key == key(n))
      n += 1
    }
    #expect(n == 1_000)
    #expect(try c.next() == nil)  // stays at the end
    var m = 1_000
    while let e = try c.previous() {
      m -= 1
      #expect(e.key == key(m))
    }
    #expect(m == 0)
    #expect(try c.previous() == nil)
  }

  @Test func seeksToKeysBetweenAndPastTheEnds() throws {
    let db = try Self.database()
    let c = try db.snapshot().cursor(in: "ks")
    try c.seek(to: key(500))
    #expect(try c.next()?.key == key(500))
    try c.seek(to: key(500) + [0])  // between 500 and 501
    #expect(try c.next()?.key == key(501))
    #expect(try c.previous()?.key == key(501))
    #expect(try c.previous()?.key == key(500))
    try c.seek(to: b("z"))
    #expect(try c.next() == nil)
    #expect(try c.previous()?.key == key(999))
    try c.seek(to: [])
    #expect(try c.next()?.key == key(0))
    try c.seekToLast()
    #expect(try c.previous()?.key == key(999))
    try c.seekToFirst()
    #expect(try c.peekKey() == key(0))
    #expect(try c.next()?.key == key(0))  // peek did not move
  }

  @Test func rangesAndPrefixesBoundBothDirections() throws {
    let db = try Self.database()
    let snap = try db.snapshot()
    let range = KeyRange(from: key(100), to: key(110))
    let c = try snap.cursor(in: "ks", range: range)
    var keys: [[UInt8]] = []
    while let e = try c.next() { keys.append(e.key) }
    #expect(keys == (100..<110).map { key($0) })
    var back: [[UInt8]] = []
    while let e = try c.previous() { back.append(e.key) }
    #expect(back == (100..<110).reversed().map { key($0) })
    try c.seekToLast()
    #expect(try c.previous()?.key == key(109))
    try c.seek(to: key(5))  // below the range: clamped to its start
    #expect(try c.next()?.key == key(100))
    try c.seek(to: key(900))  // above: clamped to its end
    #expect(try c.next() == nil)

    #expect(try snap.count(in: "ks", range: .prefix(b("0000001"))) == 10)
    #expect(try snap.entries(in: "ks", range: .prefix(b("0000099"))).map(\.key) == (990..<1_000).map { key($0) })
    #expect(try snap.count(in: "ks", range: .prefix([])) == 1_000)
    #expect(try snap.count(in: "ks", range: KeyRange(from: key(10), to: key(5))) == 0)
  }

  @Test func prefixesOfFFBytesHaveNoUpperBound() throws {
    let db = try Database.inMemory()
    try db.write { tx in
      try tx.put([0xFF], b("a"), in: "ks")
      try tx.put([0xFF, 0xFF, 0x01], b("b"), in: "ks")
      try tx.put([0xFE, 0xFF], b("c"), in: "ks")
    }
    let snap = try db.snapshot()
    #expect(try snap.count(in: "ks", range: .prefix([0xFF])) == 2)
    #expect(try snap.count(in: "ks", range: .prefix([0xFE])) == 1)
    #expect(KeyRange.prefix([0xFE, 0xFF]).upper == [0xFF])
    #expect(KeyRange.prefix([0xFF, 0xFF]).upper == nil)
  }

  @Test func batchesComeFromOneSnapshot() throws {
    let db = try Self.database(2_000)
    let snap = try db.snapshot()
    let c = try snap.cursor(in: "ks")
    var seen: [[UInt8]] = []
    var i = 0
    while true {
      let batch = try c.next(batch: 50)
      if batch.isEmpty { break }
      #expect(batch.count <= 50)
      seen += batch.map(\.key)
      // Commits between batches are not seen by this cursor.
      try db.write { tx in
        try tx.put(b("new\(i)"), b("x"), in: "ks")
        try tx.delete(key(1_999 - i), in: "ks")
      }
      i += 1
    }
    #expect(seen == (0..<2_000).map { key($0) })
    #expect(try db.read { try $0.count(in: "ks") } == 2_000)
  }

  @Test func batchesAcrossConcurrentCommitsReturnExactlyTheSnapshot() throws {
    let db = try Database.inMemory(
      options: memoryOptions(MemoryFileSystem(), nodeSize: 1024, checkpointThreshold: 64 << 10))
    try db.write { tx in for i in 0..<20_000 { try tx.put(key(i), b("v0-\(i)"), in: "ks") } }
    let snap = try db.snapshot()
    let checkpointsBefore = db.statistics.checkpoints

    // A writer thread rewrites, deletes and inserts while the batches are read.
    let done = Locked2(false)
    let writerError = Locked2<String?>(nil)
    let commits = Locked2(0)
    let writer = Thread {
      var rng = SplitMix64(seed: 5)
      var n = 0
      while !done.read({ $0 }) {
        n += 1
        defer { commits.update { $0 = n } }
        do {
          try db.write { tx in
            let i = Int(rng.next() % 20_000)
            try tx.put(key(i), b("v\(n)-\(i)"), in: "ks")
            try tx.delete(key(Int(rng.next() % 20_000)), in: "ks")
            try tx.put(b("extra-\(n)"), b("x"), in: "ks")
            if n % 200 == 0 { try tx.deleteRange(from: key(i), to: key(i + 500), in: "ks") }
          }
        } catch {
          writerError.update { $0 = "\(error)" }
          return
        }
      }
    }
    writer.start()

    let cursor = try snap.cursor(in: "ks")
    var seen: [Entry] = []
    var batches = 0
    while true {
      let batch = try cursor.next(batch: 50)
      if batch.isEmpty { break }
      seen += batch
      batches += 1
      // Wait for the writer between batches, so commits (and checkpoints)
      // really interleave with the reading, however the threads are scheduled.
      while commits.read({ $0 }) < batches * 4 && writerError.read({ $0 }) == nil { usleep(100) }
    }
    done.update { $0 = true }
    while !writer.isFinished { usleep(1_000) }

    #expect(writerError.read { $0 } == nil)
    #expect(batches == 400)
    #expect(seen == (0..<20_000).map { Entry(key: key($0), value: b("v0-\($0)")) })
    #expect(db.lastCommittedSequence.rawValue > 10, "the writer hardly committed")
    #expect(db.statistics.checkpoints > checkpointsBefore, "no checkpoint ran during the read")
  }

  @Test func visitingEntriesInPlaceMatchesCopying() throws {
    let (db, snap, range, copying) = try Self.rangeWithALargeValue()
    let c = try snap.cursor(in: "ks", range: range)
    var visited: [Entry] = []
    while let e = try c.next({ k, v in Entry(key: Array(k), value: Array(v)) }) { visited.append(e) }
    #expect(visited == copying)
    #expect(visited.count == 1_000)
    #expect(try c.next({ _, _ in true }) == nil)
    #expect(try snap.withValue(for: key(1_500), in: "ks") { $0.count } == 5_000)
    #expect(try snap.withValue(for: key(7), in: "ks") { Array($0) } == b("v7"))
    #expect(try snap.withValue(for: b("missing"), in: "ks") { _ in 1 } == nil)
    #expect(try snap.withValue(for: key(7), in: "nosuch") { _ in 1 } == nil)
    // A key lent as bytes from the middle of a larger buffer: only those
    // bytes are the key.
    let padded = b("xx") + key(7) + b("yy")
    var lent: [UInt8] = []
    let found = try padded.withUnsafeBytes { all in
      try snap.visitValue(forKey: UnsafeRawBufferPointer(rebasing: all[2..<(all.count - 2)]), in: "ks") {
        lent = Array($0)
      }
    }
    #expect(found && lent == b("v7"))
    #expect(try padded.withUnsafeBytes { try snap.visitValue(forKey: $0, in: "ks") { _ in } } == false)
    try db.write { tx in
      try tx.put(key(7), b("changed"), in: "ks")
      #expect(try tx.withValue(for: key(7), in: "ks") { Array($0) } == b("changed"))
    }
  }

  @Test func batchesInOneReusedBufferHoldWhatNextReturns() throws {
    let (_, snap, range, copying) = try Self.rangeWithALargeValue()
    for size in [1, 7, 64, 5_000] {
      // Arrays per entry.
      let c = try snap.cursor(in: "ks", range: range)
      var arrays: [Entry] = []
      while case let batch = try c.next(batch: size), !batch.isEmpty {
        #expect(batch.count <= size)
        arrays += batch
      }
      #expect(arrays == copying, "next(batch: \(size))")

      // One buffer reused from batch to batch.
      let d = try snap.cursor(in: "ks", range: range)
      var batch = EntryBatch()
      var reused: [Entry] = []
      var inPlace: [Entry] = []
      while try d.next(batch: size, into: &batch) > 0 {
        #expect(batch.count <= size && !batch.isEmpty)
        for i in 0..<batch.count {
          reused.append(batch[i])
          inPlace.append(
            Entry(key: batch.withKey(at: i) { Array($0) }, value: batch.withValue(at: i) { Array($0) }))
        }
      }
      #expect(reused == copying, "next(batch: \(size), into:)")
      #expect(inPlace == copying)
      #expect(batch.isEmpty && batch.count == 0 && batch.byteCount == 0)
    }

    // A batch leaves the cursor just past its last entry, for next() and
    // previous() alike, and stays valid after the cursor moves on.
    let c = try snap.cursor(in: "ks", range: range)
    var batch = EntryBatch()
    #expect(try c.next(batch: 10, into: &batch) == 10)
    #expect(try c.next() == copying[10])
    #expect(try c.previous() == copying[10])
    #expect(try c.previous() == copying[9])
    _ = try c.next(batch: 3)
    #expect(batch[9] == copying[9])
    #expect(batch.byteCount == copying[0..<10].reduce(0) { $0 + $1.key.count + $1.value.count })
  }

  @Test func forEachVisitsWhatNextAndPreviousReturnAndStopsWhereTold() throws {
    let (_, snap, range, copying) = try Self.rangeWithALargeValue()

    // Forward, whole range, across leaves and the large value.
    var forward: [Entry] = []
    try snap.cursor(in: "ks", range: range).forEach { k, v in
      forward.append(Entry(key: Array(k), value: Array(v)))
      return true
    }
    #expect(forward == copying)

    // Backward from the end: what previous() returns, in the same order.
    let back = try snap.cursor(in: "ks", range: range)
    try back.seekToLast()
    var backward: [Entry] = []
    try back.forEachBackward { k, v in
      backward.append(Entry(key: Array(k), value: Array(v)))
      return true
    }
    #expect(backward == Array(copying.reversed()))

    // Stopping: the cursor sits just past the entry that said stop, in
    // either direction, as next() and previous() leave it.
    let c = try snap.cursor(in: "ks", range: range)
    var seen = 0
    try c.forEach { _, _ in
      seen += 1
      return seen < 700
    }
    #expect(seen == 700)
    #expect(try c.next()?.key == copying[700].key)
    #expect(try c.previous()?.key == copying[700].key)
    var seenBack = 0
    try c.forEachBackward { _, _ in
      seenBack += 1
      return seenBack < 300
    }
    #expect(try c.previous()?.key == copying[699 - 300].key)

    // A range past every key and an empty one visit nothing.
    var none = 0
    try snap.cursor(in: "ks", range: KeyRange(from: b("zzz"), to: b("zzzz"))).forEach { _, _ in
      none += 1
      return true
    }
    let empty = try snap.cursor(in: "ks", range: KeyRange(from: key(5), to: key(5)))
    try empty.seekToLast()
    try empty.forEachBackward { _, _ in
      none += 1
      return true
    }
    #expect(none == 0)
  }

  @Test func lookupsFromTheCursorsPathFindWhatGetFinds() throws {
    // Even keys only (odd ones are absent), one large value, a checkpoint
    // so the nodes come from the file, then more writes in memory.
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 512))
    try db.write { tx in for i in stride(from: 0, to: 6_000, by: 2) { try tx.put(key(i), b("v\(i)"), in: "ks") } }
    try db.checkpoint()
    try db.write { tx in
      try tx.put(key(2_500), [UInt8](repeating: 7, count: 5_000), in: "ks")
      for i in stride(from: 4_000, to: 4_400, by: 2) { try tx.put(key(i), b("w\(i)"), in: "ks") }
    }
    let snap = try db.snapshot()
    // Three levels or more: lookups pass branches below the root, which a
    // cursor remembers (its branch memo) once it has resolved them.
    #expect((db.storage.keyspaces["ks"]?.height ?? 0) >= 3)
    var rng = SplitMix64(seed: 9)
    let asked = (0..<3_000).map { _ in Int(rng.next() % 6_200) }
    for (name, order) in [("ascending", asked.sorted()), ("descending", asked.sorted().reversed()), ("random", asked)] {
      for range in [KeyRange.all, KeyRange(from: key(1_000), to: key(5_000))] {
        let c = try snap.cursor(in: "ks", range: range)
        for i in order {
          var got: [UInt8]?
          let found = try key(i).withUnsafeBytes { k in try c.visitValue(forKey: k) { got = Array($0) } }
          let inRange = range.contains(key(i))
          let want = inRange ? try snap.get(key(i), in: "ks") : nil
          #expect(found == (want != nil) && got == want, "\(name) \(i)")
          // Left before the first entry >= the key (when it is in range).
          if inRange {
            let next = try snap.cursor(in: "ks", range: KeyRange(from: key(i), to: range.upper)).next()
            #expect(try c.next()?.key == next?.key, "\(name) \(i): position")
          }
        }
      }
    }
  }

  /// More branches below the root than a cursor's branch memo has slots:
  /// slots are shared, and a lookup must never take a branch remembered
  /// for another block.
  @Test func lookupsThroughManyBranchesFindWhatGetFinds() throws {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 512))
    try db.write { tx in for i in stride(from: 0, to: 80_000, by: 2) { try tx.put(key(i), b("v\(i)"), in: "ks") } }
    try db.checkpoint()
    let snap = try db.snapshot()
    var rng = SplitMix64(seed: 21)
    let c = try snap.cursor(in: "ks")
    for n in 0..<4_000 {
      let i = Int(rng.next() % 80_000)
      var got: [UInt8]?
      let found = try key(i).withUnsafeBytes { k in try c.visitValue(forKey: k) { got = Array($0) } }
      #expect(found == (i % 2 == 0) && got == (i % 2 == 0 ? b("v\(i)") : nil), "lookup \(n): key \(i)")
    }
  }

  @Test func seekToOffsetUsesCounts() throws {
    let db = try Self.database(5_000)
    let snap = try db.snapshot()
    let c = try snap.cursor(in: "ks")
    let before = db.statistics
    try c.seek(toOffset: 3_210)
    #expect(try c.next()?.key == key(3_210))
    // O(height): a handful of nodes, not the thousands before offset 3,210.
    #expect(db.statistics.since(before).nodeReads < 12)
    try c.seek(toOffset: 10_000)
    #expect(try c.next() == nil)
    let r = try snap.cursor(in: "ks", range: KeyRange(from: key(1_000), to: key(2_000)))
    try r.seek(toOffset: 10)
    #expect(try r.next()?.key == key(1_010))
    try r.seek(toOffset: 5_000)
    #expect(try r.next() == nil)
  }

  @Test func aCursorInAWriteTransactionSeesTheStateWhenItWasMade() throws {
    let db = try Self.database(100)
    try db.write { tx in
      try tx.put(b("a-first"), b("x"), in: "ks")
      let c = try tx.cursor(in: "ks")
      try tx.put(key(50), b("changed"), in: "ks")  // after the cursor: not seen by it
      try tx.delete(key(0), in: "ks")
      var n = 0
      while let e = try c.next() {
        if e.key == key(50) { #expect(e.value == b("v50")) }
        n += 1
      }
      #expect(n == 101)
      #expect(try tx.get(key(50), in: "ks") == b("changed"))
    }
  }

  @Test func aCursorFailsAfterItsTransactionEnds() throws {
    let db = try Self.database(10)
    let tx = try db.beginWrite()
    let c = try tx.cursor(in: "ks")
    tx.rollback()
    #expect { try c.next() } throws: { ($0 as? EngineError)?.code == .closed }
  }
}
