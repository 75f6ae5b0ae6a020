import Engine
import EngineTestSupport
import Foundation
import Testing

/// Opening damaged or unusual stores: FORMAT.md §5.
@Suite struct RecoveryTests {
  /// A store with a checkpoint and two more commits still in the WAL.
  static func store() throws -> MemoryFileSystem {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 512))
    try db.write { tx in for i in 0..<200 { try tx.put(key(i), key(i), in: "ks") } }
    try db.checkpoint()
    try db.write { try $0.put(b("late1"), b("1"), in: "ks") }
    try db.write { try $0.put(b("late2"), b("2"), in: "ks") }
    return fs.powerLoss(.dropUnsynced)
  }

  static func code(_ body: () throws -> Void) -> EngineError.Code? {
    do {
      try body()
      return nil
    } catch {
      return (error as? EngineError)?.code
    }
  }

  @Test func aMissingWALIsCorruption() throws {
    let fs = try Self.store()
    try fs.remove("/s/cairn.wal")
    #expect(Self.code { _ = try Database.open(at: "/s", options: memoryOptions(fs)) } == .corrupted)
  }

  @Test func aWALFromAnotherStoreIsCorruption() throws {
    let a = try Self.store()
    let b = try Self.store()
    a.setContents(of: "/s/cairn.wal", to: b.contents(of: "/s/cairn.wal")!)
    #expect(Self.code { _ = try Database.open(at: "/s", options: memoryOptions(a)) } == .corrupted)
  }

  @Test func aTornCheckpointTailIsCutOffAndTheWALReplays() throws {
    let fs = try Self.store()
    var data = fs.contents(of: "/s/cairn.data")!
    let cleanSize = data.count
    // A checkpoint a crash cut short: node bytes after the last commit record.
    data += [UInt8](repeating: 0xAB, count: 3_000)
    fs.setContents(of: "/s/cairn.data", to: data)
    let db = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 512))
    #expect(try db.read { try $0.get(b("late2"), in: "ks") } == b("2"))
    #expect(try db.read { try $0.count(in: "ks") } == 202)
    try db.close()
    // The garbage was cut off before the next checkpoint appended.
    let reopened = try Database.open(at: "/s", options: memoryOptions(fs, nodeSize: 512))
    #expect(try reopened.snapshot().verify().isClean)
    try reopened.close()
    #expect(fs.contents(of: "/s/cairn.data")!.count > cleanSize)
  }

  @Test func aDataFileCutBeforeTheCommitTheWALNamesIsCorruption() throws {
    let fs = try Self.store()
    let data = fs.contents(of: "/s/cairn.data")!
    fs.setContents(of: "/s/cairn.data", to: Array(data.prefix(data.count - 10)))
    #expect(Self.code { _ = try Database.open(at: "/s", options: memoryOptions(fs)) } == .corrupted)
  }

  @Test func aReadOnlyOpenReplaysWithoutWriting() throws {
    let fs = try Self.store()
    let dataBefore = fs.contents(of: "/s/cairn.data")!
    let walBefore = fs.contents(of: "/s/cairn.wal")!
    var options = memoryOptions(fs)
    options.readOnly = true
    let db = try Database.open(at: "/s", options: options)
    #expect(try db.read { try $0.get(b("late1"), in: "ks") } == b("1"))
    try db.close()
    #expect(fs.contents(of: "/s/cairn.data")! == dataBefore)
    #expect(fs.contents(of: "/s/cairn.wal")! == walBefore)
  }

  @Test func aWritableOpenCheckpointsTheReplayedLog() throws {
    let fs = try Self.store()
    #expect(fs.contents(of: "/s/cairn.wal")!.count > 64)
    let db = try Database.open(at: "/s", options: memoryOptions(fs))
    #expect(db.walSize == 64)
    #expect(fs.contents(of: "/s/cairn.wal")!.count == 64)
    #expect(try db.read { try $0.get(b("late2"), in: "ks") } == b("2"))
    try db.close()
  }

  @Test func anInterruptedCreationStartsOver() throws {
    // A crash before the data file was renamed into place leaves only the
    // temporary files: there is no store yet, and opening creates one.
    let fs = MemoryFileSystem()
    try fs.createDirectory("/s")
    fs.setContents(of: "/s/cairn.data.new", to: [1, 2, 3])
    fs.setContents(of: "/s/cairn.wal", to: [4, 5, 6])
    let db = try Database.open(at: "/s", options: memoryOptions(fs))
    try db.write { try $0.put(b("a"), b("1"), in: "ks") }
    try db.close()
    #expect(try Database.open(at: "/s", options: memoryOptions(fs)).read { try $0.get(b("a"), in: "ks") } == b("1"))
  }

  @Test func anEmptyDataFileIsCorruptionNotACrash() throws {
    let fs = try Self.store()
    fs.setContents(of: "/s/cairn.data", to: [])
    #expect(Self.code { _ = try Database.open(at: "/s", options: memoryOptions(fs)) } == .corrupted)
  }

  @Test func everyTruncationOfTheDataFileIsHandled() throws {
    // Cut the data file at many lengths: each open either recovers the full
    // contents (the cut only removed garbage) or reports corruption.
    let original = try Self.store()
    let data = original.contents(of: "/s/cairn.data")!
    for length in stride(from: 0, to: data.count, by: max(1, data.count / 150)) {
      let fs = original.copy()
      fs.setContents(of: "/s/cairn.data", to: Array(data.prefix(length)))
      do {
        let db = try Database.open(at: "/s", options: memoryOptions(fs))
        #expect(try db.read { try $0.count(in: "ks") } == 202, "cut at \(length)")
        try db.close()
      } catch let e as EngineError {
        #expect(e.code == .corrupted || e.code == .notAStore, "cut at \(length): \(e)")
      }
    }
  }
}
