/// Encodes nodes to their raw block payloads and decodes them back, checking
/// every length against the payload. Format: FORMAT.md §2.2 (leaf), §2.3 (branch).
enum NodeCodec {
  /// Encodes a leaf whose pending large values have been written: `largeRefs`
  /// maps their slot index to the block written for them. An entry in
  /// `largeRefs` for a `.large` slot replaces its reference (compaction
  /// moves large values to a new file).
  static func encodeLeaf(_ leaf: LeafNode, largeRefs: [Int: DiskRef]) -> [UInt8] {
    var w = ByteWriter(capacity: leaf.encodedSize)
    w.u32(UInt32(leaf.count))
    for s in leaf.slots {
      w.u16(s.keyLength)
      w.u8(s.kind == .inline ? ValueKind.inline.rawValue : ValueKind.large.rawValue)
      w.u32(s.valueLength)
    }
    leaf.buffer.withUnsafeBytes { raw in
      for (i, s) in leaf.slots.enumerated() {
        let k = Int(s.keyStart)
        w.append(UnsafeRawBufferPointer(rebasing: raw[k..<k + Int(s.keyLength)]))
        switch s.kind {
        case .inline:
          let v = Int(s.valueStart)
          w.append(UnsafeRawBufferPointer(rebasing: raw[v..<v + Int(s.valueLength)]))
        case .large:
          if let ref = largeRefs[i] {
            w.u64(ref.offset.rawValue)
            w.u32(ref.length)
          } else {
            let v = Int(s.valueStart)
            w.append(UnsafeRawBufferPointer(rebasing: raw[v..<v + LeafLayout.largeRefSize]))
          }
        case .pending:
          // Safe: the checkpoint writes every pending value before encoding its leaf.
          let ref = largeRefs[i]!
          w.u64(ref.offset.rawValue)
          w.u32(ref.length)
        }
      }
    }
    assert(w.count == leaf.encodedSize)
    return w.bytes
  }

  /// Encodes a branch whose children are all on disk.
  static func encodeBranch(_ branch: BranchNode) -> [UInt8] {
    var w = ByteWriter(capacity: branch.encodedSize)
    w.u32(UInt32(branch.childCount))
    w.u16(UInt16(branch.level))
    for (i, child) in branch.children.enumerated() {
      // Safe: the checkpoint writes children before their parent.
      guard case .disk(let ref) = child else { preconditionFailure("encoding a branch with an unwritten child") }
      w.u64(ref.offset.rawValue)
      w.u32(ref.length)
      w.u64(branch.counts[i])
      w.u64(ref.subtreeBytes)
    }
    for i in 0..<branch.keys.count {
      w.u16(UInt16(branch.keys.length(i)))
      w.append(branch.keys.key(i))
    }
    assert(w.count == branch.encodedSize)
    return w.bytes
  }

  /// Decodes a leaf payload read from the block at `offset`.
  static func decodeLeaf(_ payload: [UInt8], owner: UInt64, path: String?, offset: UInt64) throws(EngineError)
    -> LeafNode
  {
    var slots: [LeafSlot] = []
    var failure: EngineError?
    payload.withUnsafeBytes { raw in
      do throws(EngineError) {
        let count = try leafEntryCount(raw, path: path, offset: offset)
        slots.reserveCapacity(count)
        try forEachLeafEntry(raw, count: count, path: path, offset: offset) { slots.append($0) }
      } catch {
        failure = error
      }
    }
    if let failure { throw failure }
    return LeafNode(owner: owner, buffer: payload, slots: slots, encodedSize: payload.count)
  }

  /// The entry count of a leaf payload, checked against the room its
  /// entry table needs.
  @inline(__always)
  static func leafEntryCount(_ payload: UnsafeRawBufferPointer, path: String?, offset: UInt64) throws(EngineError)
    -> Int
  {
    guard payload.count >= LeafLayout.header else {
      throw leafError("entry count needs 4 bytes but only \(payload.count) remain", at: 0, path, offset)
    }
    let count = Int(UInt32(littleEndian: payload.loadUnaligned(fromByteOffset: LeafLayout.count, as: UInt32.self)))
    guard count <= (payload.count - LeafLayout.header) / LeafLayout.entrySize else {
      throw leafError("entry count \(count) cannot fit in \(payload.count) bytes", at: 0, path, offset)
    }
    return count
  }

