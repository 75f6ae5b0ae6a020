/// Helpers for the fuzz target only (`@_spi(Fuzzing) import Engine`).
///
/// Random mutations almost never produce a valid XXH3 checksum, so a fuzzer
/// that only mutates bytes exercises little beyond "checksum mismatch". With
/// ``resealChecksums(data:wal:)`` it can also hand the decoders and the tree
/// code crafted content whose checksums pass: the files a bug, or a hostile
/// writer, could produce.
@_spi(Fuzzing)
public enum FuzzSupport {
  /// Recomputes every checksum that can be found: both file headers, every
  /// block whose header fits in the data file, every WAL record whose
  /// extent fits in the log.
  public static func resealChecksums(data: inout [UInt8], wal: inout [UInt8]) {
    for file in [0, 1] {
      var bytes = file == 0 ? data : wal
      if bytes.count >= HeaderLayout.size {
        let sum = Checksum.xxh3(bytes, 0..<HeaderLayout.checksum, seed: 0)
        bytes.withUnsafeMutableBytes {
          $0.storeBytes(of: sum.littleEndian, toByteOffset: HeaderLayout.checksum, as: UInt64.self)
        }
      }
      if file == 0 { data = bytes } else { wal = bytes }
    }
    // Blocks of the data file, in order.
    var offset = HeaderLayout.size
    while offset + BlockLayout.header <= data.count,
      let stored = data.littleEndian(UInt32.self, at: offset + BlockLayout.storedLength).map(Int.init)
    {
      let end = offset + BlockLayout.header + stored
      guard stored <= Limits.maxBlockPayload, end <= data.count else { break }
      let sum = Checksum.xxh3(data, (offset + BlockLayout.kind)..<end, seed: UInt64(offset))
      data.withUnsafeMutableBytes { $0.storeBytes(of: sum.littleEndian, toByteOffset: offset, as: UInt64.self) }
      offset = end
    }
    // Records of the WAL, in order.
    guard wal.count >= HeaderLayout.size, let salt = wal.littleEndian(UInt64.self, at: HeaderLayout.salt) else {
      return
    }
    var position = HeaderLayout.size
    while position + WALLayout.header <= wal.count,
      let length = wal.littleEndian(UInt32.self, at: position + WALLayout.length).map(Int.init)
    {
      let end = position + WALLayout.overhead + length
      guard length <= WALLayout.maximumPayload, end <= wal.count else { break }
      let sum = Checksum.xxh3(wal, (position + WALLayout.length)..<end, seed: salt &+ UInt64(position))
      wal.withUnsafeMutableBytes { $0.storeBytes(of: sum.littleEndian, toByteOffset: position, as: UInt64.self) }
      position = end
    }
  }
}
