/// A branch node: children separated by keys, with each child's key count.
///
/// Child `i` holds the keys `k` with `keys[i-1] <= k < keys[i]` (the missing
/// ends are the branch's own bounds). `counts[i]` is the number of keys in
/// child `i`'s subtree, which makes counting a range and skipping to an
/// offset cost O(height).
final class BranchNode: @unchecked Sendable {
  let owner: UInt64
  /// Height above the leaves: children of a level-1 branch are leaves.
  let level: Int
  // Not checked at run time; see LeafNode.
  @exclusivity(unchecked) private(set) var keys: PackedKeys
  @exclusivity(unchecked) private(set) var children: [NodeRef]
  @exclusivity(unchecked) private(set) var counts: [UInt64]
  private(set) var encodedSize: Int

  init(owner: UInt64, level: Int, keys: PackedKeys, children: [NodeRef], counts: [UInt64]) {
    precondition(children.count == counts.count && (children.isEmpty || keys.count == children.count - 1))
    self.owner = owner
    self.level = level
    self.keys = keys
    self.children = children
    self.counts = counts
    self.encodedSize =
      BranchLayout.header + children.count * BranchLayout.childSize
      + keys.count * BranchLayout.keyHeader + keys.bytes.count
  }

  var childCount: Int { children.count }
  var totalCount: UInt64 { counts.reduce(0) { $0.plusClamped($1) } }

  func copy(owner: UInt64) -> BranchNode {
    BranchNode(owner: owner, level: level, keys: keys, children: children, counts: counts)
  }

  /// The child whose range holds `key`: the number of separators <= `key`.
  @inline(__always)
  func childIndex(for key: UnsafeRawBufferPointer) -> Int { keys.rank(of: key, inclusive: true) }

  func childIndex(for key: [UInt8]) -> Int { key.withUnsafeBytes { childIndex(for: $0) } }

  /// The number of separators < `key`: the last child that can hold keys below `key`.
  func lastChildBelow(_ key: [UInt8]) -> Int {
    key.withUnsafeBytes { keys.rank(of: $0, inclusive: false) }
  }

  /// Lower bound of child `i`, given the branch's own lower bound.
  func lowerBound(of i: Int, within lower: [UInt8]?) -> [UInt8]? { i == 0 ? lower : keys.key(i - 1) }
  /// Upper bound (exclusive) of child `i`, given the branch's own upper bound.
  func upperBound(of i: Int, within upper: [UInt8]?) -> [UInt8]? {
    i == children.count - 1 ? upper : keys.key(i)
  }

  // MARK: Writing (owner only)

  func setChild(_ i: Int, _ ref: NodeRef, count: UInt64) {
    children[i] = ref
    counts[i] = count
  }

  /// Inserts `child` right after child `i`, separated from it by `separator`.
  func insertChild(after i: Int, separator: [UInt8], _ child: NodeRef, count: UInt64) {
    keys.insert(separator, at: i)
    children.insert(child, at: i + 1)
    counts.insert(count, at: i + 1)
    encodedSize += BranchLayout.childSize + BranchLayout.keyHeader + separator.count
  }

  /// Removes children `range` and the separators between them and their neighbours.
  func removeChildren(_ range: Range<Int>) {
    guard !range.isEmpty else { return }
    let keyRange: Range<Int>
    if range.count == children.count {
      keyRange = 0..<keys.count
    } else if range.lowerBound > 0 {
      keyRange = (range.lowerBound - 1)..<(range.upperBound - 1)
    } else {
      keyRange = 0..<range.upperBound
    }
    encodedSize -= range.count * BranchLayout.childSize
    for k in keyRange { encodedSize -= BranchLayout.keyHeader + keys.length(k) }
    keys.remove(keyRange)
    children.removeSubrange(range)
    counts.removeSubrange(range)
  }

  /// Replaces separator `i` (between children `i` and `i+1`).
  func setKey(_ i: Int, _ key: [UInt8]) {
    encodedSize += key.count - keys.length(i)
    keys.replace(i, with: key)
  }

  /// Moves children `[from...]` into a new branch; the separator before them
  /// moves up and is returned with it.
  func splitOff(from index: Int, owner: UInt64) -> (separator: [UInt8], right: BranchNode) {
    let separator = keys.key(index - 1)
    let right = BranchNode(
      owner: owner, level: level, keys: keys.slice(index..<keys.count), children: Array(children[index...]),
      counts: Array(counts[index...]))
    removeChildren(index..<children.count)
    return (separator, right)
  }

  /// Appends the children of `other` (all greater), separated by `separator`.
  func append(_ other: BranchNode, separator: [UInt8]) {
    keys.append(separator)
    keys.append(contentsOf: other.keys)
    children.append(contentsOf: other.children)
    counts.append(contentsOf: other.counts)
    encodedSize += other.encodedSize - BranchLayout.header + BranchLayout.keyHeader + separator.count
  }

  /// The child index at which to split so both halves hold about half the encoding.
  func splitIndex() -> Int {
    let half = encodedSize / 2
    var acc = BranchLayout.header + BranchLayout.childSize
    for i in 1..<children.count {
      acc += BranchLayout.childSize + BranchLayout.keyHeader + keys.length(i - 1)
      if acc >= half { return Swift.min(i, children.count - 1) }
    }
    return children.count - 1
  }
}
