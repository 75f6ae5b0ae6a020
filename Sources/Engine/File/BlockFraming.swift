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

  /// A block header's fields (FORMAT.md §2).
  typealias Header = (kind: BlockKind, compressed: Bool, stored: Int, raw: Int, encrypted: Bool)

  /// Parses the header of a block whose first bytes are `bytes[0...]`.
  /// Returns its kind, flags and lengths after checking the fields that do
  /// not need the payload.
  static func parseHeader(_ bytes: [UInt8], at offset: UInt64, path: String?) throws(EngineError) -> Header {
    var result: Result<Header, EngineError>?
    bytes.withUnsafeBytes { raw in
      result = Result { () throws(EngineError) in try parseHeader(raw, at: offset, path: path) }
    }
    // Safe: the closure above always sets it.
    return try result!.get()
  }

  /// ``parseHeader(_:at:path:)`` of bytes in place.
  static func parseHeader(_ bytes: UnsafeRawBufferPointer, at offset: UInt64, path: String?) throws(EngineError)
    -> Header
  {
    guard bytes.count >= BlockLayout.header else {
      throw .corrupted(
        "block header: needs \(BlockLayout.header) bytes but only \(bytes.count) remain", path: path,
        offset: offset + UInt64(bytes.count), rule: .f2)
    }
    func error(_ message: String, at field: Int) -> EngineError {
      .corrupted("block header: \(message)", path: path, offset: offset + UInt64(field), rule: .f2)
    }
    let kindByte = bytes[BlockLayout.kind]
    let flags = bytes[BlockLayout.flags]
    let reserved = UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: BlockLayout.reserved, as: UInt16.self))
    let stored = Int(
      UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: BlockLayout.storedLength, as: UInt32.self)))
    let raw = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: BlockLayout.rawLength, as: UInt32.self)))
    let reserved2 = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: BlockLayout.reserved2, as: UInt32.self))
    guard let kind = BlockKind(rawValue: kindByte) else {
      throw error("unknown block kind \(kindByte)", at: BlockLayout.kind)
    }
    let known = BlockLayout.flagCompressed | BlockLayout.flagEncrypted
    guard flags & ~known == 0, reserved == 0, reserved2 == 0 else {
      throw error("reserved bits set (flags \(flags), reserved \(reserved), \(reserved2))", at: BlockLayout.flags)
    }
    let compressed = flags & BlockLayout.flagCompressed != 0
    let encrypted = flags & BlockLayout.flagEncrypted != 0
    // What the stored bytes hold before sealing.
    let inner = encrypted ? stored - BlockCipher.overhead : stored
    let minimum = encrypted && kind == .commit ? CommitTrailerLayout.size : 0
    guard stored <= Limits.maxBlockPayload, raw <= Limits.maxBlockPayload, inner >= minimum,
      compressed || inner == raw
    else {
      throw error("implausible lengths: stored \(stored), raw \(raw)", at: BlockLayout.storedLength)
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
    var checked: Result<(Header, Int, UInt64), EngineError>?
    bytes.withUnsafeBytes { raw in
      checked = Result { () throws(EngineError) in
        try check(raw, at: offset, expectedLength: expectedLength, path: path, encrypted: cipher != nil)
      }
    }
    // Safe: the closure above always sets it.
    let (h, length, expected) = try checked!.get()
    var payload: [UInt8]
    switch (cipher, h.encrypted) {
    case (nil, _):
      var opened: Result<[UInt8], EngineError>?
      bytes.withUnsafeBytes { raw in
        opened = Result { () throws(EngineError) in
          try clearPayload(raw, header: h, length: length, at: offset, path: path)
        }
      }
      // Safe: the closure above always sets it.
      payload = try opened!.get()
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
  /// Checks the block at the start of `bytes`, read from `offset`: its
  /// header, its length against `expectedLength` (what the parent records)
  /// and against the bytes present, and its checksum. Returns the header,
  /// the block's length and its checksum. The payload is not touched:
  /// callers decompress it into an array of their own (a node) or into
  /// scratch memory (a point read that keeps nothing).
  ///
  /// - Parameter encrypted: whether the store is, which decides the code of
  ///   a checksum mismatch (F-3 or F-16).
  static func check(
    _ bytes: UnsafeRawBufferPointer, at offset: UInt64, expectedLength: Int?, path: String?, encrypted: Bool = false
  ) throws(EngineError) -> (header: Header, length: Int, checksum: UInt64) {
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
    let expected = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: BlockLayout.checksum, as: UInt64.self))
    let actual = Checksum.xxh3(UnsafeRawBufferPointer(rebasing: bytes[BlockLayout.kind..<length]), seed: offset)
    guard expected == actual else {
      throw EngineError(
        encrypted ? .authenticationFailed : .corrupted,
        "block checksum mismatch (stored \(hex(expected)), computed \(hex(actual)))", path: path, offset: offset,
        rule: encrypted ? .f16 : .f3)
    }
    return (h, length, expected)
  }
}

extension BlockFraming {
  /// The payload of the checked block `bytes[0..<length]` of a store in
  /// clear, decompressed when it was compressed, as an array of its own
  /// (what a node keeps).
  static func clearPayload(
    _ bytes: UnsafeRawBufferPointer, header h: Header, length: Int, at offset: UInt64, path: String?
  ) throws(EngineError) -> [UInt8] {
    let stored = try storedPayload(bytes, header: h, length: length, at: offset, path: path)
    guard h.compressed else { return Array(stored) }
    do {
      return try Compression.decompress(stored, rawLength: h.raw, path: path, offset: offset)
    } catch {
      throw error.withRule(.f3)
    }
  }

  /// Calls `body` with the payload of the checked block `bytes[0..<length]`
  /// of a store in clear: in place, or decompressed into scratch memory
  /// valid only inside `body`.
  static func withClearPayload<R>(
    _ bytes: UnsafeRawBufferPointer, header h: Header, length: Int, at offset: UInt64, path: String?,
    _ body: (UnsafeRawBufferPointer) throws -> R
  ) throws -> R {
    let stored = try storedPayload(bytes, header: h, length: length, at: offset, path: path)
    guard h.compressed else { return try body(stored) }
    return try Scratch.with(.payload, count: h.raw) { payload in
      do throws(EngineError) {
        try Compression.decompress(stored, into: payload, path: path, offset: offset)
      } catch {
        throw error.withRule(.f3)
      }
      return try body(UnsafeRawBufferPointer(payload))
    }
  }

  /// The stored payload of a block in a store in clear, refusing a sealed
  /// one.
  private static func storedPayload(
    _ bytes: UnsafeRawBufferPointer, header h: Header, length: Int, at offset: UInt64, path: String?
  ) throws(EngineError) -> UnsafeRawBufferPointer {
    guard !h.encrypted else {
      throw .corrupted("a sealed block in a store that is not encrypted", path: path, offset: offset, rule: .f16)
    }
    return UnsafeRawBufferPointer(rebasing: bytes[BlockLayout.header..<length])
  }

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
