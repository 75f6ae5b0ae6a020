/// Deletion of one key and of key ranges, with rebalancing along the path.
///
/// A range delete drops every child that lies wholly inside the range
/// without reading it, and recurses only into the (at most two) children the
/// range's ends fall in. Its cost is O(height) node reads and writes whatever
/// the number of keys removed; the dropped subtrees' blocks become garbage
/// for compaction. Snapshots taken before keep the old root and still see
/// every key.
extension TreeRoot {
  /// Removes `key`. Returns true if it was present.
  @discardableResult
  mutating func delete(_ key: [UInt8], _ ctx: TreeContext) throws -> Bool {
    lastLeaf = nil
    guard let root else { return false }
    let node = try ctx.resolve(root, level: height - 1)
    guard let result = try Self.delete(key, from: node, ctx) else { return false }
    count = count.minusClamped(1)
    try replaceRoot(with: result)
    try collapseRoot(ctx)
    return true
  }

  /// Removes every key `k` with `start <= k < end` (a nil bound is open).
  /// Returns how many keys were removed.
  @discardableResult
  mutating func deleteRange(from start: [UInt8]?, to end: [UInt8]?, _ ctx: TreeContext) throws -> UInt64 {
    lastLeaf = nil
    guard let root else { return 0 }
    if let start, let end, compareBytes(start, end) >= 0 { return 0 }
    if start == nil && end == nil {
      let removed = count
      self = .empty
      return removed
    }
    let node = try ctx.resolve(root, level: height - 1)
    guard let result = try Self.deleteRange(in: node, lower: nil, upper: nil, start: start, end: end, ctx) else {
      return 0
    }
    count = count.minusClamped(result.removed)
    try replaceRoot(with: result.node)
    try collapseRoot(ctx)
    return result.removed
  }

  private mutating func replaceRoot(with node: Node?) throws {
    if let node {
      root = .memory(node)
    } else {
      self = .empty
    }
  }

  // MARK: Single key

  /// Returns nil when the key is absent (nothing copied), else the new node
  /// (nil when it became empty).
  private static func delete(_ key: [UInt8], from node: Node, _ ctx: TreeContext) throws -> Node?? {
    switch node {
    case .leaf(let leaf):
      let (i, found) = leaf.find(key)
      guard found else { return .none }
      let w = ctx.writable(leaf)
      w.remove(i..<(i + 1))
      return .some(w.isEmpty ? nil : .leaf(w))

    case .branch(let branch):
      let i = branch.childIndex(for: key)
      let child = try ctx.resolve(branch.children[i], level: branch.level - 1)
      guard let result = try delete(key, from: child, ctx) else { return .none }
      let w = ctx.writable(branch)
      if let newChild = result {
        w.setChild(i, .memory(newChild), count: w.counts[i].minusClamped(1))
        try rebalance(w, child: i, ctx)
      } else {
        w.removeChildren(i..<(i + 1))
      }
      return .some(w.childCount == 0 ? nil : .branch(w))
    }
  }

  // MARK: Ranges

  /// Removes `[start, end)` from `node`, whose keys lie in `[lower, upper)`.
  /// Returns nil when nothing in the range was present.
  private static func deleteRange(
    in node: Node, lower: [UInt8]?, upper: [UInt8]?, start: [UInt8]?, end: [UInt8]?, _ ctx: TreeContext
  ) throws -> (node: Node?, removed: UInt64)? {
    switch node {
    case .leaf(let leaf):
      let i = start.map { leaf.find($0).index } ?? 0
      let j = end.map { leaf.find($0).index } ?? leaf.count
      guard i < j else { return nil }
      let w = ctx.writable(leaf)
      w.remove(i..<j)
      return (w.isEmpty ? nil : .leaf(w), UInt64(j - i))

    case .branch(let branch):
      let first = start.map { branch.childIndex(for: $0) } ?? 0
      let last = end.map { branch.lastChildBelow($0) } ?? (branch.childCount - 1)
      guard first <= last else { return nil }

      /// The outcome for one boundary child: dropped whole, replaced, or untouched.
      func visit(_ c: Int) throws -> (dropped: Bool, node: Node?, removed: UInt64)? {
        let lo = branch.lowerBound(of: c, within: lower)
        let hi = branch.upperBound(of: c, within: upper)
        let coversStart = start == nil || (lo != nil && compareBytes(lo!, start!) >= 0)
        let coversEnd = end == nil || (hi != nil && compareBytes(hi!, end!) <= 0)
        if coversStart && coversEnd {
          // The whole child lies inside the range: drop it unread.
          return (true, nil, branch.counts[c])
        }
        let child = try ctx.resolve(branch.children[c], level: branch.level - 1)
        guard let r = try deleteRange(in: child, lower: lo, upper: hi, start: start, end: end, ctx) else { return nil }
        return (r.node == nil, r.node, r.removed)
      }

      let firstResult = try visit(first)
      if first == last {
        guard let r = firstResult else { return nil }
        let w = ctx.writable(branch)
        if let n = r.node {
          w.setChild(first, .memory(n), count: w.counts[first].minusClamped(r.removed))
          try rebalance(w, child: first, ctx)
        } else {
          w.removeChildren(first..<(first + 1))
        }
        return (w.childCount == 0 ? nil : .branch(w), r.removed)
      }

      let lastResult = try visit(last)
      if firstResult == nil && lastResult == nil && last == first + 1 { return nil }
      let w = ctx.writable(branch)
      var removed: UInt64 = 0
      for c in (first + 1)..<last { removed = removed.plusClamped(w.counts[c]) }
      let firstDropped = firstResult?.dropped ?? false
      let lastDropped = lastResult?.dropped ?? false
      if let r = lastResult {
        removed = removed.plusClamped(r.removed)
        if let n = r.node { w.setChild(last, .memory(n), count: w.counts[last].minusClamped(r.removed)) }
      }
      if let r = firstResult {
        removed = removed.plusClamped(r.removed)
        if let n = r.node { w.setChild(first, .memory(n), count: w.counts[first].minusClamped(r.removed)) }
      }
      // The middle children and any dropped boundary child form one run.
      let run = (firstDropped ? first : first + 1)..<(lastDropped ? last + 1 : last)
      w.removeChildren(run)
      // The survivors are now neighbours, the first of them at `first`.
      if !firstDropped && !lastDropped {
        try rebalancePair(w, first, ctx)
      } else if !firstDropped || !lastDropped {
        try rebalance(w, child: first, ctx)
      }
      return (w.childCount == 0 ? nil : .branch(w), removed)
    }
  }

