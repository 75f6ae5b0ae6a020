/// Reads nodes and large values from one data file, checking each block,
/// through the node cache.
final class NodeStore: @unchecked Sendable {
  let file: any StorageFile
  let path: String
  let cache: NodeCache
  let counters: Counters
  /// Opens every block when the file is encrypted (FORMAT.md §11).
  let cipher: BlockCipher?

  /// The data file mapped for reading, when it is (``Options/mapsDataFile``).
  private let mapping: MappedReads?
  var isMapped: Bool { mapping != nil }

  init(file: any StorageFile, cache: NodeCache, counters: Counters, cipher: BlockCipher?, mapped: Bool) {
    self.file = file
    self.path = file.path
    self.cache = cache
    self.counters = counters
    self.cipher = cipher
    mapping = mapped ? MappedReads(file: file) : nil
  }

  /// The node in the block `ref` points at.
  ///
  /// - Throws: ``EngineError/Code/corrupted`` (with this file and the block's
  ///   offset) when the block is short, fails its checksum, is not a node, or
  ///   does not decode; ``EngineError/Code/io`` when the read fails.
  ///
  /// `fill` says whether a node read from the file enters the cache.
  func node(_ ref: DiskRef, fill: CacheFill = .always) throws -> Node {
    if fill == .always { return try node(ref, cache.lookup(ref.offset)) }
    if let node = cache.get(ref.offset) {
      counters.nodeCacheHits.add(1)
      return node
    }
    counters.nodeCacheMisses.add(1)
    let node = try readNode(ref)
    if fill == .ifRoom { cache.insert(ref.offset, node, evicting: false) }
    return node
  }

  /// Calls `body` with the value stored under `key` in the leaf `ref`
  /// points at, without copying it; returns nil when the leaf does not hold
  /// the key. A point read's last step: a leaf the cache will not keep
  /// (``NodeCache/lookup(_:)``) is searched where it was read, its entry
  /// table checked as a decoded leaf's is, and no node is built.
  ///
  /// - Throws: what ``node(_:fill:)`` throws, and
  ///   ``EngineError/Code/corrupted`` when the block is not a leaf.
  func visitLeafValue(
    _ ref: DiskRef, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void
  ) throws -> Void? {
    let lookup = cache.lookup(ref.offset)
    if case .pass = lookup, cipher == nil, let found = try visitInPlace(ref, key: key, body) {
      counters.nodeCacheMisses.add(1)
      return found ? () : nil
    }
    let node = try node(ref, lookup)
    guard case .leaf(let leaf) = node else {
      throw EngineError(
        .corrupted, "node is at level \(node.level) where its parent expects level 0", path: path,
        offset: ref.offset.rawValue)
    }
    let (i, found) = leaf.find(key)
    guard found else { return nil }
    return try leaf.withValue(at: i, store: self, body)
  }

  /// The node `ref` points at, as `lookup` (the cache's answer for it)
  /// says: the cached node, or the node read and inserted, or read only.
  private func node(_ ref: DiskRef, _ lookup: NodeCache.Lookup) throws -> Node {
    switch lookup {
    case .hit(let node):
      counters.nodeCacheHits.add(1)
      return node
    case .admit:
      counters.nodeCacheMisses.add(1)
      let node = try readNode(ref)
      cache.insert(ref.offset, node)
      return node
    case .pass:
      counters.nodeCacheMisses.add(1)
      return try readNode(ref)
    }
  }

  /// ``visitLeafValue(_:key:_:)`` on the block's bytes: whether the leaf
  /// holds `key` (calling `body` with its value if so), or nil when the
  /// block is not a leaf (the caller decodes it to say what it is).
  private func visitInPlace(
    _ ref: DiskRef, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void
  ) throws -> Bool? {
    let offset = ref.offset.rawValue
    return try withBlock(ref) { bytes -> Bool? in
      let (h, length, _) = try BlockFraming.check(bytes, at: offset, expectedLength: Int(ref.length), path: path)
      guard h.kind == .leaf else { return nil }
      return try BlockFraming.withClearPayload(bytes, header: h, length: length, at: offset, path: path) { payload in
        guard let s = try NodeCodec.findInLeaf(payload, key: key, path: path, offset: offset) else { return false }
        switch s.kind {
        case .inline:
          // Safe: findInLeaf checked the slot's bounds.
          try body(payload.bytes(from: Int(s.valueStart), count: Int(s.valueLength)))
        case .large, .pending:
          let large = LeafNode.largeRef(payload, at: Int(s.valueStart))
          try largeValue(large, length: Int(s.valueLength)).withUnsafeBytes(body)
        }
        return true
      }
    }
  }

