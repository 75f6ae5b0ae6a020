/// What one commit (or a run of coalesced commits) changed, per keyspace:
/// keys, and ranges for range deletes. Built from the operations as the
/// transaction runs, so reporting it never reads data back.
///
/// The changes are net: a key inserted and deleted by the same transaction
/// does not appear, and a key written twice appears once. Applying a write
/// set to the state before it gives the state after it, in this order:
/// remove every key in ``KeyspaceChanges/deletedRanges`` (every key of a
/// ``KeyspaceChanges/dropped`` keyspace), remove ``KeyspaceChanges/deleted``,
/// then store ``KeyspaceChanges/inserted`` and ``KeyspaceChanges/updated``.
public struct WriteSet: Sendable {
  /// The changed keyspaces, by name.
  public internal(set) var keyspaces: [String: KeyspaceChanges]
  /// False when the changes are not known, so any keyspace may have
  /// changed: the commit's transaction began before the first subscriber
  /// subscribed, so nothing recorded its operations. Refetch what you show.
  public internal(set) var isComplete: Bool

  init(keyspaces: [String: KeyspaceChanges] = [:], isComplete: Bool = true) {
    self.keyspaces = keyspaces
    self.isComplete = isComplete
  }

  /// Whether `keyspace` may have changed.
  public func mayHaveChanged(_ keyspace: String) -> Bool {
    !isComplete || keyspaces[keyspace] != nil
  }

  /// The most keys one keyspace's changes keep; past it they keep only that
  /// the keyspace changed (``KeyspaceChanges/isComplete`` is false), so a
  /// huge transaction does not hold a second copy of its keys in memory.
  public static let keyLimit = 1 << 18

  /// Folds `next`, which followed this write set, into it: what both did,
  /// net. `base` is the state before this write set, read for the rare key
  /// whose state before cannot be told otherwise (one `next` wrote after a
  /// range delete of ours hid it).
  mutating func fold(_ next: WriteSet, base: Version) {
    guard isComplete && next.isComplete else {
      self = WriteSet(isComplete: false)
      return
    }
    for (name, later) in next.keyspaces {
      guard keyspaces[name] != nil else {
        keyspaces[name] = later
        continue
      }
      keyspaces[name]!.follow(with: later) { key in
        base.tree(name).map { $0.presence(of: key, TreeContext(store: base.store)) } ?? false
      }
    }
  }
}

/// One keyspace's changes in a ``WriteSet``.
public struct KeyspaceChanges: Sendable {
  /// A key's presence before and after.
  struct KeyState: Sendable {
    var before: Bool
    var after: Bool
  }

  var keys: [[UInt8]: KeyState] = [:]
  /// Ranges removed by range deletes, in the order they ran.
  public internal(set) var deletedRanges: [KeyRange] = []
  /// Whether the keyspace was created (it did not exist before).
  public internal(set) var created = false
  /// Whether the keyspace was dropped (it may have been created again after).
  public internal(set) var dropped = false
  /// False when the keys were too many to keep (``WriteSet/keyLimit``): only
  /// the fact that the keyspace changed is known, and the key lists are empty.
  public internal(set) var isComplete = true

  /// Keys stored that were absent before, sorted.
  public var inserted: [[UInt8]] { select { !$0.before && $0.after } }
  /// Keys stored that were present before (their values may be equal), sorted.
  public var updated: [[UInt8]] { select { $0.before && $0.after } }
  /// Keys removed one by one (not by a range delete), sorted.
  public var deleted: [[UInt8]] { select { $0.before && !$0.after } }
  /// Every key stored or removed one by one, in no order: those of
  /// ``inserted`` and ``updated``, and of ``deleted`` and range-deleted keys
  /// that were removed by a single delete too.
  public var changedKeys: [[UInt8]] { keys.compactMap { $0.value.before || $0.value.after ? $0.key : nil } }

  /// Calls `body` with every key stored or removed one by one, in no
  /// order, and whether it was present before the transaction and after it
  /// (a key stored and removed again, absent both times, is skipped).
  public func forEachKey(_ body: (_ key: [UInt8], _ before: Bool, _ after: Bool) throws -> Void) rethrows {
    for (key, state) in keys where state.before || state.after { try body(key, state.before, state.after) }
  }

  /// Whether the keyspace's keys changed at all.
  public var isEmpty: Bool {
    isComplete && deletedRanges.isEmpty && !created && !dropped && keys.values.allSatisfy { $0.before == $0.after }
  }

  /// Whether `key` was inserted, updated or deleted one by one.
  public func touched(_ key: [UInt8]) -> Bool { keys[key].map { $0.before || $0.after } ?? false }

  /// Whether a range delete (or a drop) covers `key`.
  public func rangeDeleted(_ key: [UInt8]) -> Bool {
    dropped || deletedRanges.contains { $0.contains(key) }
  }

  private func select(_ keep: (KeyState) -> Bool) -> [[UInt8]] {
    keys.compactMap { keep($0.value) && !($0.value.before && !$0.value.after && rangeDeleted($0.key)) ? $0.key : nil }
      .sorted { compareBytes($0, $1) < 0 }
  }

  // MARK: Recording

  /// Records a put. `inserted` is what the tree said; `before` reads the
  /// transaction's starting state, needed only when an earlier range delete
  /// of this transaction hid the key.
  mutating func put(_ key: [UInt8], inserted: Bool, before: () -> Bool?) {
    guard isComplete else { return }
    if keys[key] != nil {
      keys[key]!.after = true
      return
    }
    let existed: Bool
    if !inserted {
      existed = true
    } else if rangeDeleted(key) {
      guard let b = before() else { return giveUp() }
      existed = b
    } else {
      existed = false
    }
    add(key, KeyState(before: existed, after: true))
  }

  /// Records a delete of a key that was present.
  mutating func delete(_ key: [UInt8]) {
    guard isComplete else { return }
    if keys[key] != nil {
      keys[key]!.after = false
      return
    }
    // Present and untouched so far, so not hidden by a range: it was there before.
    add(key, KeyState(before: true, after: false))
  }

  /// Records a range delete.
  mutating func deleteRange(_ range: KeyRange) {
    guard isComplete else { return }
    for (k, s) in keys where s.after && range.contains(k) { keys[k]!.after = false }
    deletedRanges.append(range)
  }

  mutating func drop() {
    dropped = true
    for k in keys.keys { keys[k]!.after = false }
  }

  private mutating func add(_ key: [UInt8], _ state: KeyState) {
    guard keys.count < WriteSet.keyLimit else { return giveUp() }
    keys[key] = state
  }

  private mutating func giveUp() {
    isComplete = false
    keys = [:]
    deletedRanges = []
  }

  /// Folds in the changes of a later write set. `before` reads the state
  /// before `self` for a key `later` wrote after our range deletes hid it.
  mutating func follow(with later: KeyspaceChanges, before: ([UInt8]) -> Bool?) {
    let earlierRanges = deletedRanges
    let earlierDropped = dropped
    created = created || (later.created && !earlierDropped)
    if later.dropped { drop() }
    guard isComplete && later.isComplete else { return giveUp() }
    for r in later.deletedRanges { deleteRange(r) }
    for (k, s) in later.keys {
      if keys[k] != nil {
        keys[k]!.after = s.after
      } else if earlierDropped || earlierRanges.contains(where: { $0.contains(k) }) {
        // Our range hid it, so `later`'s "before" is not the state before us.
        guard let b = before(k) else { return giveUp() }
        add(k, KeyState(before: b, after: s.after))
      } else {
        add(k, s)
      }
      guard isComplete else { return }
    }
  }
}