  // MARK: Rebalancing

  /// Below this many encoded bytes a node merges with a neighbour.
  private static func isSmall(_ node: Node, _ ctx: TreeContext) -> Bool {
    node.encodedSize < ctx.limit(node) / 4
  }

  /// If child `i` of `w` is small, merges it with a neighbour.
  private static func rebalance(_ w: BranchNode, child i: Int, _ ctx: TreeContext) throws {
    guard w.childCount > 1, i < w.childCount else { return }
    let node = try ctx.resolve(w.children[i], level: w.level - 1)
    guard isSmall(node, ctx) else { return }
    try merge(w, i < w.childCount - 1 ? i : i - 1, ctx)
  }

  /// Children `a` and `a+1` both survived a range delete: merge if either is small.
  private static func rebalancePair(_ w: BranchNode, _ a: Int, _ ctx: TreeContext) throws {
    let left = try ctx.resolve(w.children[a], level: w.level - 1)
    let right = try ctx.resolve(w.children[a + 1], level: w.level - 1)
    if isSmall(left, ctx) || isSmall(right, ctx) { try merge(w, a, ctx) }
  }

  /// Merges children `a` and `a+1` of `w`; if the result is too big, splits
  /// it again evenly (redistribution).
  private static func merge(_ w: BranchNode, _ a: Int, _ ctx: TreeContext) throws {
    let left = try ctx.resolve(w.children[a], level: w.level - 1)
    let right = try ctx.resolve(w.children[a + 1], level: w.level - 1)
    switch (left, right) {
    case (.leaf(let l), .leaf(let r)):
      let m = ctx.writable(l)
      m.appendEntries(of: r, range: 0..<r.count)
      if m.encodedSize > ctx.nodeSize && m.count > 1 {
        let newRight = m.splitOff(from: m.splitIndex(), owner: ctx.owner)
        w.setChild(a, .memory(.leaf(m)), count: UInt64(m.count))
        w.setChild(a + 1, .memory(.leaf(newRight)), count: UInt64(newRight.count))
        w.setKey(a, shortestSeparator(after: m.key(at: m.count - 1), upTo: newRight.key(at: 0)))
      } else {
        w.setChild(a, .memory(.leaf(m)), count: UInt64(m.count))
        w.removeChildren((a + 1)..<(a + 2))
      }
    case (.branch(let l), .branch(let r)):
      let m = ctx.writable(l)
      m.append(r, separator: w.keys.key(a))
      if m.encodedSize > ctx.branchSize && m.childCount > 2 {
        let (separator, newRight) = m.splitOff(from: m.splitIndex(), owner: ctx.owner)
        w.setChild(a, .memory(.branch(m)), count: m.totalCount)
        w.setChild(a + 1, .memory(.branch(newRight)), count: newRight.totalCount)
        w.setKey(a, separator)
      } else {
        w.setChild(a, .memory(.branch(m)), count: m.totalCount)
        w.removeChildren((a + 1)..<(a + 2))
      }
    default:
      throw EngineError(.corrupted, "siblings at level \(w.level - 1) are of different kinds", path: ctx.store.path)
    }
  }
}
