import CAtomics

/// One keyspace's B+tree as a version of the store sees it.
struct TreeRoot: @unchecked Sendable {
  /// The root node, or nil when the keyspace is empty.
  var root: NodeRef? { didSet { pinned = nil } }
  /// The decoded top of the tree when `root` is on disk, kept by a
  /// checkpoint, a compaction or recovery so reads skip its cache lookups
  /// (every read passes through it, so every read locked the same cache
  /// shards and bumped the same reference counts). Cleared whenever `root`
  /// changes. Writers never use it.
  var pinned: PinnedTop?
  /// Keys in the tree.
  var count: UInt64
  /// Levels: 0 when empty, 1 when the root is a leaf.
  var height: Int
  /// The leaf the last put stored into, for the next put of a key already
  /// in it (a batch update walks records in key order, several to a leaf):
  /// while it belongs to the running writer and the value fits, that put
  /// changes it in place without a descent. A put never takes a leaf out
  /// of the tree (a split keeps it as the left half); deletes may, so they
  /// forget it. Readers never use it.
  var lastLeaf: LeafNode?

  init(root: NodeRef?, count: UInt64, height: Int) {
    self.root = root
    self.count = count
    self.height = height
  }

  static let empty = TreeRoot(root: nil, count: 0, height: 0)

  /// The root node: the pinned one if there is one.
  @inline(__always)
  func rootNode(_ root: NodeRef, _ ctx: TreeContext) throws -> Node {
    if let pinned { return .branch(pinned.root) }
    return try ctx.resolve(root, level: height - 1)
  }

  /// Keeps the decoded root branch of an on-disk root, read through the
  /// cache, and lets the root's children be pinned too, each at its first
  /// read, when they are branches and their decoded size (estimated from
  /// the root's) stays under an eighth of the node cache's budget. Opening
  /// a store pins every tree, so it reads one node per tree, not the top
  /// two levels. A root leaf is not pinned: a small tree gains nothing. A
  /// node that does not read or is not at its level is not pinned either;
  /// reads then meet the problem themselves and report it.
  mutating func pin(_ store: NodeStore) {
    guard height > 1, case .disk(let ref) = root, case .branch(let top)? = try? store.node(ref),
      top.level == height - 1
    else { return }
    let estimate = Node.branch(top).memoryCost * top.childCount
    let pinsChildren = height > 2 && estimate <= store.cache.capacity / 8
    pinned = PinnedTop(root: top, childrenFrom: pinsChildren ? store : nil)
  }
}

/// The decoded top levels of an on-disk tree (see ``TreeRoot/pinned``).
/// The root is decoded when it is made; each child branch at the first
/// read that passes through it, then kept. Shared by every snapshot of
/// the version: children are published with an atomic compare-and-swap.
final class PinnedTop: @unchecked Sendable {
  // Safe: `slots` is written only by compare-and-swap from 0 and read with
  // acquire loads; an object in it is retained until deinit.
  /// The root branch.
  let root: BranchNode
  /// Where children are read from; nil when they are not pinned.
  private let store: NodeStore?
  /// Per child of the root: 0 not read yet, 1 not a pinnable branch, else
  /// the retained `BranchNode`'s address.
  private let slots: UnsafeMutablePointer<UInt64>?

  init(root: BranchNode, childrenFrom store: NodeStore?) {
    self.root = root
    self.store = store
    if store != nil {
      let slots = UnsafeMutablePointer<UInt64>.allocate(capacity: root.childCount)
      slots.initialize(repeating: 0, count: root.childCount)
      self.slots = slots
    } else {
      slots = nil
    }
  }

  deinit {
    guard let slots else { return }
    for i in 0..<root.childCount where slots[i] > 1 {
      Unmanaged<BranchNode>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(slots[i]))!).release()
    }
    slots.deallocate()
  }

  /// Whether the root's children are pinned (each at its first read).
  var pinsChildren: Bool { slots != nil }

  /// Child `i` of the root, decoded and kept; nil when children are not
  /// pinned or this one is not a branch at the level below.
  @inline(__always)
  func child(_ i: Int) -> BranchNode? {
    guard let slots else { return nil }
    let w = cairn_load_acquire(slots + i)
    if w > 1 { return Unmanaged<BranchNode>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(w))!).takeUnretainedValue() }
    return w == 1 ? nil : load(i, slots)
  }

  private func load(_ i: Int, _ slots: UnsafeMutablePointer<UInt64>) -> BranchNode? {
    guard let store, case .disk(let r) = root.children[i], case .branch(let b)? = try? store.node(r),
      b.level == root.level - 1
    else {
      _ = cairn_compare_exchange(slots + i, 0, 1)
      return nil
    }
    let retained = Unmanaged.passRetained(b)
    let bits = UInt64(UInt(bitPattern: retained.toOpaque()))
    if cairn_compare_exchange(slots + i, 0, bits) != 0 { return b }
    // Another reader pinned it first: use that one.
    retained.release()
    return child(i)
  }

  /// The node below the pinned levels on the way to `key`, and its level.
  @inline(__always)
  func below(_ key: UnsafeRawBufferPointer) -> (ref: NodeRef, level: Int) {
    let i = root.childIndex(for: key)
    guard let b = child(i) else { return (root.children[i], root.level - 1) }
    return (b.children[b.childIndex(for: key)], b.level - 1)
  }
}

