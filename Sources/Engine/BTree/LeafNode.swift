/// How a leaf entry's value is held.
enum ValueKind: UInt8 {
  /// The value's bytes are in the leaf. On disk: FORMAT.md §2.2 kind 0.
  case inline = 0
  /// The value is its own large-value block; the leaf holds a 12-byte
  /// reference (offset u64, block length u32). On disk: kind 1.
  case large = 1
  /// A large value not yet written to the data file (memory only).
  case pending = 2
}

/// One entry of a leaf: where its key and value are.
struct LeafSlot {
  /// The key's first eight bytes after the leaf's ``LeafNode/headSkip``
  /// as a big-endian integer (``keyHead(_:after:)``): a search compares
  /// these and reads the key itself only on a tie.
  var head: UInt64
  var keyStart: UInt32
  var keyLength: UInt16
  var kind: ValueKind
  /// `.inline`: offset of the bytes in the buffer; `.large`: offset of the
  /// 12-byte reference in the buffer; `.pending`: index in `pending`.
  var valueStart: UInt32
  /// The value's logical length in bytes.
  var valueLength: UInt32

  /// Bytes this entry takes in the leaf's encoding (FORMAT.md §2.2).
  var encodedSize: Int {
    LeafLayout.entrySize + Int(keyLength) + (kind == .inline ? Int(valueLength) : LeafLayout.largeRefSize)
  }
}

/// A leaf node: sorted entries whose key and value bytes sit in one buffer.
///
/// One buffer and one slot array per node instead of two arrays per entry:
/// decoding a leaf from disk allocates twice, not a hundred times, and a
/// leaf in the cache costs about its encoded size. Writes append to the
/// buffer; the dead bytes they leave are dropped when the node is copied or
/// the garbage passes half the buffer.
final class LeafNode: @unchecked Sendable {
  let owner: UInt64
  // Exclusivity is not checked at run time on these: the ownership rule (see
  // Node) already guarantees that only the owning writer changes a node, and
  // only before anyone else can see it. The checks cost a fifth of a lookup.
  @exclusivity(unchecked) private(set) var buffer: [UInt8]
  @exclusivity(unchecked) private(set) var slots: [LeafSlot]
  @exclusivity(unchecked) private(set) var pending: [[UInt8]]
  /// The slots' heads in one array, only in nodes that never change
  /// (owner 0: read from the file or written by a checkpoint): a search of
  /// a cached leaf walks these few cache lines rather than the slots (24
  /// bytes each). A writer's nodes, which change, search the slots' heads.
  @exclusivity(unchecked) private var heads: [UInt64]
  /// How many leading bytes every key shares (not always all it shares:
  /// removing keys may lengthen the common prefix). Every head, in the
  /// slots and in ``heads``, is of the bytes after these: heads of whole
  /// keys would tie across a leaf of record keys, whose first eight bytes
  /// are mostly the same, and every step of a search would then compare
  /// keys in the buffer.
  @exclusivity(unchecked) private(set) var headSkip: Int
  private(set) var encodedSize: Int
  private var deadBytes: Int

  init(owner: UInt64) {
    self.owner = owner
    buffer = []
    slots = []
    pending = []
    heads = []
    headSkip = 0
    encodedSize = LeafLayout.header
    deadBytes = 0
  }

  /// A leaf over `buffer` (which the slots point into). `headSkip`: the
  /// prefix the slots' heads already follow; nil to work it out and set
  /// every slot's head. With owner 0 the leaf will never change, and it
  /// keeps its heads in one array.
  init(owner: UInt64, buffer: [UInt8], slots: [LeafSlot], encodedSize: Int, headSkip: Int? = nil) {
    self.owner = owner
    self.buffer = buffer
    self.slots = slots
    self.pending = []
    self.encodedSize = encodedSize
    self.deadBytes = 0
    self.heads = []
    self.headSkip = headSkip ?? 0
    if headSkip == nil { setEveryHead() }
    if owner == 0 { heads = self.slots.map(\.head) }
  }

