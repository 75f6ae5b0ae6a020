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

  /// Frames `payload` as a block to be written at `offset`, uncompressed and
  /// in clear. Returns the bytes to write.
  static func frame(kind: BlockKind, payload: [UInt8], at offset: UInt64) -> [UInt8] {
    var out: [UInt8] = []
    try? frame(kind: kind, payload: payload, at: offset, compressor: nil, cipher: nil, into: &out)
    return out
  }

  /// Appends the framed block to `out`, compressed by `compressor` when one
  /// is given and compression is worth it, then sealed by `cipher` when the
  /// store is encrypted (FORMAT.md §11.2). `offset` is where `out`'s current
  /// end will land.
  ///
  /// - Throws: only when sealing fails (libcrypto has no random bytes).
  static func frame(
    kind: BlockKind, payload: [UInt8], at offset: UInt64, compressor: Compressor?, cipher: BlockCipher?,
    into out: inout [UInt8]
  ) throws(EngineError) {
    var failure: EngineError?
    let appended =
      compressor?.compress(payload) { stored -> Bool in
        do throws(EngineError) {
          try append(kind: kind, payload: payload, compressed: stored, at: offset, cipher: cipher, into: &out)
        } catch { failure = error }
        return true
      } ?? false
    if let failure { throw failure }
    if !appended { try append(kind: kind, payload: payload, compressed: nil, at: offset, cipher: cipher, into: &out) }
  }

  /// A payload with its compressed form worked out ahead of framing, so
  /// that compression, which does not depend on where the block lands, can
  /// run on other threads (``CheckpointWriter`` compresses a branch's leaves
  /// in parallel).
  struct Prepared: @unchecked Sendable {
    // Safe: immutable arrays, handed from the thread that made them to the
    // writer once it is done.
    let payload: [UInt8]
    /// The compressed bytes, when compression saved enough.
    let compressed: [UInt8]?

    init(_ payload: [UInt8], compressor: Compressor?) {
      self.payload = payload
      compressed = compressor?.compress(payload) { Array($0) }
    }
  }

  /// Appends the framed block of a prepared payload: what ``frame(kind:payload:at:compressor:cipher:into:)``
  /// appends for the same payload.
  static func frame(
    kind: BlockKind, prepared: Prepared, at offset: UInt64, cipher: BlockCipher?, into out: inout [UInt8]
  ) throws(EngineError) {
    guard let compressed = prepared.compressed else {
      return try append(kind: kind, payload: prepared.payload, compressed: nil, at: offset, cipher: cipher, into: &out)
    }
    var failure: EngineError?
    compressed.withUnsafeBytes { stored in
      do throws(EngineError) {
        try append(kind: kind, payload: prepared.payload, compressed: stored, at: offset, cipher: cipher, into: &out)
      } catch { failure = error }
    }
    if let failure { throw failure }
  }

  /// Appends the block of `payload`, stored as `compressed` when given
  /// (else as is), sealed when `cipher` is given, then its checksum.
  private static func append(
    kind: BlockKind, payload: [UInt8], compressed: UnsafeRawBufferPointer?, at offset: UInt64, cipher: BlockCipher?,
    into out: inout [UInt8]
  ) throws(EngineError) {
    let start = out.count
    if let cipher {
      var failure: EngineError?
      if let compressed {
        try appendSealed(kind: kind, compressed, raw: payload.count, compressed: true, at: offset, cipher, to: &out)
      } else {
        payload.withUnsafeBytes { p in
          do throws(EngineError) {
            try appendSealed(kind: kind, p, raw: payload.count, compressed: false, at: offset, cipher, to: &out)
          } catch { failure = error }
        }
      }
      if let failure { throw failure }
    } else if let compressed {
      appendHeader(
        kind: kind, flags: BlockLayout.flagCompressed, stored: compressed.count, raw: payload.count, to: &out)
      out.append(contentsOf: compressed)
    } else {
      appendHeader(kind: kind, flags: 0, stored: payload.count, raw: payload.count, to: &out)
      out.append(contentsOf: payload)
    }
    let sum = Checksum.xxh3(out, (start + BlockLayout.kind)..<out.count, seed: offset)
    out.withUnsafeMutableBytes { $0.storeBytes(of: sum.littleEndian, toByteOffset: start, as: UInt64.self) }
  }

  /// Appends header and `nonce ‖ ciphertext ‖ tag` of `stored`; a commit
  /// record's 8-byte trailer stays in clear after the tag, so the file's
  /// last commit is still found from its end.
  private static func appendSealed(
    kind: BlockKind, _ stored: UnsafeRawBufferPointer, raw: Int, compressed: Bool, at offset: UInt64,
    _ cipher: BlockCipher, to out: inout [UInt8]
  ) throws(EngineError) {
    let start = out.count
    let flags = BlockLayout.flagEncrypted | (compressed ? BlockLayout.flagCompressed : 0)
    appendHeader(kind: kind, flags: flags, stored: stored.count + BlockCipher.overhead, raw: raw, to: &out)
    let clearTail = kind == .commit ? CommitTrailerLayout.size : 0
    let sealed = UnsafeRawBufferPointer(rebasing: stored[..<(stored.count - clearTail)])
    let tail = UnsafeRawBufferPointer(rebasing: stored[(stored.count - clearTail)...])
    let aad = associatedData(out, header: start, offset: offset, trailer: tail)
    try cipher.seal(sealed, aad: aad, into: &out)
    out.append(contentsOf: tail)
  }

  /// What a sealed block's tag covers besides its payload: its offset (a
  /// block moved elsewhere fails), its header after the checksum (kind,
  /// flags, lengths), and a commit record's clear trailer.
  private static func associatedData(
    _ bytes: [UInt8], header: Int, offset: UInt64, trailer: UnsafeRawBufferPointer
  ) -> [UInt8] {
    var aad = [UInt8]()
    aad.reserveCapacity(8 + BlockLayout.header - BlockLayout.kind + trailer.count)
    withUnsafeBytes(of: offset.littleEndian) { aad.append(contentsOf: $0) }
    aad.append(contentsOf: bytes[(header + BlockLayout.kind)..<(header + BlockLayout.header)])
    aad.append(contentsOf: trailer)
    return aad
  }

  /// The 24-byte header with a zero checksum, filled in once the payload follows.
  private static func appendHeader(kind: BlockKind, flags: UInt8, stored: Int, raw: Int, to out: inout [UInt8]) {
    var header = ByteWriter(capacity: BlockLayout.header)
    header.u64(0)
    header.u8(kind.rawValue)
    header.u8(flags)
    header.u16(0)
    header.u32(UInt32(stored))
    header.u32(UInt32(raw))
    header.u32(0)
    out.append(contentsOf: header.bytes)
  }

  /// Parses the header of a block whose first bytes are `bytes[0...]`.
  /// Returns its kind, flags and lengths after checking the fields that do
  /// not need the payload.
  static func parseHeader(_ bytes: [UInt8], at offset: UInt64, path: String?) throws(EngineError) -> (
    kind: BlockKind, compressed: Bool, stored: Int, raw: Int, encrypted: Bool
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
    let known = BlockLayout.flagCompressed | BlockLayout.flagEncrypted
    guard flags & ~known == 0, reserved == 0, reserved2 == 0 else {
      throw r.error("reserved bits set (flags \(flags), reserved \(reserved), \(reserved2))", at: BlockLayout.flags)
    }
    let compressed = flags & BlockLayout.flagCompressed != 0
    let encrypted = flags & BlockLayout.flagEncrypted != 0
    // What the stored bytes hold before sealing.
    let inner = encrypted ? stored - BlockCipher.overhead : stored
    let minimum = encrypted && kind == .commit ? CommitTrailerLayout.size : 0
    guard stored <= Limits.maxBlockPayload, raw <= Limits.maxBlockPayload, inner >= minimum,
      compressed || inner == raw
    else {
      throw r.error("implausible lengths: stored \(stored), raw \(raw)", at: BlockLayout.storedLength)
    }
    return (kind, compressed, stored, raw, encrypted)
  }

  /// Checks and unpacks a block read whole from `offset`, opening it with
  /// `cipher` in an encrypted store (which must then hold only sealed blocks
  /// past its key block; a clear store, only clear ones).
  ///
  /// - Parameter expectedLength: the length the referencing parent recorded, if any.
  /// - Throws: ``EngineError/Code/corrupted`` naming `path` and `offset` when
  ///   the block is short, fails its checksum, or does not decompress. In an
  ///   encrypted store every such failure, a failed tag and a clear block are
  ///   ``EngineError/Code/authenticationFailed`` (rule F-16) instead.
  static func parse(
    _ bytes: [UInt8], at offset: UInt64, expectedLength: Int?, path: String?, cipher: BlockCipher?
  ) throws(EngineError) -> Block {
    guard cipher != nil else {
      return try parseChecked(bytes, at: offset, expectedLength: expectedLength, path: path, cipher: nil)
    }
    // In an encrypted store a block's framing is covered by its tag and its
    // length by the authenticated parent that references it: whatever in
    // it fails, the block does not authenticate (F-16).
    do {
      return try parseChecked(bytes, at: offset, expectedLength: expectedLength, path: path, cipher: cipher)
    } catch {
      throw sealed(error, path: path, offset: offset)
    }
  }

  /// `error`, found in a block of an encrypted store, as what it is there:
  /// the block does not authenticate (F-16). Other codes pass unchanged.
  static func sealed(_ error: EngineError, path: String?, offset: UInt64) -> EngineError {
    guard error.code == .corrupted else { return error }
    return EngineError(
      .authenticationFailed, "block does not authenticate: \(error.message)", path: error.path ?? path,
      offset: error.offset ?? offset, rule: .f16)
  }

  private static func parseChecked(
    _ bytes: [UInt8], at offset: UInt64, expectedLength: Int?, path: String?, cipher: BlockCipher?
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
      throw EngineError(
        cipher == nil ? .corrupted : .authenticationFailed,
        "block checksum mismatch (stored \(hex(expected)), computed \(hex(actual)))", path: path, offset: offset,
        rule: cipher == nil ? .f3 : .f16)
    }
    var payload: [UInt8]
    switch (cipher, h.encrypted) {
    case (nil, false):
      let stored = BlockLayout.header..<length
      if h.compressed {
        do {
          payload = try Compression.decompress(bytes, stored, rawLength: h.raw, path: path, offset: offset)
        } catch {
          throw error.withRule(.f3)
        }
      } else if bytes.count == length {
        payload = Array(bytes[BlockLayout.header...])
      } else {
        payload = Array(bytes[stored])
      }
    case (nil, true):
      throw .corrupted("a sealed block in a store that is not encrypted", path: path, offset: offset, rule: .f16)
    case (.some, false):
      throw EngineError(
        .authenticationFailed, "a clear \(h.kind) block in an encrypted store", path: path, offset: offset,
        rule: .f16)
    case (.some(let cipher), true):
      payload = try open(bytes, length: length, header: h, at: offset, path: path, cipher: cipher)
    }
    return Block(
      kind: h.kind, payload: payload, length: length, compressed: h.compressed, storedLength: h.stored,
      checksum: expected)
  }
}

