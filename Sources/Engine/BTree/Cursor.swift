/// Walks a keyspace in key order, forward and backward, within a range.
///
/// A cursor sits *between* entries. ``next()`` returns the entry after its
/// position and moves past it; ``previous()`` returns the entry before and
/// moves back. It starts before the first entry of its range. Every entry
/// comes from the one snapshot the cursor was made from: commits made while
/// it is open are never seen, however long it lives.
///
/// Memory held is one root-to-leaf path of nodes (plus what a batch
/// returns), not the result: a cursor over ten million keys costs the same
/// as one over ten.
///
/// A cursor is not thread-safe; use one per thread.
public final class Cursor {
  private let tree: TreeRoot
  private let ctx: TreeContext
  /// The range this cursor is confined to.
  public let range: KeyRange
  private let isOpen: () -> Bool

  // The position is not checked for exclusive access at run time: a
  // cursor is used by one thread, and no method holds an access to these
  // across a call out (`forEach` keeps its position in a local while its
  // closure runs). The checks were an eighth of a point lookup's descent.

  /// Branches from the root down, and the child index taken in each.
  @exclusivity(unchecked) private var path: [(branch: BranchNode, index: Int)] = []
  @exclusivity(unchecked) private var leaf: LeafNode?
  /// Whether every key of `leaf` lies below the range's upper bound, so
  /// stepping forward in it needs no comparison. Worked out once per leaf.
  @exclusivity(unchecked) private var leafBelowUpper = false
  @exclusivity(unchecked) private var leafChecked: LeafNode?
  /// Gap index in `leaf`: entries before it are behind the cursor.
  @exclusivity(unchecked) private var index = 0
  /// Leaves stepped into since the last seek. Past ``scanLeaves`` the
  /// cursor is scanning, and leaves it has to read from the file are not
  /// added to the node cache: a long scan neither evicts the working set
  /// nor grows memory with the size of the range (scan resistance), unless
  /// ``keepsScannedLeaves`` asks for the cache's spare room. Leaves already
  /// cached are still used, and short range scans fill the cache.
  @exclusivity(unchecked) private var leavesStepped = 0
  /// Leaves read by this cursor's lookups (``visitValue(forKey:_:)``), in
  /// all. A long series of lookups through one cursor (the records of a
  /// large index or text lookup) is a scan in another order: past
  /// ``scanLeaves`` its leaves enter the cache as a scan's do.
  @exclusivity(unchecked) private var leavesLookedUp = 0
  static let scanLeaves = 16

  /// Branches below the root this cursor has resolved from disk, by block
  /// offset (direct-mapped, ``branchMemoSize`` slots; the branch memo). Point lookups in
  /// random order (the records of an index scan) leave the root for a
  /// different child almost every time; each such branch would cost a
  /// node-cache lookup, with its shard lock. A block at an offset never
  /// changes, so a remembered branch is the one the cache would give.
  /// Allocated at the first use: offsets (0 for an empty slot) and branches.
  @exclusivity(unchecked) private var memoOffsets: UnsafeMutablePointer<UInt64>?
  @exclusivity(unchecked) private var memoBranches: UnsafeMutablePointer<BranchNode?>?
  static let branchMemoSize = 16

  deinit {
    if let memoOffsets, let memoBranches {
      memoBranches.deinitialize(count: Self.branchMemoSize)
      memoBranches.deallocate()
      memoOffsets.deallocate()
    }
  }

  /// Whether the leaves a long scan (or a long series of lookups, see
  /// ``visitValue(forKey:_:)``) reads from the file may stay in the node
  /// cache where it has room to spare. They never evict anything, so
  /// the working set stays; memory grows up to the cache's size
  /// (``Options/cacheSize``) instead of staying where it was. Worth it for a
  /// scan that runs again over data that fits the cache: the next one skips
  /// reading, checking and decompressing those leaves. Off by default; the
  /// repository's record and index scans turn it on.
  public var keepsScannedLeaves = false

  init(tree: TreeRoot, context: TreeContext, range: KeyRange, isOpen: @escaping () -> Bool) throws {
    self.tree = tree
    self.ctx = context
    self.range = range
    self.isOpen = isOpen
    try seekToFirst()
  }

