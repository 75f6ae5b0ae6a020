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

  /// Scans `bytes` (a whole WAL file, or the part of one from file
  /// position `base`, which must be where a record starts) and calls `body`
  /// with each valid record. Positions, in records and errors, are the file's.
  ///
  /// - Throws: ``EngineError/Code/corrupted`` (rule F-15) naming the
  ///   position of a damaged record; whatever `body` throws.
  /// - Parameter cipher: the store's cipher when it is encrypted: every
  ///   record must then be sealed and authenticate (rule F-16).
  static func scan(
    _ bytes: [UInt8], base: UInt64 = 0, salt: UInt64, path: String, cipher: BlockCipher?,
    _ body: (WALRecord) throws -> Void
  ) throws -> Result {
    var position = base == 0 ? HeaderLayout.size : 0
    var count = 0
    let size = bytes.count
    while position < size {
      switch classify(bytes, at: position, base: base, salt: salt, path: path, cipher: cipher) {
      case .valid(let record):
        try body(record)
        count += 1
        position += record.length
      case .damaged(let why):
        throw EngineError(
          .corrupted, "WAL record \(why)", path: path, offset: base + UInt64(position), rule: .f15)
      case .unauthenticated(let why):
        throw EngineError(
          .authenticationFailed, "WAL record \(why)", path: path, offset: base + UInt64(position), rule: .f16)
      case .torn(let why):
        if let evidence = evidenceAgainstTear(
          bytes, at: position, base: base, salt: salt, path: path, cipher: cipher)
        {
          // In an encrypted log the record's framing is part of what its
          // tag authenticates (FORMAT.md §11.3).
          throw EngineError(
            cipher == nil ? .corrupted : .authenticationFailed,
            "WAL record \(why), but \(evidence): a complete record was damaged", path: path,
            offset: base + UInt64(position), rule: cipher == nil ? .f15 : .f16)
        }
        return Result(end: base + UInt64(position), discarded: UInt64(size - position), records: count)
      }
    }
    return Result(end: base + UInt64(position), discarded: 0, records: count)
  }

  enum Classification {
    case valid(WALRecord)
    case torn(String)
    case damaged(String)
    /// In an encrypted store: complete, but failing its checksum or tag, or not sealed.
    case unauthenticated(String)
  }

  /// What the bytes at `position` are: a valid record, a torn one, or a damaged one (FORMAT.md §5).
  static func classify(
    _ bytes: [UInt8], at position: Int, base: UInt64 = 0, salt: UInt64, path: String, cipher: BlockCipher?
  ) -> Classification {
    var header = ByteReader(bytes, from: position, path: path, base: 0, what: "WAL record", rule: .f15)
    guard let stored = try? header.u64("checksum"), let length32 = try? header.u32("length"),
      let type = try? header.u8("type"), let reserved = try? header.bytes(3, "reserved")
    else { return .torn("header is cut off at the end of the file") }
    let length = Int(length32)
    let sealed = type == WALLayout.typeSealedTransaction
    let minimum = WALLayout.minimumPayload + (sealed ? BlockCipher.overhead : 0)
    guard type == WALLayout.typeTransaction || sealed, reserved == [0, 0, 0], length >= minimum,
      length <= WALLayout.maximumPayload
    else { return .torn("header is not plausible (type \(type), length \(length))") }
    let total = WALLayout.overhead + length
    guard total <= bytes.count - position else {
      return .torn("extends \(total) bytes, past the end of the file")
    }
    let trailer = position + WALLayout.header + length
    var tail = ByteReader(bytes, from: trailer, path: path, base: 0, what: "WAL record trailer", rule: .f15)
    guard let trailerLength = try? tail.u32("trailer length"), let magic = try? tail.u32("trailer magic") else {
      return .torn("trailer is cut off at the end of the file")
    }
    let computed = Checksum.xxh3(
      bytes, (position + WALLayout.length)..<(position + total), seed: salt &+ base &+ UInt64(position))
    if stored == computed && Int(trailerLength) == length && magic == WALLayout.magicValue {
      guard sealed == (cipher != nil) else {
        return cipher != nil
          ? .unauthenticated("is a clear record in an encrypted store's log")
          : .damaged("is sealed, and the store is not encrypted")
      }
      do {
        let record: WALRecord
        if let cipher {
          guard
            let plain = openSealed(
              bytes, at: position, length: length, base: base, salt: salt, cipher: cipher)
          else { return .unauthenticated("fails authentication: its bytes were changed or the key is wrong") }
          record = try WALRecord.decodePayload(
            plain, 0..<plain.count, position: base + UInt64(position), path: path, storedLength: length)
        } else {
          record = try WALRecord.decodePayload(
            bytes, (position + WALLayout.header)..<trailer, position: base + UInt64(position), path: path)
        }
        return .valid(record)
      } catch {
        return .damaged("passes its checksum but does not decode: \(error.message)")
      }
    }
    if magic == 0 { return .torn("ends in zeros: its last bytes never reached the disk") }
    let why = "fails its checksum (stored \(hex(stored)), computed \(hex(computed)))"
    return cipher != nil ? .unauthenticated(why) : .damaged(why)
  }

  /// The plaintext payload of the sealed record at `position` (of `length`
  /// stored bytes), or nil when it does not authenticate.
  static func openSealed(
    _ bytes: [UInt8], at position: Int, length: Int, base: UInt64, salt: UInt64, cipher: BlockCipher
  ) -> [UInt8]? {
    let aad = WALLayout.associatedData(bytes, at: position, salt: salt, position: base &+ UInt64(position))
    let start = position + WALLayout.header
    return bytes.withUnsafeBytes { raw in
      aad.withUnsafeBytes { cipher.open(UnsafeRawBufferPointer(rebasing: raw[start..<(start + length)]), aad: $0) }
    }
  }

  /// Looks past a torn-looking record at `position` for proof that it was
  /// complete. Returns a description of the proof, or nil.
  ///
  /// A later trailer is found by its magic; the u32 before the magic is the
  /// payload length L, so the record it ends starts at `magic − 4 − L − 16`.
  /// A trailer whose record starts exactly at `position` proves the record
  /// there complete; a later valid record synced past `position` proves it
  /// was durable.
  static func evidenceAgainstTear(
    _ bytes: [UInt8], at position: Int, base: UInt64 = 0, salt: UInt64, path: String, cipher: BlockCipher?
  ) -> String? {
    var m = position + WALLayout.header + WALLayout.minimumPayload + WALLayout.trailerMagic
    while let candidate = bytes.littleEndian(UInt32.self, at: m) {
      defer { m += 1 }
      guard candidate == WALLayout.magicValue, let length32 = bytes.littleEndian(UInt32.self, at: m - 4) else {
        continue
      }
      let start = m - 4 - Int(length32) - WALLayout.header
      if start == position { return "a trailer at \(base + UInt64(m - 4)) marks it complete" }
      guard start > position else { continue }
      if case .valid(let later) = classify(bytes, at: start, base: base, salt: salt, path: path, cipher: cipher),
        later.syncedThrough.rawValue > base + UInt64(position)
      {
        return
          "the record at \(base + UInt64(start)) was written after it was synced (synced through \(later.syncedThrough))"
      }
    }
    return nil
  }
}