  /// Finds the prefix the first and last keys share (so every key does)
  /// and sets every slot's head after it.
  private func setEveryHead() {
    guard let first = slots.first, let last = slots.last else {
      headSkip = 0
      return
    }
    buffer.withUnsafeBytes { raw in
      // Safe: slot bounds were checked when decoded or set when appended.
      let skip = commonPrefixLength(
        raw.bytes(from: Int(first.keyStart), count: Int(first.keyLength)),
        raw.bytes(from: Int(last.keyStart), count: Int(last.keyLength)))
      headSkip = skip
      slots.withUnsafeMutableBufferPointer { sl in
        for i in sl.indices {
          sl[i].head = keyHead(raw.bytes(from: Int(sl[i].keyStart), count: Int(sl[i].keyLength)), after: skip)
        }
      }
    }
  }

  /// Sets the head of slot `i`, just added: after the prefix the others
  /// share if its key shares it too, else every head after a shorter one.
  private func setHead(at i: Int) {
    guard slots.count > 1 else { return setEveryHead() }
    let skip = headSkip
    let (s, other) = (slots[i], slots[i == 0 ? 1 : 0])
    let head = buffer.withUnsafeBytes { raw in
      // Safe: slot bounds were checked when decoded or set when appended.
      keyHead(
        raw.bytes(from: Int(s.keyStart), count: Int(s.keyLength)), after: skip,
        sharedWith: raw.bytes(from: Int(other.keyStart), count: Int(other.keyLength)))
    }
    if let head { slots[i].head = head } else { setEveryHead() }
  }

  var count: Int { slots.count }
  /// Bytes of the array of heads.
  var headBytes: Int { heads.count * 8 }
  var bufferCount: Int { buffer.count + pending.reduce(0) { $0 + $1.count } }
  var isEmpty: Bool { slots.isEmpty }

  // MARK: Reading

  func key(at i: Int) -> [UInt8] {
    let s = slots[i]
    return copyBytes(Int(s.keyStart), Int(s.keyLength))
  }

  /// `buffer[start..<start+count]` as a new array.
  ///
  /// Not `Array(unsafeUninitializedCapacity:)`: on Linux that reaches an
  /// unspecialized initializer that looks up generic metadata under a lock
  /// on every call, which measured as a fifth of a scan. Copying a slice is
  /// specialized here.
  @inline(__always)
  private func copyBytes(_ start: Int, _ count: Int) -> [UInt8] {
    Array(buffer[start..<start + count])
  }

  /// Whether `key` sorts after every key of the leaf (true when it has
  /// none): then ``find(_:)`` would answer (``count``, false), here with one
  /// comparison.
  func precedes(_ key: UnsafeRawBufferPointer) -> Bool {
    guard let s = slots.last else { return true }
    // Safe: slot bounds were checked when decoded or set when appended.
    return buffer.withUnsafeBytes {
      compareBytes($0.bytes(from: Int(s.keyStart), count: Int(s.keyLength)), key) < 0
    }
  }

  /// Whether `key` lies between the leaf's first and last keys, both
  /// included: only then can ``find(_:)`` find it.
  func spans(_ key: UnsafeRawBufferPointer) -> Bool {
    guard let first = slots.first, let last = slots.last else { return false }
    // Safe: slot bounds were checked when decoded or set when appended.
    return buffer.withUnsafeBytes { raw in
      compareBytes(raw.bytes(from: Int(last.keyStart), count: Int(last.keyLength)), key) >= 0
        && compareBytes(raw.bytes(from: Int(first.keyStart), count: Int(first.keyLength)), key) <= 0
    }
  }

  /// The first index whose key is >= `key`, and whether it is equal.
  func find(_ key: [UInt8]) -> (index: Int, found: Bool) {
    key.withUnsafeBytes { k in find(k) }
  }

