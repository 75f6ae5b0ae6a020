import Engine
import EngineTestSupport
import Foundation
import Testing

@Suite struct DatabaseTests {
  @Test func putGetDeleteAndOverwrite() throws {
    let db = try Database.inMemory()
    try db.write { tx in
      try tx.put(b("a"), b("1"), in: "ks")
      try tx.put(b("b"), b("2"), in: "ks")
      try tx.put(b("a"), b("3"), in: "ks")
      #expect(try tx.get(b("a"), in: "ks") == b("3"))
    }
    #expect(try db.read { try $0.get(b("a"), in: "ks") } == b("3"))
    #expect(try db.read { try $0.get(b("b"), in: "ks") } == b("2"))
    #expect(try db.read { try $0.get(b("c"), in: "ks") } == nil)
    let removed = try db.write { try $0.delete(b("a"), in: "ks") }
    #expect(removed)
    #expect(try db.write { try $0.delete(b("a"), in: "ks") } == false)
    #expect(try db.read { try $0.get(b("a"), in: "ks") } == nil)
    #expect(try db.read { try $0.count(in: "ks") } == 1)
  }

  @Test func insertStoresOnlyAbsentKeysAndLeavesPresentOnesUntouched() throws {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs))
    // Into a keyspace that does not exist yet, and enough keys to split.
    try db.write { tx throws in
      for i in 0..<2_000 { #expect(try tx.insert(key(i), b("first"), in: "ks")) }
      #expect(try tx.insert(key(7), b("second"), in: "ks") == false)
      #expect(try tx.get(key(7), in: "ks") == b("first"))
    }
    let stream = try db.subscribe()
    let walBefore = db.statistics.walBytesWritten
    let tx = try db.beginWrite(trackingChanges: true)
    for i in stride(from: 0, to: 2_000, by: 97) {
      #expect(try tx.insert(key(i), b("again"), in: "ks") == false)
    }
    #expect(tx.changes?.keyspaces["ks"] == nil, "refused inserts are not changes")
    #expect(try tx.insert(key(5_000), b("new"), in: "ks"))
    try tx.commit()
    let e = try #require(stream.poll())
    #expect(e.changes.keyspaces["ks"]?.inserted == [key(5_000)])
    #expect(e.changes.keyspaces["ks"]?.updated.isEmpty == true)
    // Only the one stored key reached the log.
    #expect(db.statistics.walBytesWritten - walBefore < 200)
    // A transaction of refused inserts alone writes nothing.
    let walAfter = db.statistics.walBytesWritten
    try db.write { tx throws in #expect(try tx.insert(key(3), b("x"), in: "ks") == false) }
    #expect(db.statistics.walBytesWritten == walAfter)
    try db.close()

    // After recovery from the log, the same answers.
    let again = try Database.open(at: "/s", options: memoryOptions(fs))
    #expect(try again.read { try $0.count(in: "ks") } == 2_001)
    #expect(try again.read { try $0.get(key(97), in: "ks") } == b("first"))
    #expect(try again.write { try $0.insert(key(97), b("y"), in: "ks") } == false)
    #expect(try again.write { try $0.insert(key(2_000), b("y"), in: "ks") })
    #expect(try again.read { try $0.get(key(2_000), in: "ks") } == b("y"))
    #expect(throws: EngineError.self) { try again.write { try $0.insert([], b("v"), in: "") } }
    #expect(try again.snapshot().verify().isClean)
    try again.close()
  }

  @Test func keyspacesAreCreatedOnFirstUseListedAndDropped() throws {
    let db = try Database.inMemory()
    try db.write { tx in
      try tx.put(b("k"), b("v"), in: "zeta")
      try tx.put(b("k"), b("w"), in: "alpha")
      try tx.createKeyspace("empty")
    }
    #expect(try db.read { try $0.keyspaces() } == ["alpha", "empty", "zeta"])
    #expect(try db.read { try $0.get(b("k"), in: "alpha") } == b("w"))
    #expect(try db.write { try $0.dropKeyspace("zeta") })
    #expect(try db.read { try $0.keyspaces() } == ["alpha", "empty"])
    #expect(try db.read { try $0.get(b("k"), in: "zeta") } == nil)
    #expect(try db.read { try $0.count(in: "nosuch") } == 0)
  }

  @Test func keyspacesSurviveReopen() throws {
    let fs = MemoryFileSystem()
    do {
      let db = try Database.open(at: "/s", options: memoryOptions(fs))
      try db.write { tx in
        try tx.createKeyspace("empty")
        try tx.put(b("x"), b("y"), in: "full")
      }
      try db.close()
    }
    let db = try Database.open(at: "/s", options: memoryOptions(fs))
    #expect(try db.read { try $0.keyspaces() } == ["empty", "full"])
    #expect(try db.read { try $0.get(b("x"), in: "full") } == b("y"))
    try db.close()
  }

  /// `expectWrites` past what a WAL record may carry commits by checkpoint
  /// at once; a small one changes nothing. Either way the writes are there
  /// after a reopen.
  @Test func aLargeExpectedWriteCommitsByCheckpoint() throws {
    let fs = MemoryFileSystem()
    do {
      let db = try Database.open(at: "/s", options: memoryOptions(fs))
      let before = db.statistics
      try db.write { tx in
        try tx.put(b("a"), b("1"), in: "ks")
        let logged = try #require(tx.loggedBytes)
        tx.expectWrites(bytes: 1_000)
        #expect(tx.loggedBytes == logged)
      }
      let small = db.statistics.since(before)
      #expect(small.checkpoints == 0)
      #expect(small.walBytesWritten > 0)

      let middle = db.statistics
      try db.write { tx in
        try tx.put(b("b"), b("2"), in: "ks")
        tx.expectWrites(bytes: 64 << 20)
        #expect(tx.loggedBytes == nil)
        try tx.put(b("c"), b("3"), in: "ks")
      }
      let large = db.statistics.since(middle)
      #expect(large.checkpoints == 1)
      #expect(large.walBytesWritten == 0)
      #expect(try db.read { try $0.get(b("c"), in: "ks") } == b("3"))

      // A guess within a fifth of the room left is taken as too big; one
      // at half the room is not. (The limit: a quarter of the 64 MiB
      // checkpoint threshold.)
      let limit = (64 << 20) / 4
      for (share, logs) in [(0.9, false), (0.5, true)] {
        try db.write { tx in
          try tx.put(b("d"), b("4"), in: "ks")
          let room = limit - (try #require(tx.loggedBytes))
          tx.expectWrites(bytes: Int(Double(room) * share))
          #expect((tx.loggedBytes != nil) == logs, "a guess of \(share) of the room")
        }
      }
      try db.close()
    }
    let db = try Database.open(at: "/s", options: memoryOptions(fs))
    #expect(try db.read { tx in try ["a", "b", "c"].map { try tx.get(b($0), in: "ks") } } == [b("1"), b("2"), b("3")])
    try db.close()
  }

  @Test func aThrowingClosureRollsEverythingBack() throws {
    struct Boom: Error {}
    let db = try Database.inMemory()
    try db.write { try $0.put(b("keep"), b("1"), in: "ks") }
    #expect(throws: Boom.self) {
      try db.write { tx in
        try tx.put(b("keep"), b("2"), in: "ks")
        try tx.put(b("new"), b("x"), in: "other")
        try tx.deleteRange(KeyRange.all, in: "ks")
        throw Boom()
      }
    }
    #expect(try db.read { try $0.get(b("keep"), in: "ks") } == b("1"))
    #expect(try db.read { try $0.keyspaces() } == ["ks"])
    // The gate was released: another write goes through.
    try db.write { try $0.put(b("after"), b("1"), in: "ks") }
    #expect(try db.read { try $0.count(in: "ks") } == 2)
  }

  @Test func explicitBeginCommitAndRollback() throws {
    let db = try Database.inMemory()
    let tx = try db.beginWrite()
    try tx.put(b("a"), b("1"), in: "ks")
    #expect(try db.read { try $0.get(b("a"), in: "ks") } == nil)  // not yet visible
    try tx.commit()
    #expect(try db.read { try $0.get(b("a"), in: "ks") } == b("1"))
    #expect(throws: EngineError.self) { try tx.put(b("b"), b("2"), in: "ks") }

    let tx2 = try db.beginWrite()
    try tx2.put(b("a"), b("2"), in: "ks")
    tx2.rollback()
    #expect(try db.read { try $0.get(b("a"), in: "ks") } == b("1"))

    // A transaction dropped without commit rolls back and frees the writer.
    do {
      let tx3 = try db.beginWrite()
      try tx3.put(b("a"), b("3"), in: "ks")
    }
    try db.write { try $0.put(b("z"), b("z"), in: "ks") }
    #expect(try db.read { try $0.get(b("a"), in: "ks") } == b("1"))
  }

  @Test func aTransactionCanMoveBetweenThreads() async throws {
    let db = try Database.inMemory()
    let tx = try db.beginWrite()
    try tx.put(b("a"), b("1"), in: "ks")
    let committed = try await Task.detached { [tx] in
      try tx.commit()
      return true
    }.value
    #expect(committed)
    try db.write { try $0.put(b("b"), b("2"), in: "ks") }
    #expect(try db.read { try $0.count(in: "ks") } == 2)
  }

  @Test func oversizedKeysValuesAndBadNamesAreErrors() throws {
    let db = try Database.inMemory()
    try db.write { tx in
      #expect {
        try tx.put([UInt8](repeating: 1, count: Limits.maxKeySize + 1), b("v"), in: "ks")
      } throws: { ($0 as? EngineError)?.code == .keyTooLarge }
      #expect {
        try tx.put(b("k"), [UInt8](repeating: 1, count: Limits.maxValueSize + 1), in: "ks")
      } throws: { ($0 as? EngineError)?.code == .valueTooLarge }
      #expect { try tx.put(b("k"), b("v"), in: "") } throws: { ($0 as? EngineError)?.code == .invalidArgument }
      #expect {
        try tx.put(b("k"), b("v"), in: String(repeating: "n", count: 256))
      } throws: { ($0 as? EngineError)?.code == .invalidArgument }
      // The limits themselves are fine.
      try tx.put([UInt8](repeating: 2, count: Limits.maxKeySize), b("v"), in: "ks")
    }
    #expect(try db.read { try $0.count(in: "ks") } == 1)
  }

  @Test func emptyKeysAndEmptyValuesAreAllowed() throws {
    let db = try Database.inMemory()
    try db.write { tx in
      try tx.put([], b("empty key"), in: "ks")
      try tx.put(b("k"), [], in: "ks")
    }
    #expect(try db.read { try $0.get([], in: "ks") } == b("empty key"))
    #expect(try db.read { try $0.get(b("k"), in: "ks") } == [])
  }

  @Test func largeValuesRoundTripThroughCheckpointsAndReopen() throws {
    let fs = MemoryFileSystem()
    var rng = SplitMix64(seed: 7)
    let big = (0..<300_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
    let text = Array(String(repeating: "compressible text ", count: 5_000).utf8)
    do {
      let db = try Database.open(at: "/s", options: memoryOptions(fs))
      try db.write { tx in
        try tx.put(b("big"), big, in: "ks")
        try tx.put(b("text"), text, in: "ks")
        try tx.put(b("small"), b("s"), in: "ks")
      }
      try db.checkpoint()
      #expect(try db.read { try $0.get(b("big"), in: "ks") } == big)
      try db.write { try $0.put(b("big2"), big, in: "ks") }
      try db.close()
    }
    let db = try Database.open(at: "/s", options: memoryOptions(fs))
    #expect(try db.read { try $0.get(b("big"), in: "ks") } == big)
    #expect(try db.read { try $0.get(b("big2"), in: "ks") } == big)
    #expect(try db.read { try $0.get(b("text"), in: "ks") } == text)
    #expect(try db.snapshot().verify().isClean)
    // The text value was compressed: the data file is far smaller than what it holds.
    #expect(fs.contents(of: "/s/cairn.data")!.count < 2 * big.count + text.count / 2)
    try db.close()
  }

  @Test func closedDatabaseRefusesWorkAndSnapshotsFail() throws {
    let db = try Database.inMemory()
    try db.write { try $0.put(b("a"), b("1"), in: "ks") }
    let snap = try db.snapshot()
    try db.close()
    try db.close()  // twice is fine
    #expect { try db.write { try $0.put(b("a"), b("2"), in: "ks") } } throws: {
      ($0 as? EngineError)?.code == .closed
    }
    #expect { try snap.get(b("a"), in: "ks") } throws: { ($0 as? EngineError)?.code == .closed }
    #expect { try db.snapshot() } throws: { ($0 as? EngineError)?.code == .closed }
  }

  @Test func twoHandlesShareAStoreAndTakeTurnsToWrite() throws {
    let folder = TempFolder()
    var options = Options()
    options.busyTimeout = 0.2
    let one = try Database.open(at: folder.path, options: options)
    let two = try Database.open(at: folder.path, options: options)
    try one.write { try $0.put(b("x"), b("1"), in: "ks") }
    #expect(try two.read { try $0.get(b("x"), in: "ks") } == b("1"))
    try two.write { try $0.put(b("y"), b("2"), in: "ks") }
    #expect(try one.read { try $0.get(b("y"), in: "ks") } == b("2"))
    // While one handle is inside a write transaction, the other waits for
    // the lock, then gives up with busy; readers never wait.
    let tx = try one.beginWrite()
    try tx.put(b("z"), b("3"), in: "ks")
    let started = Date()
    #expect { try two.beginWrite() } throws: { ($0 as? EngineError)?.code == .busy }
    #expect(Date().timeIntervalSince(started) >= 0.15)
    #expect(try two.read { try $0.get(b("y"), in: "ks") } == b("2"))
    try tx.commit()
    try two.write { try $0.put(b("w"), b("4"), in: "ks") }
    #expect(try one.read { try $0.count(in: "ks") } == 4)
    try one.close()
    try two.close()
    let again = try Database.open(at: folder.path)
    #expect(try again.read { try $0.count(in: "ks") } == 4)
    try again.close()
  }

  @Test func readOnlyStoresServeReadsAndRefuseWrites() throws {
    let folder = TempFolder()
    do {
      let db = try Database.open(at: folder.path)
      try db.write { try $0.put(b("a"), b("1"), in: "ks") }
      try db.close()
    }
    var ro = Options()
    ro.readOnly = true
    let r1 = try Database.open(at: folder.path, options: ro)
    let r2 = try Database.open(at: folder.path, options: ro)  // readers share
    #expect(try r1.read { try $0.get(b("a"), in: "ks") } == b("1"))
    #expect { try r1.write { try $0.put(b("b"), b("2"), in: "ks") } } throws: {
      ($0 as? EngineError)?.code == .readOnly
    }
    // A writer opens beside them, and they see its commits.
    let w = try Database.open(at: folder.path)
    try w.write { try $0.put(b("b"), b("2"), in: "ks") }
    #expect(try r2.read { try $0.get(b("b"), in: "ks") } == b("2"))
    try w.close()
    try r1.close()
    try r2.close()
  }

  @Test func filesAreCreatedWithMode0600() throws {
    let folder = TempFolder()
    let db = try Database.open(at: folder.path)
    try db.write { try $0.put(b("a"), b("1"), in: "ks") }
    for name in ["cairn.data", "cairn.wal", "cairn.lock"] {
      let attrs = try FileManager.default.attributesOfItem(atPath: folder.path + "/" + name)
      #expect((attrs[.posixPermissions] as? NSNumber)?.intValue == 0o600, "\(name)")
    }
    try db.close()
  }

  @Test func openingSomethingElseIsNotAStore() throws {
    let folder = TempFolder()
    try FileManager.default.createDirectory(atPath: folder.path, withIntermediateDirectories: true)
    _ = FileManager.default.createFile(atPath: folder.path + "/notes.txt", contents: Data("hello".utf8))
    #expect { try Database.open(at: folder.path) } throws: { ($0 as? EngineError)?.code == .notAStore }
    // A plain file instead of a folder.
    #expect { try Database.open(at: folder.path + "/notes.txt") } throws: {
      ($0 as? EngineError)?.code == .notAStore
    }
    var noCreate = Options()
    noCreate.createIfMissing = false
    #expect { try Database.open(at: folder.sub("missing"), options: noCreate) } throws: {
      ($0 as? EngineError)?.code == .notAStore
    }
    // A random file named like a data file.
    let fake = folder.sub("fake")
    try FileManager.default.createDirectory(atPath: fake, withIntermediateDirectories: true)
    _ = FileManager.default.createFile(atPath: fake + "/cairn.data", contents: Data((0..<500).map { UInt8($0 % 251) }))
    #expect { try Database.open(at: fake) } throws: { ($0 as? EngineError)?.code == .notAStore }
  }

  @Test func invalidOptionsAreRejected() throws {
    var o = Options()
    o.nodeSize = 100
    #expect { try Database.inMemory(options: o) } throws: { ($0 as? EngineError)?.code == .invalidArgument }
    o = Options()
    o.durability = .normal(syncIntervalMilliseconds: 0)
    #expect { try Database.inMemory(options: o) } throws: { ($0 as? EngineError)?.code == .invalidArgument }
  }

  @Test func manyKeysSplitAndMergeAndVerify() throws {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 512))
    try db.write { tx in
      for i in stride(from: 0, to: 20_000, by: 1) { try tx.put(key(i), key(i * 7), in: "ks") }
    }
    #expect(try db.snapshot().verify().isClean)
    try db.checkpoint()
    try db.write { tx in
      for i in stride(from: 0, to: 20_000, by: 3) { try tx.delete(key(i), in: "ks") }
    }
    let snap = try db.snapshot()
    let report = snap.verify()
    #expect(report.isClean, "\(report.problems.prefix(5))")
    #expect(try snap.count(in: "ks") == 20_000 - 6_667)
    #expect(try snap.get(key(1), in: "ks") == key(7))
    #expect(try snap.get(key(3), in: "ks") == nil)
    try db.close()
  }

  @Test func normalDurabilityCommitsAndFlushes() throws {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs, durability: .normal(syncIntervalMilliseconds: 5)))
    try db.write { try $0.put(b("a"), b("1"), in: "ks") }
    #expect(try db.read { try $0.get(b("a"), in: "ks") } == b("1"))
    // The background flush makes it durable within the interval.
    var durable = false
    for _ in 0..<400 where !durable {
      usleep(5_000)
      let image = fs.powerLoss(.dropUnsynced)
      durable =
        (try? Database.open(at: "/s", options: memoryOptions(image)).read { try $0.get(b("a"), in: "ks") }) == b("1")
    }
    #expect(durable)
    try db.close()
  }
}
