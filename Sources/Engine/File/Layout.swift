// Byte layouts of everything on disk. Each offset is derived from the one
// before it (redb's header.rs style); FORMAT.md has the same tables in prose.
// All integers are little-endian.

/// The newest format version, written in both file headers of an encrypted
/// store. Bump it when old files would read differently (FORMAT.md §0,
/// version history).
let formatVersion: UInt32 = 2
/// The version a clear store is written with: version 2 only adds
/// encryption, so a clear store stays readable by builds from before it.
let clearFormatVersion: UInt32 = 1

/// File header of the data file and of the WAL (FORMAT.md §1.1, §3.1).
enum HeaderLayout {
  static let magic = 0  // u8[8]
  static let version = magic + 8  // u32
  static let headerLength = version + 4  // u32
  static let storeID = headerLength + 4  // u8[16]
  // Three u64 fields whose meaning depends on the file:
  static let created = storeID + 16  // data file: creation time, ms since 1970
  static let salt = created  // WAL: this log file's salt (non-zero)
  static let checkpointSequence = salt + 8  // WAL: sequence of the commit record it continues from; data file: 0
  static let checkpointOffset = checkpointSequence + 8  // WAL: that record's offset; data file: 0
  static let checksum = checkpointOffset + 8  // u64: XXH3-64, seed 0, over bytes [0, checksum)
  static let size = checksum + 8  // 64

  static let dataMagic: [UInt8] = Array("CAIRNDAT".utf8)
  static let walMagic: [UInt8] = Array("CAIRNWAL".utf8)
}

/// Block framing in the data file (FORMAT.md §2).
enum BlockLayout {
  static let checksum = 0  // u64: XXH3-64 seeded with the block's offset, over [kind, end of payload)
  static let kind = checksum + 8  // u8
  static let flags = kind + 1  // u8: bit 0 = payload is LZ4-compressed, bit 1 = sealed (§11)
  static let reserved = flags + 1  // u16: zero
  static let storedLength = reserved + 2  // u32: payload bytes on disk
  static let rawLength = storedLength + 4  // u32: payload bytes after decompression
  static let reserved2 = rawLength + 4  // u32: zero
  static let header = reserved2 + 4  // 24

  static let flagCompressed: UInt8 = 1
  /// Bit 1: the stored payload is sealed (FORMAT.md §11.2).
  static let flagEncrypted: UInt8 = 2
}

/// Block kinds (FORMAT.md §2).
enum BlockKind: UInt8 {
  case leaf = 1
  case branch = 2
  case largeValue = 3
  case commit = 4
  /// An encrypted store's key block, clear, right after the header (FORMAT.md §11.1).
  case keyBlock = 5
}

/// A leaf's raw payload (FORMAT.md §2.2).
enum LeafLayout {
  static let count = 0  // u32: number of entries
  static let header = count + 4
  // Then per entry: keyLength u16, valueKind u8, valueLength u32 ...
  static let entryKeyLength = 0
  static let entryKind = entryKeyLength + 2
  static let entryValueLength = entryKind + 1
  static let entrySize = entryValueLength + 4  // 7
  // ... then per entry its key bytes, then its value bytes (kind 0) or a
  // large-value reference (kind 1): block offset u64, block length u32.
  static let largeRefSize = 12
}

/// A branch's raw payload (FORMAT.md §2.3).
enum BranchLayout {
  static let count = 0  // u32: number of children (>= 1)
  static let level = count + 4  // u16: height above the leaves (>= 1)
  static let header = level + 2
  // Then per child:
  static let childOffset = 0  // u64
  static let childLength = childOffset + 8  // u32
  static let childKeys = childLength + 4  // u64: keys in the subtree
  static let childBytes = childKeys + 8  // u64: live bytes of the subtree
  static let childSize = childBytes + 8  // 28
  // Then count-1 separators: keyLength u16, key bytes.
  static let keyHeader = 2
}

/// The trailer ending a commit record's payload (FORMAT.md §2.5), found by
/// reading the last 8 bytes of the file.
enum CommitTrailerLayout {
  static let blockLength = 0  // u32: the whole commit block's length
  static let magic = blockLength + 4  // u32
  static let size = magic + 4
  static let magicValue: UInt32 = 0x5449_4D43  // "CMIT"
  /// The smallest commit block: header, the fixed fields, no keyspace, trailer.
  static let minimumBlock = BlockLayout.header + 8 + 8 + 8 + 4 + size  // 60
}