  func find(_ key: UnsafeRawBufferPointer) -> (index: Int, found: Bool) {
    buffer.withUnsafeBytes { raw in
      let skip = headSkip
      if skip > 0, let first = slots.first {
        // Every key starts with the first key's `skip` bytes. (Not always
        // in a damaged leaf, whose keys may be out of order: the read stays
        // inside the first key.)
        let prefix = raw.bytes(from: Int(first.keyStart), count: Swift.min(skip, Int(first.keyLength)))
        switch prefixOrder(key, prefix) {
        case .below: return (0, false)
        case .above: return (slots.count, false)
        case .within: break
        }
      }
      let head = keyHead(key, after: skip)
      // Keys with equal heads whose tails fit in a head differ only in
      // trailing zero bytes, so the shorter sorts first: the slots' lengths
      // order them without reading the keys.
      let shortTail = key.count - skip <= 8
      @inline(__always) func compareTie(_ s: LeafSlot) -> Int {
        if shortTail && Int(s.keyLength) - skip <= 8 { return Int(s.keyLength) - key.count }
        return compareBytes(raw.bytes(from: Int(s.keyStart), count: Int(s.keyLength)), key)
      }
      guard heads.isEmpty else {
        // A cached leaf: its array of heads, then the slots only on a tie.
        // Only keys in `lo..<end` can equal `key`; those before are smaller.
        let r = heads.withUnsafeBufferPointer { headRange($0, head) }
        var (lo, hi) = (r.lowerBound, r.upperBound)
        while lo < hi {
          let mid = (lo + hi) >> 1
          if compareTie(slots[mid]) < 0 { lo = mid + 1 } else { hi = mid }
        }
        return (lo, lo < r.upperBound && compareTie(slots[lo]) == 0)
      }
      // A writer's leaf: the heads in its slots.
      return slots.withUnsafeBufferPointer { sl in
        var (lo, hi) = (0, sl.count)
        while lo < hi {
          let mid = (lo + hi) >> 1
          let s = sl[mid]
          let below = s.head != head ? s.head < head : compareTie(s) < 0
          if below { lo = mid + 1 } else { hi = mid }
        }
        return (lo, lo < sl.count && sl[lo].head == head && compareTie(sl[lo]) == 0)
      }
    }
  }

  /// The value at `i`, reading a large value through `store` when needed.
  func value(at i: Int, store: NodeStore?) throws -> [UInt8] {
    let s = slots[i]
    switch s.kind {
    case .inline:
      return copyBytes(Int(s.valueStart), Int(s.valueLength))
    case .pending:
      return pending[Int(s.valueStart)]
    case .large:
      guard let store else { throw EngineError(.closed, "no data file to read a large value from") }
      return try store.largeValue(largeRef(at: i), length: Int(s.valueLength))
    }
  }

  /// Calls `body` with the value at `i` in place (a large value is read first).
  func withValue<R>(at i: Int, store: NodeStore?, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
    let s = slots[i]
    switch s.kind {
    case .inline:
      return try buffer.withUnsafeBytes { raw in
        // Safe: slot bounds were checked when decoded or set when appended.
        try body(raw.bytes(from: Int(s.valueStart), count: Int(s.valueLength)))
      }
    case .pending:
      return try pending[Int(s.valueStart)].withUnsafeBytes(body)
    case .large:
      return try value(at: i, store: store).withUnsafeBytes(body)
    }
  }