  private func checkOpen() throws {
    guard isOpen() else { throw EngineError(.closed, "the cursor's database or transaction is closed") }
  }

  // MARK: Positioning

  /// Moves before the first entry of the range.
  public func seekToFirst() throws {
    if let lower = range.lower { try descend(to: lower) } else { try descendToEdge(first: true) }
  }

  /// Moves after the last entry of the range.
  public func seekToLast() throws {
    if let upper = range.upper { try descend(to: upper) } else { try descendToEdge(first: false) }
  }

  /// Moves before the first entry whose key is >= `key` (clamped to the range).
  public func seek(to key: [UInt8]) throws {
    if let lower = range.lower, compareBytes(key, lower) < 0 { return try descend(to: lower) }
    if let upper = range.upper, compareBytes(key, upper) > 0 { return try descend(to: upper) }
    try descend(to: key)
  }

  /// Calls `body` with the value stored under `key` without copying it,
  /// and returns whether there is one; the cursor is left before the first
  /// entry >= `key`. A key outside the range is absent.
  ///
  /// The lookup starts from the cursor's own path: where the key's route
  /// from the root passes through the nodes the cursor already holds, they
  /// are not read again. Keys asked in ascending order (the records of an
  /// index or text lookup) often share a leaf, which is then searched
  /// without a descent.
  ///
  /// Lookups are scan resistant as a scan is: past the first few leaves
  /// they read (over the cursor's lifetime), the leaves a lookup reads from
  /// the file stay out of the node cache, or take only its spare room
  /// (``keepsScannedLeaves``). A query that looks up most of a large
  /// keyspace then neither evicts the working set nor spends its time
  /// evicting leaves it just read.
  public func visitValue(forKey key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void)
    throws -> Bool
  {
    if let lower = range.lower, lower.withUnsafeBytes({ compareBytes(key, $0) }) < 0 { return false }
    if let upper = range.upper, upper.withUnsafeBytes({ compareBytes(key, $0) }) >= 0 { return false }
    try descend(reusingPathTo: key)
    guard let l = leaf, index < l.count, l.withKey(at: index, { compareBytes($0, key) }) == 0 else { return false }
    try l.withValue(at: index, store: ctx.store, body)
    return true
  }

  /// Moves before the first entry >= `key`, taking from the current path
  /// every node the key's route shares with it.
  private func descend(reusingPathTo key: UnsafeRawBufferPointer) throws {
    try checkOpen()
    guard let current = leaf, let root = tree.root else { return try descend(to: Array(key)) }
    leavesStepped = 0
    // The path starts at the root (or the cursor is in a root leaf).
    var node: Node = path.first.map { .branch($0.branch) } ?? .leaf(current)
    if path.isEmpty, tree.height > 1 { node = try tree.rootNode(root, ctx) }
    var depth = 0
    var same = true
    while true {
      switch node {
      case .leaf(let l):
        if depth < path.count { path.removeSubrange(depth...) }
        leaf = l
        index = l.find(key).index
        return
      case .branch(let b):
        let i = b.childIndex(for: key)
        if same, depth < path.count, path[depth].branch === b, path[depth].index == i {
          depth += 1
          node = depth < path.count ? .branch(path[depth].branch) : .leaf(current)
          continue
        }
        same = false
        if depth < path.count {
          path[depth] = (b, i)
        } else {
          path.append((b, i))
        }
        depth += 1
        if b.level > 1 {
          node = try branch(b.children[i], level: b.level - 1)
        } else {
          leavesLookedUp += 1
          node = try ctx.resolve(b.children[i], level: 0, fill: fill(scanning: leavesLookedUp > Self.scanLeaves))
        }
      }
    }
  }

