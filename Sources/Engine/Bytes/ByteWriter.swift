/// Appends fixed-width little-endian integers and raw bytes to a growing buffer.
///
/// Every integer on disk has a fixed width and byte order (FORMAT.md §0);
/// this type is how the engine writes them. It never writes `Int`.
struct ByteWriter {
  var bytes: [UInt8]

  init(capacity: Int = 0) {
    bytes = []
    bytes.reserveCapacity(capacity)
  }

  var count: Int { bytes.count }

  @inline(__always) mutating func u8(_ v: UInt8) { bytes.append(v) }
  // Integers byte by byte, low byte first: appending an integer's bytes as
  // a buffer goes through the generic sequence append, several times the
  // cost (the WAL writes three integers per operation).
  @inline(__always) mutating func u16(_ v: UInt16) {
    bytes.append(UInt8(truncatingIfNeeded: v))
    bytes.append(UInt8(truncatingIfNeeded: v &>> 8))
  }
  @inline(__always) mutating func u32(_ v: UInt32) {
    for shift in stride(from: 0, to: 32, by: 8) { bytes.append(UInt8(truncatingIfNeeded: v &>> UInt32(shift))) }
  }
  @inline(__always) mutating func u64(_ v: UInt64) {
    for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: v &>> UInt64(shift))) }
  }

  @inline(__always) mutating func append(_ v: [UInt8]) { bytes.append(contentsOf: v) }
  @inline(__always) mutating func append(_ v: ArraySlice<UInt8>) { bytes.append(contentsOf: v) }
  @inline(__always) mutating func append(_ v: UnsafeRawBufferPointer) { bytes.append(contentsOf: v) }

  /// Appends `count` zero bytes.
  mutating func zeros(_ count: Int) { bytes.append(contentsOf: repeatElement(0, count: count)) }

  /// Overwrites a u32 written earlier (used to fill in lengths once known).
  mutating func patchU32(_ v: UInt32, at offset: Int) {
    precondition(offset + 4 <= bytes.count)
    bytes.withUnsafeMutableBytes { $0.storeBytes(of: v.littleEndian, toByteOffset: offset, as: UInt32.self) }
  }

  /// Overwrites a u64 written earlier.
  mutating func patchU64(_ v: UInt64, at offset: Int) {
    precondition(offset + 8 <= bytes.count)
    bytes.withUnsafeMutableBytes { $0.storeBytes(of: v.littleEndian, toByteOffset: offset, as: UInt64.self) }
  }
}

extension Array where Element == UInt8 {
  /// Reads a little-endian integer at `offset`, skipping the bounds check.
  ///
  /// Only for bytes already checked: ``ByteReader`` after its own check, and
  /// `LeafNode`, whose entries were bounds-checked when it was decoded.
  @inline(__always)
  func unsafeLoad<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
    assert(offset >= 0 && offset + MemoryLayout<T>.size <= count, "unchecked load out of bounds")
    return withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
  }

  /// Reads a little-endian integer at `offset`, or nil if it does not lie
  /// wholly within the array.
  @inline(__always)
  func littleEndian<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T? {
    guard offset >= 0, offset <= count - MemoryLayout<T>.size else { return nil }
    return unsafeLoad(T.self, at: offset)
  }
}
