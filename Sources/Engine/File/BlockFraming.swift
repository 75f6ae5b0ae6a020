/// Frames payloads into checksummed blocks and checks them on the way back.
///
/// Format: FORMAT.md §2. A block is a 24-byte header and its stored payload.
/// The checksum is seeded with the block's own offset, so a valid block read
/// from the wrong place still fails.
enum BlockFraming {
  /// A block as read and checked.
  struct Block {
    var kind: BlockKind
    /// The raw (decompressed) payload.
    var payload: [UInt8]
    /// The block's full length on disk.
    var length: Int
    var compressed: Bool
    var storedLength: Int
    /// The stored (and matching) checksum.
    var checksum: UInt64
  }

  /// Frames `payload` as a block to be written at `offset`, uncompressed.
  /// Returns the bytes to write.
  static func frame(kind: BlockKind, payload: [UInt8], at offset: UInt64) -> [UInt8] {
    var out: [UInt8] = []
    frame(kind: kind, payload: payload, at: offset, compressor: nil, into: &out)
    return out
  }

  /// Appends the framed block to `out`, compressed by `compressor` when one
  /// is given and compression is worth it. `offset` is where `out`'s current
  /// end will land.
  static func frame(
    kind: BlockKind, payload: [UInt8], at offset: UInt64, compressor: Compressor?, into out: inout [UInt8]
  ) {
    let start = out.count
    let appended =
      compressor?.compress(payload) { stored -> Bool in
        appendHeader(kind: kind, compressed: true, stored: stored.count, raw: payload.count, to: &out)
        out.append(contentsOf: stored)
        return true
      } ?? false
    if !appended {
      appendHeader(kind: kind, compressed: false, stored: payload.count, raw: payload.count, to: &out)
      out.append(contentsOf: payload)
    }
    let sum = Checksum.xxh3(out, (start + BlockLayout.kind)..<out.count, seed: offset)
    out.withUnsafeMutableBytes { $0.storeBytes(of: sum.littleEndian, toByteOffset: start, as: UInt64.self) }
  }

  /// The 24-byte header with a zero checksum, filled in once the payload follows.
  private static func appendHeader(kind: BlockKind, compressed: Bool, stored: Int, raw: Int, to out: inout [UInt8]) {
    var header = ByteWriter(capacity: BlockLayout.header)
    header.u64(0)
    header.u8(kind.rawValue)
    header.u8(compressed ? BlockLayout.flagCompressed : 0)
    header.u16(0)
    header.u32(UInt32(stored))
    header.u32(UInt32(raw))
    header.u32(0)
    out.append(contentsOf: header.bytes)
  }

  /// Parses the header of a block whose first bytes are `bytes[0...]`.
  /// Returns (kind, flags, storedLength, rawLength) after checking the fields
  /// that do not need the payload.
  static func parseHeader(_ bytes: [UInt8], at offset: UInt64, path: String?) throws(EngineError) -> (
    kind: BlockKind, compressed: Bool, stored: Int, raw: Int
  ) {
    var r = ByteReader(bytes, path: path, base: offset, what: "block header", rule: .f2)
    _ = try r.u64("checksum")
    let kindByte = try r.u8("kind")
    let flags = try r.u8("flags")
    let reserved = try r.u16("reserved")
    let stored = Int(try r.u32("stored length"))
    let raw = Int(try r.u32("raw length"))
    let reserved2 = try r.u32("reserved")
    guard let kind = BlockKind(rawValue: kindByte) else {
      throw r.error("unknown block kind \(kindByte)", at: BlockLayout.kind)
    }
    guard flags & ~BlockLayout.flagCompressed == 0, reserved == 0, reserved2 == 0 else {
      throw r.error("reserved bits set (flags \(flags), reserved \(reserved), \(reserved2))", at: BlockLayout.flags)
    }
    let compressed = flags & BlockLayout.flagCompressed != 0
    guard stored <= Limits.maxBlockPayload, raw <= Limits.maxBlockPayload, compressed || stored == raw else {
      throw r.error("implausible lengths: stored \(stored), raw \(raw)", at: BlockLayout.storedLength)
    }
    return (kind, compressed, stored, raw)
  }

  /// Checks and unpacks a block read whole from `offset`.
  ///
  /// - Parameter expectedLength: the length the referencing parent recorded, if any.
  /// - Throws: ``EngineError/Code/corrupted`` naming `path` and `offset` when
  ///   the block is short, fails its checksum, or does not decompress.
  static func parse(
    _ bytes: [UInt8], at offset: UInt64, expectedLength: Int?, path: String?
  ) throws(EngineError) -> Block {
    guard bytes.count >= BlockLayout.header else {
      throw .corrupted(
        "block is truncated: \(bytes.count) bytes where a header needs \(BlockLayout.header)", path: path,
        offset: offset, rule: .f2)
    }
    let h = try parseHeader(bytes, at: offset, path: path)
    let length = BlockLayout.header + h.stored
    if let expectedLength, expectedLength != length {
      throw .corrupted(
        "block length \(length) differs from the \(expectedLength) its parent records", path: path, offset: offset,
        rule: .f5)
    }
    guard bytes.count >= length else {
      throw .corrupted(
        "block is truncated: \(bytes.count) of \(length) bytes present", path: path, offset: offset, rule: .f2)
    }
    var r = ByteReader(bytes, path: path, base: offset, what: "block", rule: .f3)
    let expected = try r.u64("checksum")
    let actual = Checksum.xxh3(bytes, BlockLayout.kind..<length, seed: offset)
    guard expected == actual else {
      throw .corrupted(
        "block checksum mismatch (stored \(hex(expected)), computed \(hex(actual)))", path: path, offset: offset,
        rule: .f3)
    }
    let payload: [UInt8]
    if h.compressed {
      do {
        payload = try Compression.decompress(
          bytes, BlockLayout.header..<length, rawLength: h.raw, path: path, offset: offset)
      } catch {
        throw error.withRule(.f3)
      }
    } else if bytes.count == length {
      payload = Array(bytes[BlockLayout.header...])
    } else {
      payload = Array(bytes[BlockLayout.header..<length])
    }
    return Block(
      kind: h.kind, payload: payload, length: length, compressed: h.compressed, storedLength: h.stored,
      checksum: expected)
  }
}

func hex(_ v: UInt64) -> String {
  let s = String(v, radix: 16)
  return "0x" + String(repeating: "0", count: max(0, 16 - s.count)) + s
}
