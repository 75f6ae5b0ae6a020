/// The 64-byte header at offset 0 of the data file. Format: FORMAT.md §1.1.
struct DataFileHeader: Equatable {
  /// 1 for a clear store, 2 for an encrypted one (so that builds from before
  /// encryption refuse it by its version rather than misread it).
  var version: UInt32
  /// Random bytes chosen at creation; the WAL carries the same.
  var storeID: [UInt8]
  /// When the store was created, in milliseconds since 1970.
  var createdMilliseconds: UInt64
  /// Whether a key block follows and every later block is sealed (FORMAT.md §11).
  var encrypted: Bool

  static let magic = HeaderLayout.dataMagic
  /// Version 2's flags field: bit 0, encrypted.
  static let flagEncrypted: UInt64 = 1

  init(storeID: [UInt8], createdMilliseconds: UInt64, encrypted: Bool = false) {
    self.version = encrypted ? formatVersion : clearFormatVersion
    self.storeID = storeID
    self.createdMilliseconds = createdMilliseconds
    self.encrypted = encrypted
  }

  func encode() -> [UInt8] {
    HeaderCodec.encode(
      magic: Self.magic, version: version, storeID: storeID,
      fields: (createdMilliseconds, encrypted ? Self.flagEncrypted : 0, 0))
  }

  /// Decodes and checks the header at the start of `bytes`.
  ///
  /// - Throws: ``EngineError/Code/notAStore`` for a wrong magic number,
  ///   ``EngineError/Code/unsupportedFormat`` for another version, and
  ///   ``EngineError/Code/corrupted`` (rule F-1) otherwise.
  static func decode(_ bytes: [UInt8], path: String) throws(EngineError) -> DataFileHeader {
    let h = try HeaderCodec.decode(bytes, magic: magic, what: "data file header", rule: .f1, path: path)
    // Version 1 has no flags; version 2's say whether the store is encrypted.
    let flags = h.version == clearFormatVersion ? 0 : flagEncrypted
    guard h.fields.1 & ~flags == 0, h.fields.2 == 0 else {
      throw EngineError(
        .corrupted, "data file header: reserved fields or flags are not zero (\(h.fields.1), \(h.fields.2))",
        path: path, offset: UInt64(HeaderLayout.checkpointSequence), rule: .f1)
    }
    var header = DataFileHeader(
      storeID: h.storeID, createdMilliseconds: h.fields.0, encrypted: h.fields.1 & flagEncrypted != 0)
    header.version = h.version
    return header
  }
}

/// The 64-byte header at offset 0 of a WAL file. Format: FORMAT.md §3.1.
struct WALHeader: Equatable {
  /// The data file's version: 2 when the records are sealed.
  var version: UInt32 = clearFormatVersion
  /// Must equal the data file's.
  var storeID: [UInt8]
  /// Random and non-zero, new for every log file; seeds the record checksums.
  var salt: UInt64
  /// The sequence of the data-file commit record this log continues from.
  var checkpointSequence: CommitSequence
  /// That commit record's offset in the data file.
  var checkpointOffset: BlockOffset

  static let magic = HeaderLayout.walMagic

  func encode() -> [UInt8] {
    HeaderCodec.encode(
      magic: Self.magic, version: version, storeID: storeID,
      fields: (salt, checkpointSequence.rawValue, checkpointOffset.rawValue))
  }

  /// Decodes and checks the header at the start of `bytes`.
  ///
  /// - Throws: ``EngineError/Code/notAStore`` for a wrong magic number,
  ///   ``EngineError/Code/unsupportedFormat`` for another version, and
  ///   ``EngineError/Code/corrupted`` (rule F-14) otherwise.
  static func decode(_ bytes: [UInt8], path: String) throws(EngineError) -> WALHeader {
    let h = try HeaderCodec.decode(bytes, magic: magic, what: "WAL header", rule: .f14, path: path)
    guard h.fields.0 != 0 else {
      throw EngineError(
        .corrupted, "WAL header: salt is zero", path: path, offset: UInt64(HeaderLayout.salt), rule: .f14)
    }
    return WALHeader(
      version: h.version, storeID: h.storeID, salt: h.fields.0, checkpointSequence: CommitSequence(h.fields.1),
      checkpointOffset: BlockOffset(h.fields.2))
  }
}

/// The layout both headers share: magic, version, length, store id, three
/// u64 fields whose meaning depends on the file, checksum (HeaderLayout).
enum HeaderCodec {
  static func encode(magic: [UInt8], version: UInt32, storeID: [UInt8], fields: (UInt64, UInt64, UInt64)) -> [UInt8] {
    var w = ByteWriter(capacity: HeaderLayout.size)
    w.append(magic)
    w.u32(version)
    w.u32(UInt32(HeaderLayout.size))
    w.append(storeID)
    w.u64(fields.0)
    w.u64(fields.1)
    w.u64(fields.2)
    w.u64(Checksum.xxh3(w.bytes, 0..<HeaderLayout.checksum, seed: 0))
    return w.bytes
  }

  static func decode(
    _ bytes: [UInt8], magic: [UInt8], what: String, rule: FormatRule, path: String
  ) throws(EngineError) -> (version: UInt32, storeID: [UInt8], fields: (UInt64, UInt64, UInt64)) {
    guard bytes.count >= HeaderLayout.size else {
      throw EngineError(
        .corrupted, "\(what) is truncated: \(bytes.count) of \(HeaderLayout.size) bytes", path: path, offset: 0,
        rule: rule)
    }
    guard bytes[HeaderLayout.magic..<HeaderLayout.version].elementsEqual(magic) else {
      throw EngineError(.notAStore, "\(what): wrong magic number, not a Cairn file", path: path, offset: 0, rule: rule)
    }
    var r = ByteReader(bytes, from: HeaderLayout.version, to: HeaderLayout.size, path: path, base: 0, what: what)
    let version = try r.u32("version")
    let length = try r.u32("header length")
    let storeID = try r.bytes(16, "store id")
    let fields = (try r.u64(), try r.u64(), try r.u64())
    let stored = try r.u64("checksum")
    // The version first: a newer format may checksum its header differently.
    guard (clearFormatVersion...formatVersion).contains(version) else {
      throw EngineError(
        .unsupportedFormat,
        "\(what): format version \(version); this build reads versions \(clearFormatVersion) to \(formatVersion)",
        path: path, offset: UInt64(HeaderLayout.version), rule: rule)
    }
    let computed = Checksum.xxh3(bytes, 0..<HeaderLayout.checksum, seed: 0)
    guard stored == computed else {
      throw EngineError(
        .corrupted, "\(what) checksum mismatch (stored \(hex(stored)), computed \(hex(computed)))", path: path,
        offset: 0, rule: rule)
    }
    guard length == UInt32(HeaderLayout.size) else {
      throw EngineError(
        .corrupted, "\(what): header length \(length), expected \(HeaderLayout.size)", path: path,
        offset: UInt64(HeaderLayout.headerLength), rule: rule)
    }
    return (version, storeID, fields)
  }
}
