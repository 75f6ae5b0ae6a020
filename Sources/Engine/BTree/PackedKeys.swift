/// A sorted list of byte-string keys packed into one buffer: a branch's separators.
///
/// One buffer and one table of end offsets instead of an array per key: a
/// binary search touches two arrays, not one per comparison (each of which
/// Swift would retain and release), and a decoded branch allocates twice.
struct PackedKeys: Equatable {
  private(set) var bytes: [UInt8] = []
  /// `ends[i]` is where key `i` ends in `bytes`; it starts where key `i-1` ends.
  private(set) var ends: [UInt32] = []
  /// The heads of the keys' bytes after a prefix they all share (see
  /// ``keyHead(_:after:)``), one per key, kept through every change: a
  /// search walks these and reads keys only on a tie. A writer's branches
  /// are searched on every put of a load, so they keep heads too.
  private(set) var heads: [UInt64] = []
  /// How many leading bytes every key shares (not always all it shares:
  /// removing keys may lengthen the common prefix; it is found again when
  /// an added key does not share this one).
  private var headSkip = 0

  init() {}

  /// Equal when the keys are; heads are a cache of them.
  static func == (a: PackedKeys, b: PackedKeys) -> Bool { a.bytes == b.bytes && a.ends == b.ends }

  init(_ keys: [[UInt8]]) {
    bytes.reserveCapacity(keys.reduce(0) { $0 + $1.count })
    ends.reserveCapacity(keys.count)
    for k in keys {
      bytes.append(contentsOf: k)
      ends.append(UInt32(bytes.count))
    }
    buildHeads()
  }

  var count: Int { ends.count }
  var isEmpty: Bool { ends.isEmpty }

  @inline(__always) private func start(_ i: Int) -> Int { i == 0 ? 0 : Int(ends[i - 1]) }

  /// Length of key `i`.
  func length(_ i: Int) -> Int { Int(ends[i]) - start(i) }

  /// Key `i` as a new array.
  func key(_ i: Int) -> [UInt8] { Array(bytes[start(i)..<Int(ends[i])]) }

  /// Keys `range` as a new list.
  func slice(_ range: Range<Int>) -> PackedKeys {
    var p = PackedKeys()
    guard !range.isEmpty else { return p }
    let base = start(range.lowerBound)
    p.bytes = Array(bytes[base..<Int(ends[range.upperBound - 1])])
    p.ends = ends[range].map { $0 - UInt32(base) }
    p.buildHeads()
    return p
  }

  /// Computes every head, and the prefix they follow, from the keys.
  private mutating func buildHeads() {
    guard count > 0 else {
      (headSkip, heads) = (0, [])
      return
    }
    (headSkip, heads) = bytes.withUnsafeBytes { raw in
      // Safe: every end lies within bytes.
      let skip = commonPrefixLength(
        raw.bytes(from: 0, count: length(0)), raw.bytes(from: start(count - 1), count: length(count - 1)))
      return (skip, (0..<count).map { i in keyHead(raw.bytes(from: start(i), count: length(i)), after: skip) })
    }
  }

  /// Whether the last key is <= `key` (false when there are none): then
  /// ``rank(of:inclusive:)`` with `inclusive` is ``count``, found with one
  /// comparison. Keys that only grow (ids, times) land there.
  func lastIsAtMost(_ key: UnsafeRawBufferPointer) -> Bool {
    guard let end = ends.last else { return false }
    let s = start(ends.count - 1)
    // Safe: every end lies within bytes (built by append/insert, checked by decode).
    return bytes.withUnsafeBytes { compareBytes($0.bytes(from: s, count: Int(end) - s), key) <= 0 }
  }