  /// Checks every entry of a leaf payload whose table holds `count`
  /// entries (``leafEntryCount(_:path:offset:)``) and hands each one's slot
  /// (head unset) to `entry`, in order. The one reading of a leaf's bytes:
  /// both a decoded leaf and a search in place (``findInLeaf(_:key:path:offset:)``)
  /// trust the offsets only after this check.
  @inline(__always)
  static func forEachLeafEntry(
    _ payload: UnsafeRawBufferPointer, count: Int, path: String?, offset: UInt64, _ entry: (LeafSlot) -> Void
  ) throws(EngineError) {
    // Entries' bytes start after the table.
    var cursor = LeafLayout.header + count * LeafLayout.entrySize
    var at = LeafLayout.header
    for i in 0..<count {
      let keyLength = UInt16(littleEndian: payload.loadUnaligned(fromByteOffset: at, as: UInt16.self))
      let kindByte = payload[at + LeafLayout.entryKind]
      let valueLength = UInt32(
        littleEndian: payload.loadUnaligned(fromByteOffset: at + LeafLayout.entryValueLength, as: UInt32.self))
      guard Int(keyLength) <= Limits.maxKeySize else {
        throw leafError("entry \(i): key length \(keyLength) exceeds \(Limits.maxKeySize)", at: at, path, offset)
      }
      guard Int(valueLength) <= Limits.maxValueSize else {
        throw leafError(
          "entry \(i): value length \(valueLength) exceeds \(Limits.maxValueSize)", at: at, path, offset)
      }
      guard let kind = ValueKind(rawValue: kindByte), kind != .pending else {
        throw leafError("entry \(i): unknown value kind \(kindByte)", at: at, path, offset)
      }
      at += LeafLayout.entrySize
      let keyStart = cursor
      cursor += Int(keyLength)
      let valueStart = cursor
      cursor += kind == .inline ? Int(valueLength) : LeafLayout.largeRefSize
      guard cursor <= payload.count else {
        throw leafError(
          "entry \(i) ends at byte \(cursor), past the payload's \(payload.count)", at: keyStart, path, offset)
      }
      entry(
        LeafSlot(
          head: 0,  // set by the leaf, after its keys' shared prefix
          keyStart: UInt32(keyStart), keyLength: keyLength, kind: kind, valueStart: UInt32(valueStart),
          valueLength: valueLength))
    }
    guard cursor == payload.count else {
      throw leafError("\(payload.count - cursor) stray bytes after the last entry", at: cursor, path, offset)
    }
  }

  /// Looks `key` up in a leaf payload where it lies, checking the whole
  /// entry table as ``decodeLeaf(_:owner:path:offset:)`` does but building
  /// no node: a point read of a leaf the cache will not keep. Returns the
  /// slot of the entry whose key equals `key`, or nil.
  static func findInLeaf(
    _ payload: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, path: String?, offset: UInt64
  ) throws(EngineError) -> LeafSlot? {
    let count = try leafEntryCount(payload, path: path, offset: offset)
    var failure: EngineError?
    let found = withUnsafeTemporaryAllocation(of: LeafSlot.self, capacity: max(count, 1)) { slots -> LeafSlot? in
      var n = 0
      do throws(EngineError) {
        try forEachLeafEntry(payload, count: count, path: path, offset: offset) { slot in
          slots.initializeElement(at: n, to: slot)
          n += 1
        }
      } catch {
        failure = error
        return nil
      }
      // Lower bound: the first key not below `key`.
      var (lo, hi) = (0, n)
      while lo < hi {
        let mid = (lo + hi) >> 1
        let s = slots[mid]
        // Safe: the walk above checked every slot's bounds.
        if compareBytes(payload.bytes(from: Int(s.keyStart), count: Int(s.keyLength)), key) < 0 {
          lo = mid + 1
        } else {
          hi = mid
        }
      }
      guard lo < n else { return nil }
      let s = slots[lo]
      return compareBytes(payload.bytes(from: Int(s.keyStart), count: Int(s.keyLength)), key) == 0 ? s : nil
    }
    if let failure { throw failure }
    return found
  }

  /// A damaged leaf payload: what is wrong and at which byte of the block.
  private static func leafError(_ message: String, at position: Int, _ path: String?, _ offset: UInt64)
    -> EngineError
  {
    .corrupted("leaf node: \(message)", path: path, offset: offset + UInt64(position), rule: .f5)
  }

  /// Decodes a branch payload read from the block at `offset`.
  static func decodeBranch(_ payload: [UInt8], owner: UInt64, path: String?, offset: UInt64) throws(EngineError)
    -> BranchNode
  {
    var r = ByteReader(payload, path: path, base: offset, what: "branch node", rule: .f5)
    let count = Int(try r.u32("child count"))
    let level = Int(try r.u16("level"))
    guard count >= 1, count <= payload.count / BranchLayout.childSize else {
      throw r.error("child count \(count) is not possible in \(payload.count) bytes", at: 0)
    }
    guard level >= 1, level < Limits.maxTreeHeight else {
      throw r.error("level \(level) is outside 1..<\(Limits.maxTreeHeight)", at: BranchLayout.level)
    }
    var children: [NodeRef] = []
    var counts: [UInt64] = []
    children.reserveCapacity(count)
    counts.reserveCapacity(count)
    for i in 0..<count {
      let childOffset = try r.u64("offset of child \(i)")
      let length = try r.u32("length of child \(i)")
      let keys = try r.u64("key count of child \(i)")
      let bytes = try r.u64("byte count of child \(i)")
      guard childOffset >= UInt64(HeaderLayout.size), childOffset < offset,
        Int(length) >= BlockLayout.header
      else {
        throw r.error(
          "child \(i) points at offset \(childOffset) length \(length), not an earlier block",
          at: r.position - BranchLayout.childSize)
      }
      children.append(.disk(DiskRef(offset: BlockOffset(childOffset), length: length, subtreeBytes: bytes)))
      counts.append(keys)
    }
    // Separators go straight from the payload into one packed buffer: no
    // array per key.
    var spans: [(start: Int, count: Int)] = []
    spans.reserveCapacity(count - 1)
    for i in 0..<(count - 1) {
      let length = Int(try r.u16("length of separator \(i)"))
      guard length <= Limits.maxKeySize else { throw r.error("separator \(i) length \(length) exceeds the key limit") }
      spans.append((try r.span(length, "separator \(i)"), length))
    }
    let keys = PackedKeys(copying: spans, from: payload)
    guard r.isAtEnd else { throw r.error("\(r.remaining) stray bytes after the last separator") }
    return BranchNode(owner: owner, level: level, keys: keys, children: children, counts: counts)
  }
}
