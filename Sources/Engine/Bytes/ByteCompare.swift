#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// Lexicographic order of unsigned bytes, shorter first on a common prefix:
/// the order of every keyspace.
///
/// Compares eight bytes at a time as big-endian words (so word order is byte
/// order), then the tail byte by byte; keys are short, and a libc `memcmp`
/// call costs more than the comparison itself. Returns a negative number,
/// zero or a positive number as `a` sorts before, equal to or after `b`.
@inlinable
public func compareBytes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
  let n = Swift.min(a.count, b.count)
  if n > 0 {
    // Safe: n > 0, so both base addresses exist, and every load stays below n.
    let pa = a.baseAddress!
    let pb = b.baseAddress!
    var i = 0
    while i + 8 <= n {
      let x = UInt64(bigEndian: pa.loadUnaligned(fromByteOffset: i, as: UInt64.self))
      let y = UInt64(bigEndian: pb.loadUnaligned(fromByteOffset: i, as: UInt64.self))
      if x != y { return x < y ? -1 : 1 }
      i += 8
    }
    while i < n {
      let x = pa.load(fromByteOffset: i, as: UInt8.self)
      let y = pb.load(fromByteOffset: i, as: UInt8.self)
      if x != y { return x < y ? -1 : 1 }
      i += 1
    }
  }
  return a.count - b.count
}

extension UnsafeRawBufferPointer {
  /// `count` bytes from `start`, without going through `Slice` and `Range`
  /// (whose generic index code is not specialized and showed in profiles).
  /// The caller has checked `start + count <= self.count`.
  @inline(__always)
  func bytes(from start: Int, count: Int) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: count == 0 ? baseAddress : baseAddress! + start, count: count)
  }
}

/// ``compareBytes(_:_:)`` over two arrays.
@inline(__always)
func compareBytes(_ a: [UInt8], _ b: [UInt8]) -> Int {
  a.withUnsafeBytes { ra in b.withUnsafeBytes { rb in compareBytes(ra, rb) } }
}

/// The shortest byte string `s` with `a < s <= b`. Requires `a < b`.
///
/// Used as the separator when a leaf splits: branch nodes then hold a few
/// bytes per child instead of whole keys.
func shortestSeparator(after a: [UInt8], upTo b: [UInt8]) -> [UInt8] {
  var i = 0
  let n = Swift.min(a.count, b.count)
  while i < n && a[i] == b[i] { i += 1 }
  // b is longer than the common prefix (a < b), so b[0...i] exists.
  return Array(b[0...i])
}

/// The smallest key greater than every key that starts with `prefix`, or nil
/// when there is none (the prefix is empty or all 0xFF).
func prefixSuccessor(_ prefix: [UInt8]) -> [UInt8]? {
  var p = prefix
  while let last = p.last {
    if last < 0xFF {
      p[p.count - 1] = last + 1
      return p
    }
    p.removeLast()
  }
  return nil
}

// MARK: Search heads

/// A key's first eight bytes as a big-endian integer, zero-padded when the
/// key is shorter: its *head*.
///
/// Heads keep the keys' order loosely: `a <= b` implies
/// `head(a) <= head(b)`, so a smaller head means a smaller key and a larger
/// head a larger key; only equal heads need the whole keys compared. A node
/// that never changes keeps its keys' heads in one array, and a search walks
/// that array (eight bytes a key, a few cache lines a node) instead of
/// reaching into the node's bytes at every step.
@inline(__always)
func keyHead(_ key: UnsafeRawBufferPointer) -> UInt64 {
  if key.count >= 8 {
    // Safe: at least eight bytes.
    return UInt64(bigEndian: key.baseAddress!.loadUnaligned(as: UInt64.self))
  }
  var h: UInt64 = 0
  for i in 0..<8 { h = h << 8 | UInt64(i < key.count ? key[i] : 0) }
  return h
}

/// The head of `key`'s bytes after its first `skip` (zero when it has no
/// more): what a node whose keys all share `skip` leading bytes searches.
@inline(__always)
func keyHead(_ key: UnsafeRawBufferPointer, after skip: Int) -> UInt64 {
  keyHead(key.bytes(from: Swift.min(skip, key.count), count: Swift.max(0, key.count - skip)))
}

/// The head of `key` after `skip` bytes if its first `skip` bytes are
/// `other`'s, else nil: how a key added to a node whose keys share `skip`
/// leading bytes gets its head, or learns the node must find its prefix
/// again. (In a damaged node either may be shorter than `skip`: then nil,
/// with no read past either.)
func keyHead(_ key: UnsafeRawBufferPointer, after skip: Int, sharedWith other: UnsafeRawBufferPointer) -> UInt64? {
  guard key.count >= skip, other.count >= skip,
    compareBytes(key.bytes(from: 0, count: skip), other.bytes(from: 0, count: skip)) == 0
  else { return nil }
  return keyHead(key, after: skip)
}

/// How many leading bytes `a` and `b` share.
func commonPrefixLength(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
  let n = Swift.min(a.count, b.count)
  var i = 0
  while i < n && a[i] == b[i] { i += 1 }
  return i
}

/// Where a key lies against the prefix every key of a node shares.
enum PrefixOrder {
  /// Before every key that starts with the prefix.
  case below
  /// It starts with the prefix.
  case within
  /// After every key that starts with the prefix.
  case above
}

/// Where `key` lies against the keys that start with `prefix`.
@inline(__always)
func prefixOrder(_ key: UnsafeRawBufferPointer, _ prefix: UnsafeRawBufferPointer) -> PrefixOrder {
  let n = Swift.min(key.count, prefix.count)
  let c = compareBytes(key.bytes(from: 0, count: n), prefix.bytes(from: 0, count: n))
  if c < 0 || (c == 0 && key.count < prefix.count) { return .below }
  return c > 0 ? .above : .within
}

/// The indices whose heads equal `head` in the sorted `heads`: every index
/// below the range has a smaller head (so a smaller key), every one at or
/// past its end a larger head (so a larger key).
@inline(__always)
func headRange(_ heads: UnsafeBufferPointer<UInt64>, _ head: UInt64) -> Range<Int> {
  var lo = 0
  var hi = heads.count
  while lo < hi {
    let mid = (lo + hi) >> 1
    if heads[mid] < head { lo = mid + 1 } else { hi = mid }
  }
  guard lo < heads.count && heads[lo] == head else { return lo..<lo }
  var end = heads.count
  var start = lo + 1
  while start < end {
    let mid = (start + end) >> 1
    if heads[mid] <= head { start = mid + 1 } else { end = mid }
  }
  return lo..<end
}