extension BlockFraming {
  /// The payload of the sealed block `bytes[0..<length]` at `offset`
  /// (FORMAT.md §11.2): opened, then decompressed when it was compressed.
  /// The plaintext of a compressed block goes to a scratch buffer, not an
  /// array of its own: only the decompressed payload is allocated.
  fileprivate static func open(
    _ bytes: [UInt8], length: Int,
    header h: (kind: BlockKind, compressed: Bool, stored: Int, raw: Int, encrypted: Bool),
    at offset: UInt64, path: String?, cipher: BlockCipher
  ) throws(EngineError) -> [UInt8] {
    let clearTail = h.kind == .commit ? CommitTrailerLayout.size : 0
    let sealedEnd = length - clearTail
    let inner = h.stored - BlockCipher.overhead - clearTail
    // Associated data, on the stack: offset, header bytes 8..<24, clear trailer.
    var aad: (UInt64, UInt64, UInt64, UInt64) = (offset.littleEndian, 0, 0, 0)
    // Plain optionals, not a Result: a generic enum here cost a metadata
    // lookup per block.
    var opened: [UInt8]?
    var failure: EngineError?
    bytes.withUnsafeBytes { raw in
      withUnsafeMutableBytes(of: &aad) { a in
        a.baseAddress!.advanced(by: 8).copyMemory(
          from: raw.baseAddress! + BlockLayout.kind, byteCount: BlockLayout.header - BlockLayout.kind)
        if clearTail > 0 {
          a.baseAddress!.advanced(by: 8 + BlockLayout.header - BlockLayout.kind).copyMemory(
            from: raw.baseAddress! + sealedEnd, byteCount: clearTail)
        }
      }
      let sealed = UnsafeRawBufferPointer(rebasing: raw[BlockLayout.header..<sealedEnd])
      withUnsafeBytes(of: &aad) { a in
        let aadBytes = UnsafeRawBufferPointer(rebasing: a[..<(8 + BlockLayout.header - BlockLayout.kind + clearTail)])
        if h.compressed {
          withUnsafeTemporaryAllocation(byteCount: max(inner, 1), alignment: 16) { scratch in
            guard cipher.open(sealed, aad: aadBytes, into: scratch.baseAddress!) else { return }
            do throws(EngineError) {
              opened = try Compression.decompress(
                UnsafeRawBufferPointer(rebasing: scratch[..<inner]), rawLength: h.raw, path: path, offset: offset)
            } catch {
              failure = error.withRule(.f3)
            }
          }
        } else {
          var ok = false
          var plain = [UInt8](unsafeUninitializedCapacity: max(inner + clearTail, 1)) { dst, initialized in
            ok = cipher.open(sealed, aad: aadBytes, into: UnsafeMutableRawPointer(dst.baseAddress!))
            initialized = ok ? inner : 0
          }
          if ok {
            if clearTail > 0 { plain.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[sealedEnd..<length])) }
            opened = plain
          }
        }
      }
    }
    if let failure { throw failure }
    guard let opened else {
      throw EngineError(
        .authenticationFailed, "\(h.kind) block fails authentication: its bytes were changed or the key is wrong",
        path: path, offset: offset, rule: .f16)
    }
    return opened
  }
}

func hex(_ v: UInt64) -> String {
  let s = String(v, radix: 16)
  return "0x" + String(repeating: "0", count: max(0, 16 - s.count)) + s
}