  /// Calls `body` with the index, key and value of entries `start`,
  /// `start + step`, ... while they exist and `body` returns true: the
  /// buffer and slots are held once for the run instead of once per entry.
  /// `step` is 1 (ascending) or -1 (descending).
  func visit(
    from start: Int, step: Int, store: NodeStore?,
    _ body: (Int, UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
  ) throws {
    try buffer.withUnsafeBytes { raw in
      try slots.withUnsafeBufferPointer { sl in
        var i = start
        while i >= 0 && i < sl.count {
          let s = sl[i]
          // Safe: slot bounds were checked when decoded or set when appended.
          let k = raw.bytes(from: Int(s.keyStart), count: Int(s.keyLength))
          let more: Bool
          if s.kind == .inline {
            more = try body(i, k, raw.bytes(from: Int(s.valueStart), count: Int(s.valueLength)))
          } else {
            more = try withValue(at: i, store: store) { try body(i, k, $0) }
          }
          if !more { return }
          i += step
        }
      }
    }
  }

  /// Calls `body` with the key at `i` in place.
  @inline(__always)
  func withKey<R>(at i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    let s = slots[i]
    return try buffer.withUnsafeBytes { raw in
      try body(raw.bytes(from: Int(s.keyStart), count: Int(s.keyLength)))
    }
  }

  /// The on-disk reference of a `.large` entry.
  func largeRef(at i: Int) -> DiskRef {
    // Safe: a large entry's 12-byte reference lies in the buffer, checked by
    // NodeCodec.decodeLeaf for a leaf read from a file and written by
    // makeValue for one built in memory.
    buffer.withUnsafeBytes { Self.largeRef($0, at: Int(slots[i].valueStart)) }
  }

  /// The large-value reference whose 12 bytes start at `start` of a leaf's
  /// bytes (the caller has checked they lie in it).
  static func largeRef(_ bytes: UnsafeRawBufferPointer, at start: Int) -> DiskRef {
    let length = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: start + 8, as: UInt32.self))
    return DiskRef(
      offset: BlockOffset(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: start, as: UInt64.self))),
      length: length, subtreeBytes: UInt64(length))
  }

  // MARK: Writing (owner only)

  private func appendKey(_ key: [UInt8]) -> UInt32 {
    let start = UInt32(buffer.count)
    buffer.append(contentsOf: key)
    return start
  }

  private func makeValue(_ value: LeafValue) -> (ValueKind, UInt32, UInt32) {
    switch value {
    case .inline(let bytes):
      let start = UInt32(buffer.count)
      buffer.append(contentsOf: bytes)
      return (.inline, start, UInt32(bytes.count))
    case .pending(let bytes):
      pending.append(bytes)
      return (.pending, UInt32(pending.count - 1), UInt32(bytes.count))
    case .large(let ref, let length):
      let start = UInt32(buffer.count)
      withUnsafeBytes(of: ref.offset.rawValue.littleEndian) { buffer.append(contentsOf: $0) }
      withUnsafeBytes(of: ref.length.littleEndian) { buffer.append(contentsOf: $0) }
      return (.large, start, length)
    }
  }

  private func release(_ s: LeafSlot) {
    deadBytes += Int(s.keyLength)
    switch s.kind {
    case .inline: deadBytes += Int(s.valueLength)
    case .large: deadBytes += LeafLayout.largeRefSize
    case .pending: pending[Int(s.valueStart)] = []
    }
  }

  func insert(_ key: [UInt8], _ value: LeafValue, at i: Int) {
    let keyStart = appendKey(key)
    let (kind, start, length) = makeValue(value)
    let slot = LeafSlot(
      head: 0, keyStart: keyStart, keyLength: UInt16(key.count), kind: kind, valueStart: start, valueLength: length)
    // Appending (ids that grow, a sorted load) skips `insert(_:at:)`'s
    // generic subrange replacement.
    if i == slots.count { slots.append(slot) } else { slots.insert(slot, at: i) }
    setHead(at: i)
    encodedSize += slot.encodedSize
  }

  /// The encoded size the leaf would have with `value` as entry `i`'s.
  func encodedSize(replacing i: Int, with value: LeafValue) -> Int {
    let s = slots[i]
    let valueBytes: Int
    switch value {
    case .inline(let bytes): valueBytes = bytes.count
    case .pending, .large: valueBytes = LeafLayout.largeRefSize
    }
    return encodedSize - s.encodedSize + LeafLayout.entrySize + Int(s.keyLength) + valueBytes
  }

  func setValue(_ value: LeafValue, at i: Int) {
    var s = slots[i]
    encodedSize -= s.encodedSize
    switch s.kind {
    case .inline: deadBytes += Int(s.valueLength)
    case .large: deadBytes += LeafLayout.largeRefSize
    case .pending: pending[Int(s.valueStart)] = []
    }
    (s.kind, s.valueStart, s.valueLength) = makeValue(value)
    slots[i] = s
    encodedSize += s.encodedSize
    compactIfWasteful()
  }

  func remove(_ range: Range<Int>) {
    guard !range.isEmpty else { return }
    for i in range {
      release(slots[i])
      encodedSize -= slots[i].encodedSize
    }
    slots.removeSubrange(range)
    compactIfWasteful()
  }

  /// Moves entries `[from...]` of `self` into a new leaf, which is returned.
  func splitOff(from index: Int, owner: UInt64) -> LeafNode {
    let right = LeafNode(owner: owner)
    right.appendEntries(of: self, range: index..<slots.count)
    remove(index..<slots.count)
    return right
  }

  /// Appends entries of `other` (whose keys are all greater than ours),
  /// copying bytes slice by slice: no allocation per entry.
  func appendEntries(of other: LeafNode, range: Range<Int>) {
    let wasEmpty = slots.isEmpty
    // The entries come with heads after `other`'s prefix: kept when they
    // are all this leaf will hold, set again when joining others.
    defer { if wasEmpty { headSkip = other.headSkip } else if !range.isEmpty { setEveryHead() } }
    slots.reserveCapacity(slots.count + range.count)
    for i in range {
      let s = other.slots[i]
      var n = s
      let keyStart = Int(s.keyStart)
      n.keyStart = UInt32(buffer.count)
      switch s.kind {
      case .inline:
        let valueStart = Int(s.valueStart)
        if valueStart == keyStart + Int(s.keyLength) {
          buffer.append(contentsOf: other.buffer[keyStart..<valueStart + Int(s.valueLength)])
        } else {
          buffer.append(contentsOf: other.buffer[keyStart..<keyStart + Int(s.keyLength)])
          buffer.append(contentsOf: other.buffer[valueStart..<valueStart + Int(s.valueLength)])
        }
        n.valueStart = n.keyStart + UInt32(s.keyLength)
      case .large:
        buffer.append(contentsOf: other.buffer[keyStart..<keyStart + Int(s.keyLength)])
        n.valueStart = UInt32(buffer.count)
        let refStart = Int(s.valueStart)
        buffer.append(contentsOf: other.buffer[refStart..<refStart + LeafLayout.largeRefSize])
      case .pending:
        buffer.append(contentsOf: other.buffer[keyStart..<keyStart + Int(s.keyLength)])
        pending.append(other.pending[Int(s.valueStart)])
        n.valueStart = UInt32(pending.count - 1)
      }
      slots.append(n)
      encodedSize += n.encodedSize
    }
  }

  /// A copy owned by `owner`. It shares the arrays until either side
  /// changes them (Swift's copy-on-write then copies each in one piece).
  func copy(owner: UInt64) -> LeafNode {
    let c = LeafNode(owner: owner, buffer: buffer, slots: slots, encodedSize: encodedSize, headSkip: headSkip)
    c.pending = pending
    c.deadBytes = deadBytes
    c.compactIfWasteful()
    return c
  }

  /// A copy owned by `owner` with no dead bytes.
  func compacted(owner: UInt64) -> LeafNode {
    let c = LeafNode(owner: owner)
    c.buffer.reserveCapacity(buffer.count - deadBytes)
    c.appendEntries(of: self, range: 0..<slots.count)
    return c
  }

  /// The byte index at which to split so both halves hold about half the encoding.
  func splitIndex() -> Int {
    let half = encodedSize / 2
    var acc = LeafLayout.header
    for i in slots.indices {
      acc += slots[i].encodedSize
      if acc >= half { return Swift.max(1, Swift.min(i + 1, slots.count - 1)) }
    }
    return Swift.max(1, slots.count - 1)
  }

  private func compactIfWasteful() {
    guard deadBytes > 1024 && deadBytes * 2 > buffer.count else { return }
    let fresh = compacted(owner: owner)
    buffer = fresh.buffer
    slots = fresh.slots
    headSkip = fresh.headSkip
    pending = fresh.pending
    deadBytes = 0
  }
}

/// A value as handed to a leaf.
enum LeafValue {
  /// Stored in the leaf.
  case inline([UInt8])
  /// Longer than the inline threshold and not yet written.
  case pending([UInt8])
  /// Already a large-value block on disk.
  case large(DiskRef, length: UInt32)
}
