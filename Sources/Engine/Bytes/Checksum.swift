import CXXHash

/// The checksum of every block and WAL record: XXH3-64 from libxxhash.
///
/// The seed binds a checksum to where its bytes belong: blocks use their own
/// file offset and WAL records the log's salt plus their position, so a block
/// written to the wrong place, or a record left over from an earlier log
/// generation, fails its check. Format: FORMAT.md §4.
enum Checksum {
  @inline(__always)
  static func xxh3(_ bytes: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
    XXH3_64bits_withSeed(bytes.baseAddress, bytes.count, seed)
  }

  /// The checksum of `bytes[range]`.
  static func xxh3(_ bytes: [UInt8], _ range: Range<Int>, seed: UInt64) -> UInt64 {
    precondition(range.lowerBound >= 0 && range.upperBound <= bytes.count)
    return bytes.withUnsafeBytes { raw in
      xxh3(UnsafeRawBufferPointer(rebasing: raw[range]), seed: seed)
    }
  }
}
