import CLZ4

/// LZ4 block decompression of node and large-value payloads (liblz4).
/// ``Compressor`` compresses them.
///
/// A payload is stored compressed only when that saves at least 1/16 of it;
/// FORMAT.md §2 (block flags) says which blocks are.
enum Compression {
  /// Decompresses `input`, which must expand to exactly `rawLength` bytes
  /// (an encrypted block's payload, opened into a scratch buffer).
  static func decompress(
    _ input: UnsafeRawBufferPointer, rawLength: Int, path: String?, offset: UInt64
  ) throws(EngineError) -> [UInt8] {
    try checkLengths(input, rawLength: rawLength, path: path, offset: offset)
    // Not zero-filled first: LZ4 writes every byte it reports (a scan
    // decompresses each leaf it reads, and the fill cost a twentieth of it);
    // the array holds bytes only if it wrote all of them.
    var failure: EngineError?
    // At least one byte of capacity: `unsafeUninitializedCapacity: 0` writes
    // the count into the shared empty-array singleton, which
    // ThreadSanitizer reports as a race between two threads reading.
    let output = [UInt8](unsafeUninitializedCapacity: max(rawLength, 1)) { dst, initialized in
      do throws(EngineError) {
        try decompress(
          input, into: UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(dst)[..<rawLength]),
          path: path, offset: offset)
        initialized = rawLength
      } catch {
        failure = error
        initialized = 0
      }
    }
    if let failure { throw failure }
    return output
  }

  /// Decompresses `input` into `output`, which it must fill exactly: a
  /// point read decompresses a leaf it will not keep into scratch memory.
  static func decompress(
    _ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, path: String?, offset: UInt64
  ) throws(EngineError) {
    try checkLengths(input, rawLength: output.count, path: path, offset: offset)
    let produced = LZ4_decompress_safe(
      input.baseAddress?.assumingMemoryBound(to: CChar.self),
      output.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(input.count), Int32(output.count))
    guard produced == Int32(output.count) else {
      throw .corrupted(
        "LZ4 payload of \(input.count) bytes did not expand to \(output.count) bytes (got \(produced))",
        path: path, offset: offset)
    }
  }

  private static func checkLengths(
    _ input: UnsafeRawBufferPointer, rawLength: Int, path: String?, offset: UInt64
  ) throws(EngineError) {
    guard rawLength >= 0, rawLength <= Limits.maxBlockPayload, input.count < Int(Int32.max) else {
      throw .corrupted("compressed block claims raw length \(rawLength)", path: path, offset: offset)
    }
  }
}

/// An LZ4 compression state and output buffer kept across blocks.
///
/// `LZ4_compress_default` sets up a fresh 16 KiB state for every call, which
/// a checkpoint paid once per 4 KiB node: a third of all its compression
/// time, and four times the node's bytes of memory traffic. This keeps one
/// state, set up once, and starts each block with `LZ4_resetStream_fast`,
/// which forgets earlier blocks without clearing the table. Each block is
/// still an independent LZ4 block (no dictionary), decoded by
/// `LZ4_decompress_safe` like any other.
///
/// Not thread-safe: one owner (a checkpoint writer) uses it at a time.
final class Compressor {
  private let stream: UnsafeMutablePointer<LZ4_stream_t>?
  private var scratch: UnsafeMutableRawBufferPointer

  init() {
    stream = LZ4_createStream()
    scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 0, alignment: 16)
  }

  deinit {
    if let stream { LZ4_freeStream(stream) }
    scratch.deallocate()
  }

  /// Compresses `input` and hands the compressed bytes to `use`, or returns
  /// nil (without calling it) when compression does not save at least 1/16.
  /// The bytes are valid only inside `use`.
  func compress<R>(_ input: [UInt8], _ use: (UnsafeRawBufferPointer) -> R) -> R? {
    guard let stream, input.count >= 64, input.count < Int(Int32.max) / 2 else { return nil }
    let bound = Int(LZ4_compressBound(Int32(input.count)))
    if scratch.count < bound {
      scratch.deallocate()
      scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bound, 16 << 10), alignment: 16)
    }
    LZ4_resetStream_fast(stream)
    let written = input.withUnsafeBytes { src in
      LZ4_compress_fast_continue(
        stream,
        src.baseAddress?.assumingMemoryBound(to: CChar.self),
        scratch.baseAddress?.assumingMemoryBound(to: CChar.self),
        Int32(input.count), Int32(bound), 1)
    }
    guard written > 0, Int(written) <= input.count - input.count / 16 else { return nil }
    return use(UnsafeRawBufferPointer(rebasing: scratch[..<Int(written)]))
  }
}