  /// The branch `ref` names, from the branch memo when this cursor resolved
  /// it before.
  private func branch(_ ref: NodeRef, level: Int) throws -> Node {
    guard case .disk(let disk) = ref else { return try ctx.resolve(ref, level: level) }
    let offset = disk.offset.rawValue
    // Blocks are at least a header apart: the low bits say little.
    let slot = Int(truncatingIfNeeded: (offset >> 6) ^ (offset >> 12)) & (Self.branchMemoSize - 1)
    let offsets: UnsafeMutablePointer<UInt64>
    let branches: UnsafeMutablePointer<BranchNode?>
    if let memoOffsets, let memoBranches {
      (offsets, branches) = (memoOffsets, memoBranches)
      if offsets[slot] == offset, let known = branches[slot], known.level == level { return .branch(known) }
    } else {
      offsets = .allocate(capacity: Self.branchMemoSize)
      offsets.initialize(repeating: 0, count: Self.branchMemoSize)
      branches = .allocate(capacity: Self.branchMemoSize)
      branches.initialize(repeating: nil, count: Self.branchMemoSize)
      (memoOffsets, memoBranches) = (offsets, branches)
    }
    let node = try ctx.resolve(ref, level: level)
    if case .branch(let b) = node {
      offsets[slot] = offset
      branches[slot] = b
    }
    return node
  }

  /// Moves before the entry that is `offset` entries past the start of the
  /// range (after the last one if there are fewer). Costs O(height), using
  /// the subtree counts of branch nodes.
  public func seek(toOffset offset: UInt64) throws {
    try checkOpen()
    let base = try range.lower.map { try tree.rank(of: $0, ctx) } ?? 0
    let end = try range.upper.map { try tree.rank(of: $0, ctx) } ?? tree.count
    let target = Swift.min(base.plusClamped(offset), Swift.max(base, end))
    try descend(toRank: target)
  }

  private func descend(to key: [UInt8]) throws {
    try checkOpen()
    path.removeAll(keepingCapacity: true)
    leavesStepped = 0
    leaf = nil
    index = 0
    guard let root = tree.root else { return }
    var node = try tree.rootNode(root, ctx)
    while true {
      switch node {
      case .leaf(let l):
        leaf = l
        index = l.find(key).index
        return
      case .branch(let b):
        let i = b.childIndex(for: key)
        path.append((b, i))
        node = try ctx.resolve(b.children[i], level: b.level - 1)
      }
    }
  }

  private func descendToEdge(first: Bool) throws {
    try checkOpen()
    path.removeAll(keepingCapacity: true)
    leavesStepped = 0
    leaf = nil
    index = 0
    guard let root = tree.root else { return }
    try descendEdge(from: try tree.rootNode(root, ctx), first: first)
  }

  private func descendEdge(from start: Node, first: Bool) throws {
    var node = start
    while true {
      switch node {
      case .leaf(let l):
        leaf = l
        index = first ? 0 : l.count
        return
      case .branch(let b):
        let i = first ? 0 : b.childCount - 1
        path.append((b, i))
        node = try load(b.children[i], level: b.level - 1)
      }
    }
  }

  /// Resolves a child on the way to the next leaf: once the cursor is
  /// scanning, a leaf read from the file stays out of the cache, or takes
  /// only spare room (``keepsScannedLeaves``).
  private func load(_ ref: NodeRef, level: Int) throws -> Node {
    return try ctx.resolve(ref, level: level, fill: fill(scanning: level == 0 && leavesStepped >= Self.scanLeaves))
  }

  /// How a leaf read from the file enters the cache: as a point read's,
  /// or, once the cursor is scanning, only into spare room
  /// (``keepsScannedLeaves``) or not at all.
  private func fill(scanning: Bool) -> CacheFill { !scanning ? .always : keepsScannedLeaves ? .ifRoom : .never }

  private func descend(toRank rank: UInt64) throws {
    path.removeAll(keepingCapacity: true)
    leavesStepped = 0
    leaf = nil
    index = 0
    guard let root = tree.root else { return }
    guard rank < tree.count else { return try descendToEdge(first: false) }
    var remaining = rank
    var node = try tree.rootNode(root, ctx)
    while true {
      switch node {
      case .leaf(let l):
        leaf = l
        index = Int(Swift.min(remaining, UInt64(l.count)))
        return
      case .branch(let b):
        var i = 0
        while i < b.childCount - 1 && remaining >= b.counts[i] {
          remaining -= b.counts[i]
          i += 1
        }
        path.append((b, i))
        node = try ctx.resolve(b.children[i], level: b.level - 1)
      }
    }
  }

