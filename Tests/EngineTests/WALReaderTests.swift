import Foundation
import Testing

@testable import Engine

/// The WAL recovery rules of FORMAT.md §5, one test per rule.
@Suite struct WALReaderTests {
  static let salt: UInt64 = 0x1234_5678_9ABC_DEF0

  /// A log of `count` records; record i (from 1) puts key i. `synced(i)` is
  /// the synced-through position written into record i.
  static func log(_ count: Int, synced: (Int, UInt64) -> UInt64 = { _, p in p }) -> (bytes: [UInt8], starts: [Int]) {
    let header = WALHeader(
      storeID: [UInt8](repeating: 7, count: 16), salt: salt, checkpointSequence: .zero,
      checkpointOffset: BlockOffset(64))
    var bytes = header.encode()
    var starts: [Int] = []
    for i in 1...count {
      var builder = WALRecordBuilder()
      builder.append(.put(keyspace: "ks", key: key(i), value: [UInt8](repeating: UInt8(i), count: 40)))
      let position = UInt64(bytes.count)
      starts.append(bytes.count)
      bytes += builder.clearRecord(
        sequence: CommitSequence(UInt64(i)), syncedThrough: WALPosition(synced(i, position)), position: position,
        salt: salt)
    }
    return (bytes, starts)
  }

  static func scan(_ bytes: [UInt8]) throws -> (sequences: [UInt64], end: UInt64) {
    var seen: [UInt64] = []
    let result = try WALReader.scan(bytes, salt: salt, path: "wal", cipher: nil) { seen.append($0.sequence.rawValue) }
    return (seen, result.end)
  }

  static func isCorruption(_ bytes: [UInt8], at offset: Int) -> Bool {
    do {
      _ = try scan(bytes)
      return false
    } catch let e as EngineError {
      return e.code == .corrupted && e.offset == UInt64(offset) && e.path == "wal"
    } catch {
      return false
    }
  }

  @Test func everyCompleteRecordIsReadInOrder() throws {
    let (bytes, _) = Self.log(5)
    let result = try Self.scan(bytes)
    #expect(result.sequences == [1, 2, 3, 4, 5])
    #expect(result.end == UInt64(bytes.count))
  }

  @Test func truncatedTrailingRecordIsIgnored() throws {
    let (bytes, starts) = Self.log(3)
    // Cut the log at every byte inside the last record.
    for cut in starts[2]..<bytes.count {
      let result = try Self.scan(Array(bytes[..<cut]))
      #expect(result.sequences == [1, 2], "cut at \(cut)")
      #expect(result.end == UInt64(starts[2]))
    }
  }

  @Test func aTrailerThatNeverReachedTheDiskIsATornWrite() throws {
    var (bytes, starts) = Self.log(3)
    // The last record's final bytes are zeros (the file grew before its data landed).
    for i in (bytes.count - 20)..<bytes.count { bytes[i] = 0 }
    #expect(try Self.scan(bytes).sequences == [1, 2])
    #expect(try Self.scan(bytes).end == UInt64(starts[2]))
  }

  @Test func checksumMismatchInTheLastRecordIsCorruption() throws {
    let (bytes, starts) = Self.log(3)
    // Every byte of the last record, damaged alone.
    for i in starts[2]..<bytes.count {
      var damaged = bytes
      damaged[i] ^= 0x5A
      #expect(Self.isCorruption(damaged, at: starts[2]), "byte \(i)")
    }
  }

  @Test func damageToAMiddleRecordIsCorruption() throws {
    let (bytes, starts) = Self.log(4)
    for i in starts[1]..<starts[2] {
      var damaged = bytes
      damaged[i] ^= 0x01
      #expect(Self.isCorruption(damaged, at: starts[1]), "byte \(i)")
    }
  }

  @Test func aLengthPointingPastTheEndIsCaughtByTheTrailer() throws {
    var (bytes, starts) = Self.log(2)
    // The last record's length now runs past the end of the file.
    bytes.withUnsafeMutableBytes {
      $0.storeBytes(of: UInt32(5000).littleEndian, toByteOffset: starts[1] + 8, as: UInt32.self)
    }
    #expect(Self.isCorruption(bytes, at: starts[1]))
  }