  /// The number of keys <= `key` (with `inclusive`) or < `key`.
  @inline(__always)
  func rank(of key: UnsafeRawBufferPointer, inclusive: Bool) -> Int {
    bytes.withUnsafeBytes { raw in
      ends.withUnsafeBufferPointer { ends in
        var lo = 0
        var hi = ends.count
        var skip = 0
        if !heads.isEmpty {  // (empty only when there are no keys)
          skip = headSkip
          if skip > 0 {
            // Every key starts with key 0's `skip` bytes. (Not always in a
            // damaged branch, whose keys may be out of order: the read
            // stays inside key 0.)
            switch prefixOrder(key, raw.bytes(from: 0, count: Swift.min(skip, Int(ends[0])))) {
            case .below: return 0
            case .above: return ends.count
            case .within: break
            }
          }
          // Keys below the range are smaller than `key`, those past it larger.
          let r = heads.withUnsafeBufferPointer { headRange($0, keyHead(key, after: skip)) }
          (lo, hi) = (r.lowerBound, r.upperBound)
        }
        // Within a range of equal heads, keys whose tails fit in a head
        // differ only in trailing zero bytes: the shorter sorts first.
        let shortTail = !heads.isEmpty && key.count - skip <= 8
        while lo < hi {
          let mid = (lo + hi) >> 1
          let s = mid == 0 ? 0 : Int(ends[mid - 1])
          let length = Int(ends[mid]) - s
          // Safe: every end lies within bytes (built by append/insert, checked by decode).
          let c =
            shortTail && length - skip <= 8 ? length - key.count : compareBytes(raw.bytes(from: s, count: length), key)
          if c < 0 || (inclusive && c == 0) { lo = mid + 1 } else { hi = mid }
        }
        return lo
      }
    }
  }

  /// Compares key `i` with `other`.
  func compare(_ i: Int, _ other: [UInt8]) -> Int {
    bytes.withUnsafeBytes { raw in
      other.withUnsafeBytes { compareBytes(UnsafeRawBufferPointer(rebasing: raw[start(i)..<Int(ends[i])]), $0) }
    }
  }

  mutating func append(_ key: [UInt8]) {
    bytes.append(contentsOf: key)
    ends.append(UInt32(bytes.count))
    addHead(at: count - 1)
  }

  /// Adds the head of key `i`, just added: after the prefix the others
  /// share if it shares it too, else every head again after a shorter one.
  private mutating func addHead(at i: Int) {
    guard count > 1 else { return buildHeads() }
    let other = i == 0 ? 1 : 0
    let skip = headSkip
    let head = bytes.withUnsafeBytes { raw in
      // Safe: every end lies within bytes.
      keyHead(
        raw.bytes(from: start(i), count: length(i)), after: skip,
        sharedWith: raw.bytes(from: start(other), count: length(other)))
    }
    if let head { heads.insert(head, at: i) } else { buildHeads() }
  }

  /// The keys at `spans` (start and length in `source`, each checked by
  /// the caller), copied into one buffer with a `memcpy` each: how a
  /// decoded branch gets its separators, with no array per key.
  init(copying spans: [(start: Int, count: Int)], from source: [UInt8]) {
    let total = spans.reduce(0) { $0 + $1.count }
    bytes = source.withUnsafeBytes { src in
      [UInt8](unsafeUninitializedCapacity: Swift.max(1, total)) { out, initialized in
        var at = 0
        for s in spans where s.count > 0 {
          // Safe: the caller checked every span lies inside `source`, and
          // `out` holds `total` bytes.
          UnsafeMutableRawPointer(out.baseAddress! + at).copyMemory(
            from: src.baseAddress! + s.start, byteCount: s.count)
          at += s.count
        }
        initialized = total
      }
    }
    var end: UInt32 = 0
    ends = spans.map { s in
      end += UInt32(s.count)
      return end
    }
    buildHeads()
  }

  mutating func append(contentsOf other: PackedKeys) {
    let base = UInt32(bytes.count)
    bytes.append(contentsOf: other.bytes)
    ends.append(contentsOf: other.ends.map { $0 + base })
    buildHeads()
  }

  mutating func insert(_ key: [UInt8], at i: Int) {
    let s = start(i)
    bytes.insert(contentsOf: key, at: s)
    ends.insert(UInt32(s), at: i)
    for j in i..<ends.count { ends[j] += UInt32(key.count) }
    addHead(at: i)
  }

  mutating func remove(_ range: Range<Int>) {
    guard !range.isEmpty else { return }
    let s = start(range.lowerBound)
    let e = Int(ends[range.upperBound - 1])
    bytes.removeSubrange(s..<e)
    ends.removeSubrange(range)
    for j in range.lowerBound..<ends.count { ends[j] -= UInt32(e - s) }
    // The others still share the prefix.
    heads.removeSubrange(range)
    if heads.isEmpty { headSkip = 0 }
  }

  mutating func replace(_ i: Int, with key: [UInt8]) {
    remove(i..<(i + 1))
    insert(key, at: i)
  }
}