  // MARK: Stepping

  /// Whether the key at `i` of `l` is at or past the upper bound.
  @inline(__always)
  private func pastUpper(_ l: LeafNode, _ i: Int) -> Bool {
    guard let upper = range.upper else { return false }
    if leafChecked !== l {
      leafChecked = l
      leafBelowUpper = l.withKey(at: l.count - 1) { k in upper.withUnsafeBytes { compareBytes(k, $0) } } < 0
    }
    if leafBelowUpper { return false }
    return l.withKey(at: i) { k in upper.withUnsafeBytes { compareBytes(k, $0) } } >= 0
  }

  /// The entry after the cursor, moving past it; nil at the end of the range.
  public func next() throws -> Entry? {
    try checkOpen()
    while let l = leaf {
      if index < l.count {
        if pastUpper(l, index) { return nil }
        let key = l.key(at: index)
        let value = try l.value(at: index, store: ctx.store)
        index += 1
        return Entry(key: key, value: value)
      }
      guard try stepLeaf(forward: true) else { return nil }
    }
    return nil
  }

  /// The entry before the cursor, moving back over it; nil at the start of the range.
  public func previous() throws -> Entry? {
    try checkOpen()
    while let l = leaf {
      if index > 0 {
        let key = l.key(at: index - 1)
        if let lower = range.lower, compareBytes(key, lower) < 0 { return nil }
        let value = try l.value(at: index - 1, store: ctx.store)
        index -= 1
        return Entry(key: key, value: value)
      }
      guard try stepLeaf(forward: false) else { return nil }
    }
    return nil
  }

  /// Calls `body` with the key and value of the entry after the cursor,
  /// without copying them, and moves past it; returns what `body` returns,
  /// or nil at the end of the range.
  ///
  /// The buffers are valid only inside `body`. This is the fast way to scan:
  /// no allocation per entry.
  @inlinable
  public func next<R>(_ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> R) throws
    -> R?
  {
    // The generic part is inlined into the caller, where R is known: an
    // unspecialized generic would ask the runtime for Optional<R>'s
    // metadata on every call.
    var result: R?
    try visitNext { key, value in result = try body(key, value) }
    return result
  }

  /// ``next(_:)`` without generics. Returns false at the end of the range.
  @usableFromInline
  @discardableResult
  func visitNext(_ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
    try checkOpen()
    while let l = leaf {
      if index < l.count {
        let i = index
        if pastUpper(l, i) { return false }
        index += 1
        try l.withKey(at: i) { k in try l.withValue(at: i, store: ctx.store) { v in try body(k, v) } }
        return true
      }
      guard try stepLeaf(forward: true) else { return false }
    }
    return false
  }

  /// Calls `body` with the key and value of each entry after the cursor, in
  /// order, moving past each, until `body` returns false or the range
  /// ends. The same as calling ``next(_:)`` until it returns false or nil,
  /// without its cost per entry: each leaf's bytes are held once for all
  /// of its entries. The buffers are valid only inside `body`, which must
  /// not move this cursor.
  public func forEach(_ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool) throws {
    try visitEach(forward: true, body)
  }

  /// ``forEach(_:)`` backwards: each entry before the cursor, last first,
  /// as ``previous()`` would return them, without copying them.
  public func forEachBackward(
    _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
  ) throws {
    try visitEach(forward: false, body)
  }

