import CLZ4

/// LZ4 block compression of node and large-value payloads (liblz4).
///
/// A payload is stored compressed only when that saves at least 1/16 of it;
/// FORMAT.md §2 (block flags) says which blocks are.
enum Compression {
  /// Compresses `input`, or returns nil when compression does not save enough.
  static func compress(_ input: [UInt8]) -> [UInt8]? {
    guard input.count >= 64, input.count < Int(Int32.max) else { return nil }
    let bound = Int(LZ4_compressBound(Int32(input.count)))
    let limit = input.count - input.count / 16
    var output = [UInt8](repeating: 0, count: bound)
    let written = input.withUnsafeBytes { src in
      output.withUnsafeMutableBytes { dst in
        LZ4_compress_default(
          src.baseAddress?.assumingMemoryBound(to: CChar.self),
          dst.baseAddress?.assumingMemoryBound(to: CChar.self),
          Int32(input.count), Int32(bound))
      }
    }
    guard written > 0, Int(written) <= limit else { return nil }
    output.removeSubrange(Int(written)...)
    return output
  }

  /// Decompresses `input[range]`, which must expand to exactly `rawLength` bytes.
  ///
  /// - Throws: ``EngineError/Code/corrupted`` when the bytes are not a valid
  ///   LZ4 block of that length. liblz4's `_safe` decoder never reads or
  ///   writes outside the buffers, whatever the input.
  static func decompress(
    _ input: [UInt8], _ range: Range<Int>, rawLength: Int, path: String?, offset: UInt64
  ) throws(EngineError) -> [UInt8] {
    guard rawLength >= 0, rawLength <= Limits.maxBlockPayload, range.count < Int(Int32.max) else {
      throw .corrupted("compressed block claims raw length \(rawLength)", path: path, offset: offset)
    }
    // Not zero-filled first: LZ4 writes every byte it reports (a scan
    // decompresses each leaf it reads, and the fill cost a twentieth of it);
    // the array holds bytes only if it wrote all of them.
    var produced: Int32 = 0
    // At least one byte of capacity: `unsafeUninitializedCapacity: 0` writes
    // the count into the shared empty-array singleton, which
    // ThreadSanitizer reports as a race between two threads reading.
    let output = [UInt8](unsafeUninitializedCapacity: max(rawLength, 1)) { dst, initialized in
      produced = input.withUnsafeBytes { src in
        LZ4_decompress_safe(
          src.baseAddress.map { ($0 + range.lowerBound).assumingMemoryBound(to: CChar.self) },
          dst.baseAddress.map { UnsafeMutableRawPointer($0).assumingMemoryBound(to: CChar.self) },
          Int32(range.count), Int32(rawLength))
      }
      initialized = produced == Int32(rawLength) ? rawLength : 0
    }
    guard produced == Int32(rawLength) else {
      throw .corrupted(
        "LZ4 payload of \(range.count) bytes did not expand to \(rawLength) bytes (got \(produced))",
        path: path, offset: offset)
    }
    return output
  }
}
