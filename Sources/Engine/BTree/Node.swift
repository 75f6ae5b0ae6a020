/// Where a child node (or a tree's root) lives.
///
/// `.memory` nodes were built by a writer since the last checkpoint (or are
/// still shared with snapshots taken before it); `.disk` nodes are read
/// through the node cache. A checkpoint turns every `.memory` reference of
/// the latest tree into a `.disk` one.
enum NodeRef: @unchecked Sendable {
  case memory(Node)
  case disk(DiskRef)
}

/// A node's block on disk and the size of everything below it.
struct DiskRef: Hashable, Sendable {
  /// Offset of the node's block.
  var offset: BlockOffset
  /// Length of the node's block (header + stored payload).
  var length: UInt32
  /// Bytes of this node's block plus every block reachable from it
  /// (children, large values): the live bytes of the subtree.
  var subtreeBytes: UInt64
}

/// A B+tree node: a leaf of entries or a branch of children.
///
/// Ownership rule (what keeps snapshots safe without locks): a node whose
/// `owner` equals the running write transaction's generation was created by
/// that transaction and has never been published, so the writer may change it
/// in place. Any other node is immutable, shared by snapshots and the cache;
/// the writer copies it before changing it (copy-on-write).
enum Node: @unchecked Sendable {
  case leaf(LeafNode)
  case branch(BranchNode)

  var owner: UInt64 {
    switch self {
    case .leaf(let l): l.owner
    case .branch(let b): b.owner
    }
  }

  /// Bytes of the node's raw (uncompressed) encoding. Format: FORMAT.md §2.
  var encodedSize: Int {
    switch self {
    case .leaf(let l): l.encodedSize
    case .branch(let b): b.encodedSize
    }
  }

  /// Number of keys in the subtree below this node.
  var keyCount: UInt64 {
    switch self {
    case .leaf(let l): UInt64(l.count)
    case .branch(let b): b.totalCount
    }
  }

  /// 0 for a leaf; a branch's children are one level lower.
  var level: Int {
    switch self {
    case .leaf: 0
    case .branch(let b): b.level
    }
  }

  /// Approximate bytes of memory held, for the node cache's budget.
  var memoryCost: Int {
    switch self {
    case .leaf(let l): 96 + l.bufferCount + l.count * MemoryLayout<LeafSlot>.stride + l.headBytes
    case .branch(let b): 128 + b.keys.bytes.count + b.keys.count * 4 + b.keys.heads.count * 8 + b.children.count * 48
    }
  }
}
