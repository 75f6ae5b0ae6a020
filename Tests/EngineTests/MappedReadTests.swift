import EngineTestSupport
import Foundation
import Testing

@testable import Engine

/// The data file read through a map (`MappedReads`): only bytes the file
/// holds are handed out, a map grows with the file, and a store read
/// through one reads what a store read with `pread` reads.
@Suite struct MappedReadTests {
  @Test func aMapHandsOutOnlyWhatTheFileHoldsAndGrowsWithIt() throws {
    let folder = TempFolder()
    try FileManager.default.createDirectory(atPath: folder.path, withIntermediateDirectories: true)
    let fs = POSIXFileSystem()
    let file = try fs.open(folder.sub("f"), .create)
    defer { file.close() }
    let page = 4096
    func block(_ i: Int) -> [UInt8] { (0..<page).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) } }
    try file.write(block(0), at: 0)
    let reads = try #require(MappedReads(file: file, minimumLength: 2 * page))
    #expect(reads.mapCount == 1)
    let first = try #require(reads.bytes(at: 0, count: page))
    #expect(Array(first) == block(0))
    // Past the end: nil, never a fault; once written, the same bytes.
    #expect(reads.bytes(at: UInt64(page), count: 16) == nil)
    #expect(reads.bytes(at: 100, count: page) == nil)
    #expect(reads.bytes(at: UInt64.max - 8, count: 16) == nil)
    for i in 1..<40 { try file.write(block(i), at: UInt64(i * page)) }
    for i in stride(from: 39, through: 0, by: -3) {
      let bytes = try #require(reads.bytes(at: UInt64(i * page), count: page), "block \(i)")
      #expect(Array(bytes) == block(i), "block \(i)")
    }
    // Reaching block 39 took larger maps; the first is still readable by
    // whoever held its bytes.
    #expect(reads.mapCount > 1)
    #expect(Array(first) == block(0))
    // A block written over in place reads as written (the map is shared).
    try file.write(block(99), at: UInt64(5 * page))
    #expect(reads.bytes(at: UInt64(5 * page), count: page).map(Array.init) == block(99))
    // Pages are read through the map only once pread has read them: a
    // block across two pages needs both.
    #expect(reads.bytesOnReadPages(at: UInt64(page - 100), count: 200) == nil)
    reads.markRead(at: UInt64(page - 100), count: 50)
    #expect(reads.bytesOnReadPages(at: UInt64(page - 100), count: 200) == nil)
    reads.markRead(at: UInt64(page + 10), count: 1)
    let across = try #require(reads.bytesOnReadPages(at: UInt64(page - 100), count: 200))
    #expect(Array(across) == Array(block(0).suffix(100) + block(1).prefix(100)))
    #expect(reads.bytesOnReadPages(at: UInt64(2 * page), count: 1) == nil)
    // Closed: nothing more is handed out, and bytes handed out before stay
    // readable (a read in flight on another thread) but read as zeros.
    reads.close()
    #expect(reads.bytes(at: 0, count: page) == nil)
    #expect(first.allSatisfy { $0 == 0 })
    #expect(try file.read(at: 0, count: page) == block(0), "the file itself is untouched")
  }

  /// A store read through a map and the same store read with `pread`:
  /// the same answers for point reads, scans and large values, while
  /// another handle's commits and checkpoints grow the file.
  @Test func aMappedStoreReadsWhatPreadReads() throws {
    let folder = TempFolder()
    var rng = SplitMix64(seed: testSeed())
    func value(_ i: Int, _ round: Int) -> [UInt8] {
      i % 50 == 0 ? [UInt8](repeating: UInt8(truncatingIfNeeded: i &+ round), count: 3000) : b("v\(i) r\(round)")
    }
    var mappedOptions = Options()
    mappedOptions.cacheSize = 64 << 10
    mappedOptions.nodeSize = 1024
    var plainOptions = mappedOptions
    plainOptions.mapsDataFile = false
    let writer = try Database.open(at: folder.path, options: mappedOptions)
    defer { try? writer.close() }
    var state: [Int: Int] = [:]
    for round in 0..<6 {
      try writer.write { tx in
        for _ in 0..<800 {
          let i = Int(rng.next() % 3000)
          try tx.put(key(i), value(i, round), in: "ks")
          state[i] = round
        }
      }
      try writer.checkpoint()
      for options in [mappedOptions, plainOptions] {
        var readOnly = options
        readOnly.readOnly = true
        let reader = try Database.open(at: folder.path, options: readOnly)
        defer { try? reader.close() }
        #expect(reader.readsMappedDataFile == options.mapsDataFile)
        let snap = try reader.snapshot()
        for i in 0..<3000 {
          #expect(try snap.get(key(i), in: "ks") == state[i].map { value(i, $0) }, "key \(i) round \(round)")
        }
        #expect(try contents(snap, "ks").count == state.count)
      }
      // The writer's own reads go through its map too, across checkpoints.
      #expect(writer.readsMappedDataFile)
      for i in stride(from: 0, to: 3000, by: 7) {
        #expect(try writer.snapshot().get(key(i), in: "ks") == state[i].map { value(i, $0) })
      }
    }
  }
}