  /// Reads the block `ref` points at into scratch memory and calls `body`
  /// with the bytes read (fewer than its length only at the end of the
  /// file), refusing lengths no block can have: a damaged reference must
  /// not make us allocate gigabytes.
  private func withBlock<R>(_ ref: DiskRef, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
    try checkLength(ref)
    if let mapping, let mapped = mapping.bytesOnReadPages(at: ref.offset.rawValue, count: Int(ref.length)) {
      counters.bytesRead.add(mapped.count)
      do {
        return try body(mapped)
      } catch let error as EngineError where error.code == .corrupted && mapping.isClosed {
        // The store closed under this read and its map now reads as zeros.
        throw EngineError(.closed, "the store was closed during the read", path: path)
      }
    }
    return try Scratch.with(.block, count: Int(ref.length)) { buffer in
      let read = try file.read(at: ref.offset.rawValue, into: buffer)
      counters.bytesRead.add(read)
      mapping?.markRead(at: ref.offset.rawValue, count: read)
      return try body(UnsafeRawBufferPointer(rebasing: buffer[..<read]))
    }
  }

  /// Reads a referenced block whole into an array of its own (a large
  /// value, or a sealed block to open).
  private func readBlock(_ ref: DiskRef) throws -> [UInt8] {
    try checkLength(ref)
    if let mapped = mapping?.bytesOnReadPages(at: ref.offset.rawValue, count: Int(ref.length)) {
      counters.bytesRead.add(mapped.count)
      return Array(mapped)
    }
    let bytes = try file.read(at: ref.offset.rawValue, count: Int(ref.length))
    counters.bytesRead.add(bytes.count)
    mapping?.markRead(at: ref.offset.rawValue, count: bytes.count)
    return bytes
  }

  private func checkLength(_ ref: DiskRef) throws {
    guard Int(ref.length) >= BlockLayout.header, Int(ref.length) <= BlockLayout.header + Limits.maxBlockPayload else {
      throw EngineError(
        .corrupted, "a reference gives block length \(ref.length), which no block can have", path: path,
        offset: ref.offset.rawValue)
    }
  }

  /// Notes bytes a checkpoint wrote: their pages are in the page cache
  /// (just written), so reads of them may go through the map.
  func noteWritten(at offset: UInt64, count: Int) { mapping?.markRead(at: offset, count: count) }

  /// Closes the data file and lets go of its map: reads from now on
  /// fail with ``EngineError/Code/closed``.
  func close() {
    mapping?.close()
    file.close()
  }

  /// Reads and decodes a node without the cache.
  func readNode(_ ref: DiskRef) throws -> Node {
    let offset = ref.offset.rawValue
    let kind: BlockKind
    let payload: [UInt8]
    if let cipher {
      let block = try BlockFraming.parse(
        try readBlock(ref), at: offset, expectedLength: Int(ref.length), path: path, cipher: cipher)
      (kind, payload) = (block.kind, block.payload)
    } else {
      // The block goes to scratch memory; only its payload is allocated.
      (kind, payload) = try withBlock(ref) { bytes in
        let (h, length, _) = try BlockFraming.check(bytes, at: offset, expectedLength: Int(ref.length), path: path)
        return (h.kind, try BlockFraming.clearPayload(bytes, header: h, length: length, at: offset, path: path))
      }
    }
    switch kind {
    case .leaf: return .leaf(try NodeCodec.decodeLeaf(payload, owner: 0, path: path, offset: offset))
    case .branch: return .branch(try NodeCodec.decodeBranch(payload, owner: 0, path: path, offset: offset))
    case .largeValue, .commit, .keyBlock:
      throw EngineError(.corrupted, "expected a node, found a \(kind) block", path: path, offset: offset)
    }
  }

  /// The bytes of a large value.
  func largeValue(_ ref: DiskRef, length: Int) throws -> [UInt8] {
    let offset = ref.offset.rawValue
    let bytes = try readBlock(ref)
    let block = try BlockFraming.parse(bytes, at: offset, expectedLength: Int(ref.length), path: path, cipher: cipher)
    guard block.kind == .largeValue, block.payload.count == length else {
      throw EngineError(
        .corrupted, "expected a large value of \(length) bytes, found a \(block.kind) block of \(block.payload.count)",
        path: path, offset: offset)
    }
    return block.payload
  }
}

/// Whether a node read from the file enters the node cache.
enum CacheFill {
  /// Yes while the cache has room; once it is full, on the node's second
  /// miss within a short window, evicting others (point reads, descents,
  /// a cursor's first leaves: ``NodeCache/lookup(_:)``).
  case always
  /// Only into room the cache has to spare, evicting nothing (the leaves
  /// of a long scan that asked to keep them).
  case ifRoom
  /// No (the leaves of a long scan: scan resistance).
  case never
}
