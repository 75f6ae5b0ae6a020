import EngineTestSupport
import Foundation
import Testing

@testable import Engine

/// One ``Compressor`` reused across blocks must produce blocks that stand
/// alone: each decodes with no knowledge of the blocks before it.
@Suite struct CompressionTests {
  /// A deterministic generator, so a failure names a reproducible block.
  struct Bytes {
    var state: UInt64
    mutating func next() -> UInt64 {
      state &+= 0x9E37_79B9_7F4A_7C15
      var z = state
      z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
      z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
      return z ^ (z >> 31)
    }
    /// `count` bytes drawn from an alphabet of `alphabet` symbols, with runs.
    mutating func block(_ count: Int, alphabet: Int) -> [UInt8] {
      var out: [UInt8] = []
      out.reserveCapacity(count)
      while out.count < count {
        let byte = UInt8(truncatingIfNeeded: Int(next() % UInt64(alphabet)) + 32)
        let run = Int(next() % 6) + 1
        for _ in 0..<min(run, count - out.count) { out.append(byte) }
      }
      return out
    }
  }

  @Test func reusedStateWritesIndependentBlocks() throws {
    let compressor = Compressor()
    var gen = Bytes(state: 42)
    var previous: [UInt8] = []
    var compressedBlocks = 0
    for i in 0..<400 {
      // Every third block repeats the one before it, which a stream that
      // still remembered that block would encode as references into it.
      let input =
        i % 3 == 2
        ? previous
        : gen.block([64, 100, 4096, 4096, 65_536, 300_000][i % 6], alphabet: [4, 40, 250][i % 3])
      let stored = compressor.compress(input) { Array($0) }
      if let stored {
        compressedBlocks += 1
        #expect(stored.count <= input.count - input.count / 16)
        let back = try stored.withUnsafeBytes {
          try Compression.decompress($0, rawLength: input.count, path: nil, offset: 0)
        }
        #expect(back == input, "block \(i) of \(input.count) bytes")
        // Into memory of the caller's (a point read's scratch), the same bytes.
        var into = [UInt8](repeating: 0, count: input.count)
        try stored.withUnsafeBytes { s in
          try into.withUnsafeMutableBytes { try Compression.decompress(s, into: $0, path: nil, offset: 0) }
        }
        #expect(into == input, "block \(i) of \(input.count) bytes, into a buffer")
      }
      previous = input
    }
    #expect(compressedBlocks > 300)
  }

  @Test func incompressibleAndTinyInputsStayRaw() {
    let compressor = Compressor()
    var gen = Bytes(state: 7)
    let noise = (0..<4096).map { _ in UInt8(truncatingIfNeeded: gen.next()) }
    #expect(compressor.compress(noise) { $0.count } == nil)
    #expect(compressor.compress([UInt8](repeating: 1, count: 63)) { $0.count } == nil)
    #expect(compressor.compress([UInt8](repeating: 1, count: 64)) { $0.count } != nil)
  }

  /// A framed block written through a reused compressor reads back through
  /// the same path a node read takes.
  @Test func framedBlocksParse() throws {
    let compressor = Compressor()
    var gen = Bytes(state: 9)
    var file: [UInt8] = []
    var blocks: [(offset: Int, payload: [UInt8])] = []
    for i in 0..<50 {
      let payload = gen.block(i % 2 == 0 ? 4096 : 63, alphabet: 8)
      blocks.append((file.count, payload))
      try BlockFraming.frame(
        kind: .leaf, payload: payload, at: UInt64(file.count), compressor: compressor, cipher: nil, into: &file)
    }
    for (n, (offset, payload)) in blocks.enumerated() {
      let end = n + 1 < blocks.count ? blocks[n + 1].offset : file.count
      let block = try BlockFraming.parse(
        Array(file[offset..<end]), at: UInt64(offset), expectedLength: end - offset, path: nil, cipher: nil)
      #expect(block.payload == payload)
      #expect(block.compressed == (payload.count == 4096))  // under 64 bytes stays raw
    }
  }

  /// A payload compressed ahead of framing (as a checkpoint's workers do)
  /// frames to the same bytes as one compressed in place, and sealed ones
  /// read back the same.
  @Test func preparedFramesMatchFramesMadeInPlace() throws {
    let compressor = Compressor()
    let ahead = Compressor()
    let cipher = BlockCipher(key: (0..<32).map { UInt8($0) })
    var gen = Bytes(state: 11)
    var sawRaw = false
    var sawCompressed = false
    for i in 0..<60 {
      let payload =
        i % 3 == 0
        ? (0..<1000).map { _ in UInt8(truncatingIfNeeded: gen.next()) }  // stays raw
        : gen.block([40, 900, 5000][i % 3], alphabet: 8)
      let offset = UInt64(4096 + i * 64)
      let prepared = BlockFraming.Prepared(payload, compressor: ahead)
      if prepared.compressed == nil { sawRaw = true } else { sawCompressed = true }
      var inPlace: [UInt8] = []
      var framed: [UInt8] = []
      try BlockFraming.frame(
        kind: .leaf, payload: payload, at: offset, compressor: compressor, cipher: nil, into: &inPlace)
      try BlockFraming.frame(kind: .leaf, prepared: prepared, at: offset, cipher: nil, into: &framed)
      #expect(framed == inPlace, "block \(i)")
      // Sealed blocks carry a random nonce: compare what they open to.
      var sealed: [UInt8] = []
      try BlockFraming.frame(kind: .leaf, prepared: prepared, at: offset, cipher: cipher, into: &sealed)
      let block = try BlockFraming.parse(sealed, at: offset, expectedLength: sealed.count, path: nil, cipher: cipher)
      #expect(block.payload == payload && block.compressed == (prepared.compressed != nil), "sealed block \(i)")
    }
    #expect(sawRaw && sawCompressed)
  }

  /// One large commit's checkpoint hands a branch's leaves to every core;
  /// what it writes reads back, in clear and sealed, after a reopen.
  @Test func aLargeCheckpointSharesItsLeavesAndReadsBack() throws {
    for encryption in [nil, Encryption.key((0..<32).map { UInt8($0 &+ 3) })] {
      let fs = MemoryFileSystem()
      var options = memoryOptions(fs, nodeSize: 1024)
      options.encryption = encryption
      let db = try Database.open(at: "/store", options: options)
      var gen = Bytes(state: 5)
      var want: [[UInt8]: [UInt8]] = [:]
      try db.write { tx in
        for _ in 0..<6_000 {
          let key = Array("k\(gen.next() % 1_000_000)".utf8)
          let value = gen.block(Int(gen.next() % 120) + 10, alphabet: 6)
          want[key] = value
          try tx.put(key, value, in: "main")
        }
      }
      try db.checkpoint()
      let shared = db.counters.leavesPreparedInParallel.current
      // One core: every leaf is written on the writer's thread.
      if ProcessInfo.processInfo.activeProcessorCount > 1 { #expect(shared > 50, "\(shared) leaves shared") }
      try db.close()
      let again = try Database.open(at: "/store", options: options)
      #expect(try contents(again.snapshot(), "main") == want)
      #expect(try again.snapshot().verify().isClean)
      try again.close()
    }
  }
}
