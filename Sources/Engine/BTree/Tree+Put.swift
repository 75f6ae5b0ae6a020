/// Insertion with copy-on-write and splits.
extension TreeRoot {
  /// Stores `value` under `key`. Returns true if the key was new.
  ///
  /// `ifAbsent`: a key already present keeps its value and the tree is not
  /// touched (no node is copied); returns false. An insert that must not
  /// replace thus costs one descent, not a lookup and then a put.
  @discardableResult
  mutating func put(_ key: [UInt8], _ value: LeafValue, _ ctx: TreeContext, ifAbsent: Bool = false) throws -> Bool {
    guard let root else {
      let leaf = LeafNode(owner: ctx.owner)
      leaf.insert(key, value, at: 0)
      self.root = .memory(.leaf(leaf))
      count = 1
      height = 1
      return true
    }
    // Only a replacing put can gain, and only for a key within the leaf's
    // first and last: new keys (an insert, an append) pay two comparisons
    // at most, not a search.
    if !ifAbsent, let leaf = lastLeaf, leaf.owner == ctx.owner, key.withUnsafeBytes({ leaf.spans($0) }) {
      let (i, found) = leaf.find(key)
      // Replacing a value changes no count and no separator above.
      if found && leaf.encodedSize(replacing: i, with: value) <= ctx.nodeSize {
        leaf.setValue(value, at: i)
        return false
      }
    }
    let node = try ctx.resolve(root, level: height - 1)
    let result = try Self.put(key, value, into: node, rightmost: true, ifAbsent: ifAbsent, ctx, landed: &lastLeaf)
    guard result.changed else { return false }
    if let (separator, right) = result.split {
      let branch = BranchNode(
        owner: ctx.owner, level: height, keys: PackedKeys([separator]),
        children: [.memory(result.node), .memory(right)],
        counts: [result.node.keyCount, right.keyCount])
      self.root = .memory(.branch(branch))
      height += 1
    } else {
      self.root = .memory(result.node)
    }
    if result.inserted { count = count.plusClamped(1) }
    return result.inserted
  }

  /// `rightmost`: `node` is the last node of its level, so a key after all
  /// of its keys is after every key in the tree.
  ///
  /// A full node splits in halves, except when a key is appended after
  /// every key of the tree (a sorted load, ids that only grow): then it
  /// splits right there, the full node stays full and the new one takes the
  /// keys that follow. Halves would leave every node of a sorted load half
  /// empty: twice the nodes to split, write and read.
  private static func put(
    _ key: [UInt8], _ value: LeafValue, into node: Node, rightmost: Bool, ifAbsent: Bool, _ ctx: TreeContext,
    landed: inout LeafNode?
  ) throws -> (node: Node, split: ([UInt8], Node)?, inserted: Bool, changed: Bool) {
    switch node {
    case .leaf(let leaf):
      // Found in the leaf as it is: a writable copy has the same keys. At
      // the right edge of the tree, a key after all others (ids that only
      // grow) is placed with one comparison.
      let (i, found) =
        rightmost && key.withUnsafeBytes({ leaf.precedes($0) }) ? (leaf.count, false) : leaf.find(key)
      if found && ifAbsent { return (node, nil, false, false) }
      let w = ctx.writable(leaf)
      if found { w.setValue(value, at: i) } else { w.insert(key, value, at: i) }
      if w.encodedSize > ctx.nodeSize && w.count > 1 {
        let appended = rightmost && !found && i == w.count - 1
        let right = w.splitOff(from: appended ? i : w.splitIndex(), owner: ctx.owner)
        let separator = shortestSeparator(after: w.key(at: w.count - 1), upTo: right.key(at: 0))
        landed = i < w.count ? w : right
        return (.leaf(w), (separator, .leaf(right)), !found, true)
      }
      landed = w
      return (.leaf(w), nil, !found, true)

    case .branch(let branch):
      let i =
        rightmost && key.withUnsafeBytes({ branch.keys.lastIsAtMost($0) })
        ? branch.childCount - 1 : branch.childIndex(for: key)
      let child = try ctx.resolve(branch.children[i], level: branch.level - 1)
      let last = rightmost && i == branch.childCount - 1
      let result = try put(key, value, into: child, rightmost: last, ifAbsent: ifAbsent, ctx, landed: &landed)
      guard result.changed else { return (node, nil, false, false) }
      let w = ctx.writable(branch)
      if let (separator, right) = result.split {
        w.setChild(i, .memory(result.node), count: result.node.keyCount)
        w.insertChild(after: i, separator: separator, .memory(right), count: right.keyCount)
      } else {
        w.setChild(i, .memory(result.node), count: w.counts[i].plusClamped(result.inserted ? 1 : 0))
      }
      if w.encodedSize > ctx.branchSize && w.childCount > 2 {
        // The new last child alone, after a split at the end below.
        let appended = last && result.split != nil
        let (separator, right) = w.splitOff(from: appended ? w.childCount - 1 : w.splitIndex(), owner: ctx.owner)
        return (.branch(w), (separator, .branch(right)), result.inserted, true)
      }
      return (.branch(w), nil, result.inserted, true)
    }
  }
}