  @Test func aMissingRecordBeforeALaterSyncedOneIsCorruption() throws {
    // Record 3 says records through the end of record 2 were durable when it was written.
    var (bytes, starts) = Self.log(3)
    for i in starts[1]..<starts[2] { bytes[i] = 0 }
    #expect(Self.isCorruption(bytes, at: starts[1]))
  }

  @Test func aMissingUnsyncedRecordEndsTheLogThere() throws {
    // Nothing was ever synced past the header (normal durability, or group
    // commit): record 2 never landed, record 3 did. Both go.
    var (bytes, starts) = Self.log(3, synced: { _, _ in 64 })
    for i in starts[1]..<starts[2] { bytes[i] = 0 }
    let result = try Self.scan(bytes)
    #expect(result.sequences == [1])
    #expect(result.end == UInt64(starts[1]))
  }

  @Test func aRecordFromAnotherLogGenerationDoesNotVerify() throws {
    let (bytes, _) = Self.log(2)
    var found: [UInt64] = []
    // Same bytes, another salt: the first record is complete but fails, which is damage.
    #expect(throws: EngineError.self) {
      _ = try WALReader.scan(bytes, salt: Self.salt &+ 1, path: "wal", cipher: nil) {
        found.append($0.sequence.rawValue)
      }
    }
    #expect(found.isEmpty)
  }

  @Test func aRecordThatPassesItsChecksumButDoesNotDecodeIsDamage() throws {
    var (bytes, starts) = Self.log(3)
    // Record 2's first opcode (after sequence, synced-through, one name "ks"
    // and the op count) becomes unknown, and the checksum is made to match.
    let start = starts[1]
    let opcode = start + WALLayout.header + 8 + 8 + 2 + 3 + 4
    #expect(bytes[opcode] == WALOpcode.put.rawValue)
    bytes[opcode] = 0x7F
    let sum = Checksum.xxh3(bytes, (start + WALLayout.length)..<starts[2], seed: Self.salt &+ UInt64(start))
    bytes.replaceSubrange(start..<(start + 8), with: withUnsafeBytes(of: sum.littleEndian) { Array($0) })
    #expect(Self.isCorruption(bytes, at: start))
    do {
      _ = try Self.scan(bytes)
    } catch let e as EngineError {
      #expect(e.rule == .f15)
      #expect(e.message.contains("does not decode"), "\(e)")
    }
  }

  @Test func anUnknownRecordTypeEndsTheLog() throws {
    var (bytes, starts) = Self.log(2)
    bytes = Array(bytes[..<starts[1]])
    // A header claiming type 9 with nothing after it: not a record this version knows.
    bytes += [0, 0, 0, 0, 0, 0, 0, 0, 22, 0, 0, 0, 9, 0, 0, 0]
    #expect(try Self.scan(bytes).sequences == [1])
  }

  @Test func operationsRoundTrip() throws {
    var builder = WALRecordBuilder()
    let ops: [WALOperation] = [
      .put(keyspace: "a", key: [], value: [1, 2, 3]),
      .put(keyspace: "b", key: [9], value: []),
      .delete(keyspace: "a", key: [1, 2]),
      .deleteRange(keyspace: "a", start: [1], end: nil),
      .deleteRange(keyspace: "b", start: nil, end: [5]),
      .deleteRange(keyspace: "b", start: nil, end: nil),
      .createKeyspace("c"),
      .dropKeyspace("a"),
    ]
    for op in ops { builder.append(op) }
    let record = try builder.record(
      sequence: CommitSequence(3), syncedThrough: WALPosition(64), position: 64, salt: 1, cipher: nil)
    #expect(record.count == WALLayout.overhead + builder.size)
    guard
      case .valid(let decoded) = WALReader.classify(
        [UInt8](repeating: 0, count: 64) + record, at: 64, salt: 1, path: "w", cipher: nil)
    else {
      Issue.record("record did not verify")
      return
    }
    #expect(decoded.operations == ops)
    #expect(decoded.sequence == CommitSequence(3))
  }
}
