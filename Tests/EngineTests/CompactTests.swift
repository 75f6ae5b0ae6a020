import Engine
import EngineTestSupport
import Foundation
import Testing

@Suite struct CompactTests {
  static func fill(_ db: Database, round: Int, count: Int = 3_000) throws {
    try db.write { tx in
      for i in 0..<count {
        let big = i % 500 == 0
        let value = big ? [UInt8](repeating: UInt8(truncatingIfNeeded: round), count: 3_000) : b("r\(round)-\(i)")
        try tx.put(key(i), value, in: i % 3 == 0 ? "side" : "main")
      }
      try tx.createKeyspace("empty")
    }
  }

  static func everything(_ reader: some KeyValueReader) throws -> [String: [[UInt8]: [UInt8]]] {
    var all: [String: [[UInt8]: [UInt8]]] = [:]
    for ks in try reader.keyspaces() { all[ks] = try contents(reader, ks) }
    return all
  }

  @Test func compactionReclaimsGarbageAndKeepsEveryKey() throws {
    let fs = MemoryFileSystem()
    var options = memoryOptions(fs, nodeSize: 1024)
    options.autoCompactGarbageRatio = nil
    let db = try Database.open(at: "/s", options: options)
    try Self.fill(db, round: 1)
    try db.checkpoint()
    try Self.fill(db, round: 2)  // every key overwritten once
    try db.checkpoint()
    let expected = try Self.everything(db.snapshot())
    let old = try db.snapshot()
    let before = db.storage
    #expect(before.garbageRatio > 0.4)

    let report = try db.compact()
    #expect(report.bytesBefore == before.dataFileBytes)
    #expect(report.bytesAfter <= before.dataFileBytes * 6 / 10, "\(report)")
    #expect(db.storage.garbageBytes == 0)
    #expect(db.statistics.compactions == 1)
    #expect(try Self.everything(db.snapshot()) == expected)
    #expect(try db.snapshot().verify().isClean)
    // A snapshot from before still reads the old file.
    #expect(try Self.everything(old) == expected)
    // Writes go on, and everything survives a reopen.
    try db.write { try $0.put(b("after"), b("1"), in: "main") }
    try db.close()
    let reopened = try Database.open(at: "/s", options: options)
    var expectedAfter = expected
    expectedAfter["main"]![b("after")] = b("1")
    #expect(try Self.everything(reopened.snapshot()) == expectedAfter)
    #expect(fs.contents(of: "/s/cairn.data.compact") == nil)
    try reopened.close()
  }

  @Test func compactionRunsByItselfPastTheGarbageRatio() throws {
    var options = memoryOptions(MemoryFileSystem(), nodeSize: 1024)
    options.autoCompactGarbageRatio = 0.5
    options.autoCompactMinimumBytes = 64 << 10
    let db = try Database.open(at: "/s", options: options)
    for round in 0..<4 {
      try Self.fill(db, round: round)
      try db.checkpoint()
    }
    #expect(db.statistics.compactions >= 1)
    #expect(db.storage.garbageRatio <= 0.5)
    #expect(try db.read { try $0.get(key(7), in: "main") } == b("r3-7"))
  }

  @Test func aPowerCutAnywhereInACompactionLeavesAWholeStore() throws {
    let recorder = RecordingFileSystem(MemoryFileSystem())
    var options = memoryOptions(recorder, nodeSize: 1024)
    options.autoCompactGarbageRatio = nil
    let db = try Database.open(at: "/s", options: options)
    try Self.fill(db, round: 1, count: 800)
    try db.checkpoint()
    try Self.fill(db, round: 2, count: 800)
    try db.checkpoint()
    let expected = try Self.everything(db.snapshot())
    let start = recorder.mutatingCount
    try db.compact()
    let end = recorder.mutatingCount
    try db.close()

    var points = 0
    try recorder.replay { k, disk in
      guard k >= start else { return true }
      for model: MemoryFileSystem.PowerLoss in [.dropUnsynced, .keepUnsynced(tearLastWriteAfter: 100)] {
        points += 1
        let image = disk.powerLoss(model)
        var o = memoryOptions(image, nodeSize: 1024)
        o.autoCompactGarbageRatio = nil
        let reopened = try Database.open(at: "/s", options: o)
        let snap = try reopened.snapshot()
        #expect(try Self.everything(snap) == expected, "crash after op \(k) of \(start)...\(end)")
        #expect(snap.verify().isClean, "crash after op \(k)")
        try reopened.close()
      }
      return k < end
    }
    #expect(points > 20)
  }
}