/// The encoded bytes of the nodes one write transaction copied to change
/// them: what its commit adds to the memory a checkpoint frees
/// (``Options/checkpointMemoryThreshold``). Used by one writer at a time.
final class CopyMeter {
  var bytes = 0
}

/// What tree walks need: where disk nodes come from, and for writers, which
/// generation may change nodes in place and how big nodes grow.
struct TreeContext {
  let store: NodeStore
  /// The running writer's generation (0 for readers, which never write).
  var owner: UInt64
  let nodeSize: Int
  let largeValueThreshold: Int
  /// Adds up the nodes this writer copies, when someone asks.
  let copies: CopyMeter?

  init(
    store: NodeStore, owner: UInt64 = 0, nodeSize: Int = 4096, largeValueThreshold: Int = 1024,
    copies: CopyMeter? = nil
  ) {
    self.store = store
    self.owner = owner
    self.nodeSize = nodeSize
    self.largeValueThreshold = largeValueThreshold
    self.copies = copies
  }

  /// The node a reference points at, reading it through the cache if
  /// needed; `fill` says whether a node read from the file is kept in the
  /// node cache.
  @inline(__always)
  func resolve(_ ref: NodeRef, fill: CacheFill = .always) throws -> Node {
    switch ref {
    case .memory(let node): return node
    case .disk(let disk): return try store.node(disk, fill: fill)
    }
  }

  /// Resolves `ref` and checks it is at `level`, as its parent says it must be.
  func resolve(_ ref: NodeRef, level: Int, fill: CacheFill = .always) throws -> Node {
    let node = try resolve(ref, fill: fill)
    guard node.level == level else {
      var offset: UInt64?
      if case .disk(let d) = ref { offset = d.offset.rawValue }
      throw EngineError(
        .corrupted, "node is at level \(node.level) where its parent expects level \(level)",
        path: store.path, offset: offset)
    }
    return node
  }

  func writable(_ leaf: LeafNode) -> LeafNode {
    if leaf.owner == owner { return leaf }
    copies?.bytes += leaf.encodedSize
    return leaf.copy(owner: owner)
  }

  func writable(_ branch: BranchNode) -> BranchNode {
    if branch.owner == owner { return branch }
    copies?.bytes += branch.encodedSize
    return branch.copy(owner: owner)
  }

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
    try key.withUnsafeBytes { try leaf(for: $0, ctx) }
  }

  /// ``leaf(for:_:)`` with the key's bytes.
  func leaf(for k: UnsafeRawBufferPointer, _ ctx: TreeContext) throws -> (leaf: LeafNode, index: Int)? {
    guard let root else { return nil }
    var node: Node
    if let pinned {
      let (ref, level) = pinned.below(k)
      node = try ctx.resolve(ref, level: level)
    } else {
      node = try ctx.resolve(root, level: height - 1)
    }
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

  /// The value stored under `key`, or nil.
  func get(_ key: [UInt8], _ ctx: TreeContext) throws -> [UInt8]? {
    var value: [UInt8]?
    _ = try key.withUnsafeBytes { k in try withValue(k, ctx) { value = Array($0) } }
    return value
  }

  /// Whether `key` is present; nil when reading the tree failed. For
  /// callers that can do without the answer (change tracking asks it about
  /// an earlier state).
  func presence(of key: [UInt8], _ ctx: TreeContext) -> Bool? {
    do { return try leaf(for: key, ctx) != nil } catch { return nil }
  }

  /// Calls `body` with the value stored under `key`, without copying it.
  /// Returns nil if the key is absent.
  func withValue(_ key: UnsafeRawBufferPointer, _ ctx: TreeContext, _ body: (UnsafeRawBufferPointer) throws -> Void)
    throws -> Void?
  {
    guard let root else { return nil }
    var (ref, level) = pinned?.below(key) ?? (root, height - 1)
    while true {
      // A leaf on disk: searched where it is read, if the cache will not
      // keep it (NodeStore.visitLeafValue).
      if level == 0, case .disk(let disk) = ref { return try ctx.store.visitLeafValue(disk, key: key, body) }
      switch try ctx.resolve(ref, level: level) {
      case .leaf(let leaf):
        let (i, found) = leaf.find(key)
        guard found else { return nil }
        return try leaf.withValue(at: i, store: ctx.store, body)
      case .branch(let branch):
        ref = branch.children[branch.childIndex(for: key)]
        level = branch.level - 1
      }
    }
  }

  /// Collapses a root branch with one child, repeatedly.
  mutating func collapseRoot(_ ctx: TreeContext) throws {
    while height > 1, let ref = root, case .branch(let b) = try ctx.resolve(ref), b.childCount == 1 {
      root = b.children[0]
      height -= 1
    }
  }
}
