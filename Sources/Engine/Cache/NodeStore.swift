/// Reads nodes and large values from one data file, checking each block,
/// through the node cache.
final class NodeStore: @unchecked Sendable {
  let file: any StorageFile
  let path: String
  let cache: NodeCache
  let counters: Counters
  /// Opens every block when the file is encrypted (FORMAT.md §11).
  let cipher: BlockCipher?

  init(file: any StorageFile, cache: NodeCache, counters: Counters, cipher: BlockCipher?) {
    self.file = file
    self.path = file.path
    self.cache = cache
    self.counters = counters
    self.cipher = cipher
  }

  /// The node in the block `ref` points at.
  ///
  /// - Throws: ``EngineError/Code/corrupted`` (with this file and the block's
  ///   offset) when the block is short, fails its checksum, is not a node, or
  ///   does not decode; ``EngineError/Code/io`` when the read fails.
  ///
  /// `fill` says whether a node read from the file enters the cache.
  func node(_ ref: DiskRef, fill: CacheFill = .always) throws -> Node {
    if let node = cache.get(ref.offset) {
      counters.nodeCacheHits.add(1)
      return node
    }
    counters.nodeCacheMisses.add(1)
    let node = try readNode(ref)
    switch fill {
    case .always: cache.insert(ref.offset, node)
    case .ifRoom: cache.insert(ref.offset, node, evicting: false)
    case .never: break
    }
    return node
  }

  /// Reads a referenced block whole, refusing lengths no block can have
  /// (a damaged reference must not make us allocate gigabytes).
  private func readBlock(_ ref: DiskRef) throws -> [UInt8] {
    guard Int(ref.length) >= BlockLayout.header, Int(ref.length) <= BlockLayout.header + Limits.maxBlockPayload else {
      throw EngineError(
        .corrupted, "a reference gives block length \(ref.length), which no block can have", path: path,
        offset: ref.offset.rawValue)
    }
    let bytes = try file.read(at: ref.offset.rawValue, count: Int(ref.length))
    counters.bytesRead.add(bytes.count)
    return bytes
  }

  /// Reads and decodes a node without the cache.
  func readNode(_ ref: DiskRef) throws -> Node {
    let offset = ref.offset.rawValue
    let bytes = try readBlock(ref)
    let block = try BlockFraming.parse(bytes, at: offset, expectedLength: Int(ref.length), path: path, cipher: cipher)
    switch block.kind {
    case .leaf: return .leaf(try NodeCodec.decodeLeaf(block.payload, owner: 0, path: path, offset: offset))
    case .branch: return .branch(try NodeCodec.decodeBranch(block.payload, owner: 0, path: path, offset: offset))
    case .largeValue, .commit, .keyBlock:
      throw EngineError(.corrupted, "expected a node, found a \(block.kind) block", path: path, offset: offset)
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
  /// Yes, evicting others if the cache is full (point reads, descents).
  case always
  /// Only into room the cache has to spare, evicting nothing (the leaves
  /// of a long scan that asked to keep them).
  case ifRoom
  /// No (the leaves of a long scan: scan resistance).
  case never
}
