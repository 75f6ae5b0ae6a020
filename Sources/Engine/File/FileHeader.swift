/// The 64-byte header at offset 0 of the data file and of the WAL.
/// Format: FORMAT.md §1.1 and §3.1.
struct FileHeader: Equatable {
  enum Kind { case data, wal }

  var kind: Kind
  var version: UInt32
  var storeID: [UInt8]
  /// Data file: creation time in ms. WAL: the log generation's salt.
  var field1: UInt64
  /// WAL: sequence of the data-file commit the log continues from.
  var field2: UInt64
  /// WAL: offset of that commit record.
  var field3: UInt64

  func encode() -> [UInt8] {
    var w = ByteWriter(capacity: HeaderLayout.size)
    w.append(kind == .data ? HeaderLayout.dataMagic : HeaderLayout.walMagic)
    w.u32(version)
    w.u32(UInt32(HeaderLayout.size))
    w.append(storeID)
    w.u64(field1)
    w.u64(field2)
    w.u64(field3)
    w.u64(Checksum.xxh3(w.bytes, 0..<HeaderLayout.checksum, seed: 0))
    return w.bytes
  }

  static func decode(_ bytes: [UInt8], kind: Kind, path: String) throws(EngineError) -> FileHeader {
    let what = kind == .data ? "data file header" : "WAL header"
    guard bytes.count >= HeaderLayout.size else {
      throw .corrupted("\(what) is truncated: \(bytes.count) of \(HeaderLayout.size) bytes", path: path, offset: 0)
    }
    let magic = Array(bytes[0..<8])
    guard magic == (kind == .data ? HeaderLayout.dataMagic : HeaderLayout.walMagic) else {
      throw EngineError(.notAStore, "\(what): wrong magic number, not a Cairn file", path: path, offset: 0)
    }
    var r = ByteReader(bytes, from: 8, to: HeaderLayout.size, path: path, base: 0, what: what)
    let version = try r.u32("version")
    let length = try r.u32("header length")
    let storeID = try r.bytes(16, "store id")
    let f1 = try r.u64()
    let f2 = try r.u64()
    let f3 = try r.u64()
    let stored = try r.u64("checksum")
    // The version first: a newer format may checksum its header differently.
    guard version == formatVersion else {
      throw EngineError(
        .unsupportedFormat, "\(what): format version \(version); this build reads version \(formatVersion)", path: path,
        offset: UInt64(HeaderLayout.version))
    }
    let computed = Checksum.xxh3(bytes, 0..<HeaderLayout.checksum, seed: 0)
    guard stored == computed else {
      throw .corrupted(
        "\(what) checksum mismatch (stored \(hex(stored)), computed \(hex(computed)))", path: path, offset: 0)
    }
    guard length == UInt32(HeaderLayout.size) else {
      throw .corrupted("\(what): header length \(length), expected \(HeaderLayout.size)", path: path, offset: 12)
    }
    if kind == .data && (f2 != 0 || f3 != 0) {
      throw .corrupted("\(what): reserved fields are not zero", path: path, offset: UInt64(HeaderLayout.field2))
    }
    if kind == .wal && f1 == 0 {
      throw .corrupted("\(what): salt is zero", path: path, offset: UInt64(HeaderLayout.field1))
    }
    return FileHeader(kind: kind, version: version, storeID: storeID, field1: f1, field2: f2, field3: f3)
  }
}
