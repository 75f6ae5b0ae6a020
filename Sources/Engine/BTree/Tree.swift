/// One keyspace's B+tree as a version of the store sees it.
struct TreeRoot: @unchecked Sendable {
  /// The root node, or nil when the keyspace is empty.
  var root: NodeRef? { didSet { pinned = nil } }
  /// The decoded root branch when `root` is on disk, kept by a checkpoint,
  /// a compaction or recovery so reads skip its cache lookup (every read
  /// starts there, so every read locked the same cache shard for it).
  /// Cleared whenever `root` changes. Writers never use it.
  var pinned: Node?
  /// Keys in the tree.
  var count: UInt64
  /// Levels: 0 when empty, 1 when the root is a leaf.
  var height: Int

  init(root: NodeRef?, count: UInt64, height: Int) {
    self.root = root
    self.count = count
    self.height = height
  }

  static let empty = TreeRoot(root: nil, count: 0, height: 0)

  /// The root node: the pinned one if there is one.
  @inline(__always)
  func rootNode(_ root: NodeRef, _ ctx: TreeContext) throws -> Node {
    if let pinned { return pinned }
    return try ctx.resolve(root, level: height - 1)
  }

  /// Keeps the decoded root branch of an on-disk root, read through the
  /// cache. A root leaf is not pinned: a small tree gains nothing.
  mutating func pin(_ store: NodeStore) {
    guard height > 1, case .disk(let ref) = root, let node = try? store.node(ref), node.level == height - 1 else {
      return
    }
    pinned = node
  }
}

/// What tree walks need: where disk nodes come from, and for writers, which
/// generation may change nodes in place and how big nodes grow.
struct TreeContext {
  let store: NodeStore
  /// The running writer's generation (0 for readers, which never write).
  let owner: UInt64
  let nodeSize: Int
  let largeValueThreshold: Int

  init(store: NodeStore, owner: UInt64 = 0, nodeSize: Int = 4096, largeValueThreshold: Int = 1024) {
    self.store = store
    self.owner = owner
    self.nodeSize = nodeSize
    self.largeValueThreshold = largeValueThreshold
  }

  /// The node a reference points at, reading it through the cache if
  /// needed. With `fillCache` false, a node read from the file is not kept
  /// in the node cache (a scan's leaves).
  @inline(__always)
  func resolve(_ ref: NodeRef, fillCache: Bool = true) throws -> Node {
    switch ref {
    case .memory(let node): return node
    case .disk(let disk): return try store.node(disk, fillCache: fillCache)
    }
  }

  /// Resolves `ref` and checks it is at `level`, as its parent says it must be.
  func resolve(_ ref: NodeRef, level: Int, fillCache: Bool = true) throws -> Node {
    let node = try resolve(ref, fillCache: fillCache)
    guard node.level == level else {
      var offset: UInt64?
      if case .disk(let d) = ref { offset = d.offset.rawValue }
      throw EngineError(
        .corrupted, "node is at level \(node.level) where its parent expects level \(level)",
        path: store.path, offset: offset)
    }
    return node
  }

  func writable(_ leaf: LeafNode) -> LeafNode { leaf.owner == owner ? leaf : leaf.copy(owner: owner) }
  func writable(_ branch: BranchNode) -> BranchNode { branch.owner == owner ? branch : branch.copy(owner: owner) }

  /// The size a branch may grow to before it splits: larger than a leaf, so
  /// the tree is a level shallower. Reads walk one node fewer (each walk
  /// step is a few cache misses), while writes copy a longer branch on the
  /// few paths they change.
  var branchSize: Int { nodeSize * Self.branchFactor }
  static let branchFactor = 4

  /// The size a node of this kind may grow to.
  func limit(_ node: Node) -> Int {
    if case .branch = node { return branchSize }
    return nodeSize
  }

  /// Makes the value form a leaf stores: inline, or pending as a large value.
  func leafValue(_ value: [UInt8]) -> LeafValue {
    value.count > largeValueThreshold ? .pending(value) : .inline(value)
  }
}

extension TreeRoot {
  /// The leaf that holds (or would hold) `key`, and the key's index in it if present.
  @inline(__always)
  func leaf(for key: [UInt8], _ ctx: TreeContext) throws -> (leaf: LeafNode, index: Int)? {
    guard let root else { return nil }
    return try key.withUnsafeBytes { k -> (LeafNode, Int)? in
      var node = try rootNode(root, ctx)
      while true {
        switch node {
        case .leaf(let leaf):
          let (i, found) = leaf.find(k)
          return found ? (leaf, i) : nil
        case .branch(let branch):
          node = try ctx.resolve(branch.children[branch.childIndex(for: k)], level: branch.level - 1)
        }
      }
    }
  }

  /// The value stored under `key`, or nil.
  func get(_ key: [UInt8], _ ctx: TreeContext) throws -> [UInt8]? {
    guard let (leaf, i) = try leaf(for: key, ctx) else { return nil }
    return try leaf.value(at: i, store: ctx.store)
  }

  /// Whether `key` is present; nil when reading the tree failed. For
  /// callers that can do without the answer (change tracking asks it about
  /// an earlier state).
  func presence(of key: [UInt8], _ ctx: TreeContext) -> Bool? {
    do { return try leaf(for: key, ctx) != nil } catch { return nil }
  }

  /// Calls `body` with the value stored under `key`, without copying it.
  /// Returns nil if the key is absent.
  func withValue(_ key: [UInt8], _ ctx: TreeContext, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Void? {
    guard let (leaf, i) = try leaf(for: key, ctx) else { return nil }
    return try leaf.withValue(at: i, store: ctx.store, body)
  }

  /// Collapses a root branch with one child, repeatedly.
  mutating func collapseRoot(_ ctx: TreeContext) throws {
    while height > 1, let ref = root, case .branch(let b) = try ctx.resolve(ref), b.childCount == 1 {
      root = b.children[0]
      height -= 1
    }
  }
}
