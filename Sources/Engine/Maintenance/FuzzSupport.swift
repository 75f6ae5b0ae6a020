/// Helpers for the fuzz target only (`@_spi(Fuzzing) import Engine`).
///
/// Random mutations almost never produce a valid XXH3 checksum, so a fuzzer
/// that only mutates bytes exercises little beyond "checksum mismatch". With
/// ``resealChecksums(data:wal:)`` it can also hand the decoders and the tree
/// code crafted content whose checksums pass: the files a bug, or a hostile
/// writer, could produce.
@_spi(Fuzzing)
public enum FuzzSupport {
  /// Recomputes every checksum that can be found: both file headers, every
  /// block whose header fits in the data file, every WAL record whose
  /// extent fits in the log.
  public static func resealChecksums(data: inout [UInt8], wal: inout [UInt8]) {
    for file in [0, 1] {
      var bytes = file == 0 ? data : wal
      if bytes.count >= HeaderLayout.size {
        let sum = Checksum.xxh3(bytes, 0..<HeaderLayout.checksum, seed: 0)
        bytes.withUnsafeMutableBytes {
          $0.storeBytes(of: sum.littleEndian, toByteOffset: HeaderLayout.checksum, as: UInt64.self)
        }
      }
      if file == 0 { data = bytes } else { wal = bytes }
    }
    // Blocks of the data file, in order.
    var offset = HeaderLayout.size
    while offset + BlockLayout.header <= data.count,
      let stored = data.littleEndian(UInt32.self, at: offset + BlockLayout.storedLength).map(Int.init)
    {
      let end = offset + BlockLayout.header + stored
      guard stored <= Limits.maxBlockPayload, end <= data.count else { break }
      let sum = Checksum.xxh3(data, (offset + BlockLayout.kind)..<end, seed: UInt64(offset))
      data.withUnsafeMutableBytes { $0.storeBytes(of: sum.littleEndian, toByteOffset: offset, as: UInt64.self) }
      offset = end
    }
    // Records of the WAL, in order.
    guard wal.count >= HeaderLayout.size, let salt = wal.littleEndian(UInt64.self, at: HeaderLayout.salt) else {
      return
    }
    var position = HeaderLayout.size
    while position + WALLayout.header <= wal.count,
      let length = wal.littleEndian(UInt32.self, at: position + WALLayout.length).map(Int.init)
    {
      let end = position + WALLayout.overhead + length
      guard length <= WALLayout.maximumPayload, end <= wal.count else { break }
      let sum = Checksum.xxh3(wal, (position + WALLayout.length)..<end, seed: salt &+ UInt64(position))
      wal.withUnsafeMutableBytes { $0.storeBytes(of: sum.littleEndian, toByteOffset: position, as: UInt64.self) }
      position = end
    }
  }
}

@_spi(Fuzzing)
extension FuzzSupport {
  /// A logged operation (FORMAT.md §3.3), for building WAL records.
  public enum LoggedOperation: Sendable {
    case put(keyspace: String, key: [UInt8], value: [UInt8])
    case delete(keyspace: String, key: [UInt8])
    case deleteRange(keyspace: String, start: [UInt8]?, end: [UInt8]?)
    case create(String)
    case drop(String)
  }

  /// The framed WAL record of a transaction of `operations`, as a writer
  /// would append it at `position` of a log with `salt`. Keyspace names
  /// must be 1 to 255 bytes; keys at most 1,024.
  public static func walRecord(
    _ operations: [LoggedOperation], sequence: UInt64, syncedThrough: UInt64, position: UInt64, salt: UInt64
  ) -> [UInt8] {
    var builder = WALRecordBuilder()
    for op in operations {
      switch op {
      case .put(let ks, let key, let value): builder.append(.put(keyspace: ks, key: key, value: value))
      case .delete(let ks, let key): builder.append(.delete(keyspace: ks, key: key))
      case .deleteRange(let ks, let start, let end): builder.append(.deleteRange(keyspace: ks, start: start, end: end))
      case .create(let ks): builder.append(.createKeyspace(ks))
      case .drop(let ks): builder.append(.dropKeyspace(ks))
      }
    }
    return builder.clearRecord(
      sequence: CommitSequence(sequence), syncedThrough: WALPosition(syncedThrough), position: position, salt: salt)
  }

  /// The salt and checkpoint sequence of a WAL header, if it decodes.
  public static func walHeader(of wal: [UInt8]) -> (salt: UInt64, checkpointSequence: UInt64)? {
    guard let h = try? WALHeader.decode(wal, path: "wal") else { return nil }
    return (h.salt, h.checkpointSequence.rawValue)
  }

  /// Reads a WAL as recovery does (FORMAT.md §5): the sequences of its
  /// valid records and where they end.
  ///
  /// - Throws: ``EngineError/Code/corrupted`` for damage.
  public static func scanWAL(_ bytes: [UInt8], salt: UInt64) throws -> (sequences: [UInt64], end: UInt64) {
    var sequences: [UInt64] = []
    let result = try WALReader.scan(bytes, salt: salt, path: "wal", cipher: nil) {
      sequences.append($0.sequence.rawValue)
    }
    return (sequences, result.end)
  }
}

@_spi(Fuzzing)
extension FuzzSupport {
  /// Makes `bytes` (a coordination file, FORMAT.md §10.2) pass the checks
  /// of validity for the store `storeID` in boot `boot`: the magic, the
  /// version and size, the store id, the boot, and both slots' checksums;
  /// every other byte stays as given.
  public static func sealCoordination(_ bytes: inout [UInt8], storeID: [UInt8], boot: UInt64) {
    guard bytes.count >= CoordinationLayout.size, storeID.count == 16 else { return }
    func put(_ v: UInt64, at offset: Int) {
      withUnsafeBytes(of: v) { bytes.replaceSubrange(offset..<(offset + 8), with: $0) }
    }
    put(CoordinationLayout.magicValue, at: CoordinationLayout.magic)
    put(CoordinationLayout.versionAndSize, at: CoordinationLayout.version)
    bytes.replaceSubrange(CoordinationLayout.storeID..<(CoordinationLayout.storeID + 16), with: storeID)
    put(boot, at: CoordinationLayout.boot)
    for slot in 0..<2 {
      let at = CoordinationLayout.slot(slot)
      let words = (0..<CoordinationLayout.slotWords).map { i in
        bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at + 8 * i, as: UInt64.self) }
      }
      put(Coordination.checksum(words), at: at + 8 * 8)
    }
  }

  /// The coordination file's size.
  public static let coordinationSize = CoordinationLayout.size

  /// How long (ms) processes wait for files to match the coordination file
  /// before reading them as they are; 50 by default. A fuzzer that feeds
  /// mismatched states on purpose shortens it.
  public static func setSettlingTime(milliseconds: Int) {
    Settling.milliseconds.store(max(0, milliseconds), ordering: .relaxed)
  }
}