  private func visitEach(
    forward: Bool, _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
  ) throws {
    try checkOpen()
    let lower = range.lower
    while let l = leaf {
      // The position is kept in a local while the leaf is visited (a
      // stored property written per entry would be checked for exclusive
      // access each time) and stored back however the visit ends.
      var stopped = false
      // Backwards, a leaf whose first key is at or above the lower bound
      // is inside the range throughout: its entries are not compared.
      let lowerInLeaf =
        !forward && l.count > 0
        && lower.map { bound in l.withKey(at: 0) { k in bound.withUnsafeBytes { compareBytes(k, $0) } } < 0 } ?? false
      do {
        var at = index
        defer { index = at }
        try l.visit(from: forward ? at : at - 1, step: forward ? 1 : -1, store: ctx.store) { i, k, v in
          let outside =
            forward
            ? pastUpper(l, i)
            : lowerInLeaf && lower.map { bound in bound.withUnsafeBytes { compareBytes(k, $0) } < 0 } ?? false
          if outside {
            stopped = true
            return false
          }
          at = forward ? i + 1 : i
          stopped = try !body(k, v)
          return !stopped
        }
      }
      if stopped { return }
      guard try stepLeaf(forward: forward) else { return }
    }
  }

  /// Up to `maxCount` entries after the cursor, moving past them. An empty
  /// array means the end of the range.
  ///
  /// Each entry is two new arrays. ``next(batch:into:)`` reads into one
  /// reusable buffer instead, and ``forEach(_:)`` copies nothing.
  public func next(batch maxCount: Int) throws -> [Entry] {
    precondition(maxCount > 0, "batch size must be positive")
    var batch: [Entry] = []
    batch.reserveCapacity(Swift.min(maxCount, 1024))
    try visitEach(forward: true) { k, v in
      batch.append(Entry(key: Array(k), value: Array(v)))
      return batch.count < maxCount
    }
    return batch
  }

  /// Replaces what `batch` holds with up to `maxCount` entries after the
  /// cursor, moving past them, and returns how many; 0 means the end of the
  /// range.
  ///
  /// The entries' bytes are copied into the batch's own buffer, which it
  /// keeps from one call to the next: once it has grown to a batch's size,
  /// reading allocates nothing, where ``next(batch:)`` allocates two arrays
  /// per entry. The batch stays valid after the cursor moves on.
  @discardableResult
  public func next(batch maxCount: Int, into batch: inout EntryBatch) throws -> Int {
    precondition(maxCount > 0, "batch size must be positive")
    batch.removeAll()
    try visitEach(forward: true) { k, v in
      batch.append(key: k, value: v)
      return batch.count < maxCount
    }
    return batch.count
  }

  /// The key after the cursor without moving, or nil at the end.
  public func peekKey() throws -> [UInt8]? {
    guard let entry = try next() else { return nil }
    _ = try previous()
    return entry.key
  }

  /// Moves to the neighbouring leaf. Returns false at the tree's edge.
  private func stepLeaf(forward: Bool) throws -> Bool {
    // Climb until a branch has a neighbouring child in that direction.
    while let (b, i) = path.last {
      let j = forward ? i + 1 : i - 1
      if j >= 0 && j < b.childCount {
        path[path.count - 1].index = j
        leavesStepped += 1
        let child = try load(b.children[j], level: b.level - 1)
        try descendEdge(from: child, first: forward)
        return true
      }
      path.removeLast()
    }
    // At the edge: stay where we were (end or start of the last leaf).
    path.removeAll()
    try descendToEdge(first: !forward)
    return false
  }
}

extension TreeRoot {
  /// How many keys are < `key`. O(height × fanout), no leaf entries visited
  /// except in one leaf.
  func rank(of key: [UInt8], _ ctx: TreeContext) throws -> UInt64 {
    guard let root else { return 0 }
    var rank: UInt64 = 0
    var node = try ctx.resolve(root, level: height - 1)
    while true {
      switch node {
      case .leaf(let l):
        return rank.plusClamped(UInt64(l.find(key).index))
      case .branch(let b):
        let i = b.childIndex(for: key)
        for c in 0..<i { rank = rank.plusClamped(b.counts[c]) }
        node = try ctx.resolve(b.children[i], level: b.level - 1)
      }
    }
  }

  /// How many keys lie in `range`.
  func count(in range: KeyRange, _ ctx: TreeContext) throws -> UInt64 {
    if range.isEmpty { return 0 }
    let hi = try range.upper.map { try rank(of: $0, ctx) } ?? count
    let lo = try range.lower.map { try rank(of: $0, ctx) } ?? 0
    return hi > lo ? hi - lo : 0
  }
}
