/// The trees of every keyspace as one transaction changes them, and what it
/// changed: the part of a write transaction that replaying a logged one —
/// at recovery, or another process's commit — needs too. The operations
/// are those of FORMAT.md §3.3, with their rules for missing keyspaces.
///
/// It validates nothing: a write transaction checks its arguments first, and
/// a logged operation was checked when its record was decoded.
struct TreeEditor {
  private(set) var trees: [String: TreeRoot]
  /// Where the two keyspaces written last sit in `trees`, so that a write
  /// finds its tree by comparing names (the same string, usually: the
  /// caller's own) instead of hashing one. A repository's writes alternate
  /// between its records and an index. Changes made through
  /// `trees.values` keep every slot where it is; adding or removing a
  /// keyspace moves them, and forgets these (``setTree(_:_:)``).
  private var recent: (name: String, slot: Dictionary<String, TreeRoot>.Index)?
  private var previous: (name: String, slot: Dictionary<String, TreeRoot>.Index)?
  /// The trees as the transaction began, for telling what a key was before
  /// a range delete of this transaction hid it.
  let base: [String: TreeRoot]
  var context: TreeContext
  /// What changed so far; nil when not tracking.
  var changes: WriteSet?

  init(trees: [String: TreeRoot], context: TreeContext, trackingChanges: Bool) {
    self.trees = trees
    self.base = trees
    self.context = context
    self.changes = trackingChanges ? WriteSet() : nil
  }

  /// Adds, replaces or (nil) removes the tree of `keyspace`: the only way
  /// keyspaces come and go, since it moves the slots.
  private mutating func setTree(_ keyspace: String, _ tree: TreeRoot?) {
    trees[keyspace] = tree
    (recent, previous) = (nil, nil)
  }

  /// The slot of `keyspace`'s tree in `trees`, nil if it has none.
  private mutating func slot(of keyspace: String) -> Dictionary<String, TreeRoot>.Index? {
    // Lengths first: a record and its index entries alternate between two
    // keyspaces, and `==` on two different strings compares them through the
    // standard library's general path.
    @inline(__always) func same(_ a: String) -> Bool { a.utf8.count == keyspace.utf8.count && a == keyspace }
    if let r = recent, same(r.name) { return r.slot }
    if let p = previous, same(p.name) {
      (recent, previous) = (p, recent)
      return p.slot
    }
    guard let slot = trees.index(forKey: keyspace) else { return nil }
    (recent, previous) = ((keyspace, slot), recent)
    return slot
  }

  /// Whether `key` was in `keyspace` when the transaction began; nil if
  /// reading it failed.
  private func existedAtStart(_ key: [UInt8], in keyspace: String) -> Bool? {
    base[keyspace].map { $0.presence(of: key, context) } ?? false
  }

  private mutating func noteCreated(_ keyspace: String) {
    if !(changes!.keyspaces[keyspace]?.dropped ?? false) {
      changes!.keyspaces[keyspace, default: KeyspaceChanges()].created = true
    }
  }

  /// Stores `value` under `key`, creating the keyspace if needed. Returns
  /// whether the key was new.
  ///
  /// `ifAbsent`: a present key is left as it is (and nothing is noted).
  @discardableResult
  mutating func put(_ key: [UInt8], _ value: [UInt8], in keyspace: String, ifAbsent: Bool = false) throws -> Bool {
    let ctx = context
    let inserted: Bool
    if let slot = slot(of: keyspace) {
      inserted = try trees.values[slot].put(key, ctx.leafValue(value), ctx, ifAbsent: ifAbsent)
    } else {
      if changes != nil { noteCreated(keyspace) }
      var tree = TreeRoot.empty
      defer { setTree(keyspace, tree) }
      inserted = try tree.put(key, ctx.leafValue(value), ctx, ifAbsent: ifAbsent)
    }
    if ifAbsent && !inserted { return false }
    if changes != nil {
      let existed = { [base] in base[keyspace].map { $0.presence(of: key, ctx) } ?? false }
      changes!.keyspaces[keyspace, default: KeyspaceChanges()].put(key, inserted: inserted, before: existed)
    }
    return inserted
  }

  /// Removes `key`; a missing keyspace or key is left alone. Returns whether it was there.
  @discardableResult
  mutating func delete(_ key: [UInt8], in keyspace: String) throws -> Bool {
    guard let slot = slot(of: keyspace) else { return false }
    let found = try trees.values[slot].delete(key, context)
    if found && changes != nil { changes!.keyspaces[keyspace, default: KeyspaceChanges()].delete(key) }
    return found
  }

  /// Removes every key of `range`; a missing keyspace or an empty range is
  /// left alone. Returns how many keys went.
  @discardableResult
  mutating func deleteRange(_ range: KeyRange, in keyspace: String) throws -> UInt64 {
    guard !range.isEmpty, let slot = slot(of: keyspace) else { return 0 }
    let removed = try trees.values[slot].deleteRange(from: range.lower, to: range.upper, context)
    if removed > 0 && changes != nil { changes!.keyspaces[keyspace, default: KeyspaceChanges()].deleteRange(range) }
    return removed
  }

  /// Creates an empty keyspace; one that exists keeps its keys. Returns whether it was created.
  @discardableResult
  mutating func create(_ keyspace: String) -> Bool {
    guard trees[keyspace] == nil else { return false }
    setTree(keyspace, .empty)
    if changes != nil { noteCreated(keyspace) }
    return true
  }

  /// Drops a keyspace and its keys. Returns whether it existed.
  @discardableResult
  mutating func drop(_ keyspace: String) -> Bool {
    guard trees[keyspace] != nil else { return false }
    setTree(keyspace, nil)
    if changes != nil { changes!.keyspaces[keyspace, default: KeyspaceChanges()].drop() }
    return true
  }

  /// Applies a logged operation of the record at `position` of the WAL at
  /// `path`.
  ///
  /// - Throws: ``EngineError/Code/corrupted`` (F-15) when it would make more
  ///   keyspaces than a store may hold; what the trees throw.
  mutating func apply(_ op: WALOperation, position: UInt64, path: String) throws {
    func checkLimit(_ name: String) throws {
      guard trees.count < Limits.maxKeyspaces || trees[name] != nil else {
        throw EngineError(
          .corrupted, "a WAL record makes more than \(Limits.maxKeyspaces) keyspaces", path: path, offset: position,
          rule: .f15)
      }
    }
    switch op {
    case .put(let ks, let key, let value):
      try checkLimit(ks)
      try put(key, value, in: ks)
    case .delete(let ks, let key): try delete(key, in: ks)
    case .deleteRange(let ks, let start, let end): try deleteRange(KeyRange(from: start, to: end), in: ks)
    case .createKeyspace(let ks):
      try checkLimit(ks)
      create(ks)
    case .dropKeyspace(let ks): drop(ks)
    }
  }
}
