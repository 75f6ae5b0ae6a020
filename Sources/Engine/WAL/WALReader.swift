/// Reads a WAL back at recovery: every complete record in order, and where
/// the log ends.
///
/// The rules (FORMAT.md §5) separate a torn tail, which ends the log quietly,
/// from damage to records that were complete, which is an error:
/// - A record whose extent runs past the end of the file, whose header is
///   incomplete or not plausible, or whose trailer magic is all zero never
///   fully reached the disk: a torn tail, unless the evidence below says
///   otherwise.
/// - A record that lies wholly inside the file with a non-zero trailer magic
///   but fails its checksum was damaged after it was written: corruption.
/// - Evidence against a torn tail at position p: a trailer later in the file
///   that points back to p (the record at p is complete), or a valid later
///   record whose synced-through position is past p (the record at p was
///   already durable when that one was written). Either is corruption.
enum WALReader {
  struct Result {
    /// Byte position after the last valid record.
    var end: UInt64
    /// Bytes after `end` that were discarded as a torn tail.
    var discarded: UInt64
    var records: Int
  }

  /// Scans `bytes` (a whole WAL file) and calls `body` with each valid record.
  static func scan(
    _ bytes: [UInt8], salt: UInt64, path: String, _ body: (WALRecord) throws -> Void
  ) throws -> Result {
    var position = HeaderLayout.size
    var count = 0
    let size = bytes.count
    while position < size {
      switch classify(bytes, at: position, salt: salt, path: path) {
      case .valid(let record):
        try body(record)
        count += 1
        position += record.length
      case .damaged(let why):
        throw EngineError(.corrupted, "WAL record \(why)", path: path, offset: UInt64(position))
      case .torn(let why):
        if let evidence = try evidenceAgainstTear(bytes, at: position, salt: salt, path: path) {
          throw EngineError(
            .corrupted, "WAL record \(why), but \(evidence): a complete record was damaged", path: path,
            offset: UInt64(position))
        }
        return Result(end: UInt64(position), discarded: UInt64(size - position), records: count)
      }
    }
    return Result(end: UInt64(position), discarded: 0, records: count)
  }

  enum Classification {
    case valid(WALRecord)
    case torn(String)
    case damaged(String)
  }

  static func classify(_ bytes: [UInt8], at position: Int, salt: UInt64, path: String) -> Classification {
    let size = bytes.count
    guard size - position >= WALLayout.header else { return .torn("header is cut off at the end of the file") }
    let length = Int(bytes.unsafeLoad(UInt32.self, at: position + WALLayout.length))
    let type = bytes[position + WALLayout.type]
    let reservedZero =
      bytes[position + WALLayout.reserved] == 0 && bytes[position + WALLayout.reserved + 1] == 0
      && bytes[position + WALLayout.reserved + 2] == 0
    guard type == WALLayout.typeTransaction, reservedZero, length >= WALLayout.minimumPayload,
      length <= WALLayout.maximumPayload
    else { return .torn("header is not plausible (type \(type), length \(length))") }
    let total = WALLayout.overhead + length
    guard total <= size - position else { return .torn("extends \(total) bytes, past the end of the file") }
    let trailer = position + WALLayout.header + length
    let trailerLength = Int(bytes.unsafeLoad(UInt32.self, at: trailer + WALLayout.trailerLength))
    let magic = bytes.unsafeLoad(UInt32.self, at: trailer + WALLayout.trailerMagic)
    let stored = bytes.unsafeLoad(UInt64.self, at: position + WALLayout.checksum)
    let computed = Checksum.xxh3(
      bytes, (position + WALLayout.length)..<(position + total), seed: salt &+ UInt64(position))
    if stored == computed && trailerLength == length && magic == WALLayout.magicValue {
      do {
        let record = try WALRecord.decodePayload(
          bytes, (position + WALLayout.header)..<trailer, position: UInt64(position), path: path)
        return .valid(record)
      } catch {
        return .damaged("passes its checksum but does not decode: \(error.message)")
      }
    }
    if magic == 0 { return .torn("ends in zeros: its last bytes never reached the disk") }
    return .damaged("fails its checksum (stored \(hex(stored)), computed \(hex(computed)))")
  }

  /// Looks past a torn-looking record at `position` for proof that it was
  /// complete. Returns a description of the proof, or nil.
  static func evidenceAgainstTear(_ bytes: [UInt8], at position: Int, salt: UInt64, path: String) throws -> String? {
    let size = bytes.count
    var m = position + WALLayout.header + WALLayout.minimumPayload + WALLayout.trailerMagic
    let magic = WALLayout.magicValue
    while m + 4 <= size {
      defer { m += 1 }
      guard bytes.unsafeLoad(UInt32.self, at: m) == magic else { continue }
      let length = Int(bytes.unsafeLoad(UInt32.self, at: m - 4))
      let start = m - 4 - length - WALLayout.header
      if start == position { return "a trailer at \(m - 4) marks it complete" }
      guard start > position else { continue }
      if case .valid(let later) = classify(bytes, at: start, salt: salt, path: path),
        later.syncedThrough.rawValue > UInt64(position)
      {
        return "the record at \(start) was written after it was synced (synced through \(later.syncedThrough))"
      }
    }
    return nil
  }
}
