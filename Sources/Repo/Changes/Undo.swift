import CXXHash
import Engine
import Foundation

/// How much a store keeps to undo and redo. Past either bound the oldest
/// actions are forgotten.
public struct UndoLimits: Sendable, Equatable {
  /// The most actions kept on the undo stack.
  public var actions: Int
  /// The most bytes the kept actions hold: the keys they changed and the
  /// values those had before. An action bigger than this by itself is
  /// not kept (see ``Store/write(undoable:_:)``).
  public var bytes: Int

  /// Limits; by default 100 actions and 64 MiB.
  public init(actions: Int = 100, bytes: Int = 64 << 20) {
    self.actions = actions
    self.bytes = bytes
  }
}

/// An action on a store's undo or redo stack.
public struct UndoAction: Sendable, Hashable, Identifiable, CustomStringConvertible {
  /// Stable for the action's life on the stacks: undoing it puts an
  /// action with the same id on the redo stack, and redoing it back.
  public let id: UInt64
  /// The name it was written under ("Delete Post").
  public let name: String
  /// The commit that made its current state: the write, or the undo or
  /// redo that moved it to this stack.
  public let token: ChangeToken
  /// How many records it changed (index entries not counted).
  public let records: Int
  /// The bytes it holds (keys, and the values they had before).
  public let bytes: Int

  public var description: String { "\(name) (\(records) records, token \(token))" }
}

/// One key's change in an undo entry: the value before (nil: absent) and
/// a hash of the value after (nil: absent), to tell whether a later commit
/// changed it.
struct UndoChange {
  var key: [UInt8]
  var before: [UInt8]?
  var after: UInt64?

  var cost: Int { key.count + (before?.count ?? 0) + 48 }
}

/// What undoing an action writes: per keyspace, its changes in key order.
struct UndoEntry {
  var id: UInt64
  var name: String
  var token: ChangeToken
  var spaces: [String: [UndoChange]] = [:]
  var bytes = 0

  var action: UndoAction {
    let records = spaces.reduce(0) { $0 + ($1.key.contains("#") ? 0 : $1.value.count) }
    return UndoAction(id: id, name: name, token: token, records: records, bytes: bytes)
  }

  /// Sets the changes of `keyspace`, sorting them by key.
  mutating func set(_ changes: [UndoChange], in keyspace: String, sorted: Bool = false) {
    guard !changes.isEmpty else { return }
    var changes = changes
    if !sorted { changes.sort { keyPrecedes($0.key, $1.key) } }
    bytes += changes.reduce(0) { $0 + $1.cost }
    spaces[keyspace] = changes
  }

  /// Folds `later`, which followed this entry, into it: undoing the result
  /// undoes both. A key both changed keeps this entry's value before and
  /// `later`'s value after.
  mutating func fold(_ later: UndoEntry) {
    for (space, changes) in later.spaces {
      guard let mine = spaces[space] else {
        set(changes, in: space, sorted: true)
        continue
      }
      var byKey = Dictionary(uniqueKeysWithValues: mine.map { ($0.key, $0) })
      for c in changes {
        if byKey[c.key] != nil { byKey[c.key]!.after = c.after } else { byKey[c.key] = c }
      }
      bytes -= mine.reduce(0) { $0 + $1.cost }
      spaces[space] = nil
      set(Array(byKey.values), in: space)
    }
    token = later.token
  }
}

/// The hash of a value as undo compares it.
func undoHash(_ bytes: [UInt8]) -> UInt64 {
  bytes.withUnsafeBytes { XXH3_64bits_withSeed($0.baseAddress, $0.count, 0x756e_646f) }
}

/// A store's undo and redo stacks (in memory: they end with the process,
/// like `UndoManager`'s).
final class UndoLog: @unchecked Sendable {
  // Safe: every field is guarded by `lock`.
  private let lock = NSLock()
  /// Held through each undo and redo, so two never take the same action.
  let serial = NSLock()
  var limits = UndoLimits()
  private var undo: [UndoEntry] = []
  private var redo: [UndoEntry] = []
  /// The open group, its name and nesting depth.
  private var group: (name: String, depth: Int, entry: UndoEntry?)?
  private var nextID: UInt64 = 1

  func withLock<T>(_ body: (UndoLog) throws -> T) rethrows -> T {
    lock.lock()
    defer { lock.unlock() }
    return try body(self)
  }

  var undoActions: [UndoAction] { withLock { $0.undo.map(\.action) } }
  var redoActions: [UndoAction] { withLock { $0.redo.map(\.action) } }

  func makeID() -> UInt64 {
    withLock { log in
      defer { log.nextID += 1 }
      return log.nextID
    }
  }

  /// Keeps a new action: in the open group if there is one, else on the
  /// undo stack. A new action empties the redo stack.
  func record(_ entry: UndoEntry) {
    withLock { log in
      log.redo.removeAll()
      if let g = log.group {
        if var open = g.entry {
          open.fold(entry)
          log.group!.entry = open
        } else {
          var first = entry
          first.name = g.name
          log.group!.entry = first
        }
        if log.group!.entry!.bytes > log.limits.bytes { log.forgetAll() }
        return
      }
      guard entry.bytes <= log.limits.bytes else { return log.forgetAll() }
      log.undo.append(entry)
      log.trim()
    }
  }

  /// A write too big to keep: nothing before it can be undone in order.
  func forgetAll() {
    undo.removeAll()
    redo.removeAll()
    if group != nil { group!.entry = nil }
  }

  private func trim() {
    var total = undo.reduce(0) { $0 + $1.bytes }
    while !undo.isEmpty && (undo.count > limits.actions || total > limits.bytes) {
      total -= undo.removeFirst().bytes
    }
  }

  func beginGroup(_ name: String) {
    withLock { log in
      if let g = log.group {
        log.group!.depth = g.depth + 1
      } else {
        log.group = (name, 1, nil)
      }
    }
  }

  func endGroup() {
    withLock { log in
      guard let g = log.group else { return }
      if g.depth > 1 {
        log.group!.depth -= 1
        return
      }
      log.group = nil
      if let entry = g.entry {
        guard entry.bytes <= log.limits.bytes else { return log.forgetAll() }
        log.undo.append(entry)
        log.trim()
      }
    }
  }

  var isGrouping: Bool { withLock { $0.group != nil } }

  /// The top entry of the undo (or redo) stack, if `id` is nil or its id.
  func top(redo fromRedo: Bool, id: UInt64?) -> UndoEntry? {
    withLock { log in
      guard let e = fromRedo ? log.redo.last : log.undo.last else { return nil }
      return id == nil || e.id == id ? e : nil
    }
  }

  /// Moves the top entry of one stack, once applied, to the other as `inverse`.
  func moved(_ id: UInt64, redo fromRedo: Bool, inverse: UndoEntry) {
    withLock { log in
      // By id, wherever it is now: an undoable write may have been
      // recorded on top of it meanwhile.
      if fromRedo {
        if let i = log.redo.lastIndex(where: { $0.id == id }) { log.redo.remove(at: i) }
        log.undo.append(inverse)
        log.trim()
      } else {
        if let i = log.undo.lastIndex(where: { $0.id == id }) { log.undo.remove(at: i) }
        log.redo.append(inverse)
      }
    }
  }

  func removeAll() { withLock { $0.forgetAll() } }
}

enum UndoCapture {
  /// Why a transaction's changes cannot be kept to undo, or nil.
  enum Refusal: Error { case tooLarge, schema }

  /// What undoing `tx` (about to commit) would write: every key it changed
  /// in records, indexes and references, with the value `start` (the
  /// store before it) held. Bookkeeping keyspaces (`#…`: history,
  /// migrations) are not undone, nor text indexes: their entries hold many
  /// records each, so they are moved with the records they index when an
  /// action is undone (``apply(_:_:graph:)``), and a later write to another
  /// record of one is no conflict.
  static func capture(
    _ tx: WriteTransaction, start: Snapshot, into entry: inout UndoEntry, skipping: Set<String> = []
  ) throws {
    guard let changes = tx.changes, changes.isComplete else { throw Refusal.tooLarge }
    for (name, c) in changes.keyspaces where !name.hasPrefix("#") && !skipping.contains(name) {
      guard c.isComplete else { throw Refusal.tooLarge }
      let ranges = c.dropped ? [KeyRange.all] : c.deletedRanges
      if name.hasSuffix("#meta") {
        // A model's first shape and index markers, recorded as its first
        // records went in, may stay when those go: nothing was built over
        // records it already had. Any other change to a shape or an index
        // cannot be undone key by key.
        var fresh = ranges.isEmpty
        c.forEachKey { _, before, _ in if before { fresh = false } }
        let model = String(name.dropLast("#meta".count))
        guard fresh, try start.count(in: model, range: .all) == 0 else { throw Refusal.schema }
        continue
      }
      var items: [UndoChange] = []
      // Known presence saves a read: a key absent before (or after) has no
      // value to fetch there. (Not `c.isEmpty`: an update leaves a key
      // present, so it is not a change of presence.)
      try c.forEachKey { key, wasPresent, isPresent in
        let before = wasPresent ? try start.get(key, in: name) : nil
        let after = isPresent ? try tx.get(key, in: name) : nil
        if before != after { items.append(UndoChange(key: key, before: before, after: after.map(undoHash))) }
      }
      if !ranges.isEmpty {
        // Range-deleted keys not stored again (those are above): their
        // values before, in key order.
        var seen = Set<[UInt8]>()
        c.forEachKey { key, _, _ in seen.insert(key) }
        for range in ranges {
          let cursor = try start.cursor(in: name, range: range)
          while let item = try cursor.next({ k, v in UndoChange(key: Array(k), before: Array(v), after: nil) }) {
            if seen.insert(item.key).inserted { items.append(item) }
          }
        }
      }
      entry.set(items, in: name)
    }
  }

  /// Writes `entry`'s values before in `tx`, after checking that every key
  /// still holds its value after; returns the entry that undoes this.
  static func apply(_ entry: UndoEntry, _ tx: WriteTransaction, graph: RelationshipGraph) throws -> UndoEntry {
    var inverse = UndoEntry(id: entry.id, name: entry.name, token: ChangeToken(tx.sequence))
    // Records first: a conflict is best reported on a record.
    let names = entry.spaces.keys.sorted { a, b in
      let (ra, rb) = (!a.contains("#"), !b.contains("#"))
      return ra != rb ? ra : a < b
    }
    for name in names {
      let changes = entry.spaces[name]!
      let reindex = name.contains("#") ? nil : graph.textReindexer(name)
      var undone: [UndoChange] = []
      undone.reserveCapacity(changes.count)
      for change in changes {
        // A key to restore that must be absent now: one descent, which
        // stores it only if it is absent.
        if change.after == nil, let before = change.before {
          guard try tx.insert(change.key, before, in: name) else {
            throw conflict(entry, name, change.key, "it changed since")
          }
          try reindex?(tx, change.key, nil, before)
          undone.append(UndoChange(key: change.key, before: nil, after: undoHash(before)))
          continue
        }
        let current = try tx.get(change.key, in: name)
        guard current.map(undoHash) == change.after else {
          throw conflict(entry, name, change.key, "it changed since")
        }
        if let before = change.before {
          try tx.put(change.key, before, in: name)
        } else {
          _ = try tx.delete(change.key, in: name)
        }
        try reindex?(tx, change.key, current, change.before)
        undone.append(UndoChange(key: change.key, before: current, after: change.before.map(undoHash)))
      }
      inverse.set(undone, in: name, sorted: true)
    }
    try checkReferences(entry, tx, graph: graph)
    return inverse
  }

  /// Refuses a restored state that breaks a relationship: a reference
  /// restored to a record deleted since, or a record deleted (its insert
  /// undone) that a record made since refers to.
  private static func checkReferences(_ entry: UndoEntry, _ tx: WriteTransaction, graph: RelationshipGraph) throws {
    let relationships = graph.byIndexKeyspace()
    for (name, changes) in entry.spaces {
      if let edge = relationships[name], !edge.allowsDangling {
        // Restored index entries: key = the referred-to key, then the
        // referring key (the value).
        for change in changes {
          let key = change.key
          guard let source = change.before, source.count < key.count else { continue }
          let target = Array(key.prefix(key.count - source.count))
          if edge.optional && target == [0] { continue }
          if try tx.get(target, in: edge.target) == nil {
            throw RepoError(
              .undoConflict,
              "'\(entry.name)' cannot be undone or redone: \(edge.source) \(describeRecordKey(source)) would refer through \(edge.name) to \(edge.target) \(describeRecordKey(target)), deleted since",
              model: edge.source, id: describeRecordKey(source), field: edge.name)
          }
        }
      }
      guard !name.contains("#") else { continue }
      let removed = changes.compactMap { $0.before == nil ? $0.key : nil }
      guard !removed.isEmpty else { continue }
      if let unseen = try graph.unseenSources(of: name, tx).first {
        throw RepoError(
          .invalidRelationship,
          "model \(unseen) refers to \(name), but this store has not seen \(unseen): list it in the Schema the store is opened with",
          model: name)
      }
      for edge in graph.incoming(name) where edge.rule != .noAction {
        for key in removed {
          var referrer: [UInt8]?
          try tx.cursor(in: edge.indexKeyspace, range: .prefix(key)).forEach { _, value in
            referrer = Array(value)
            return false
          }
          if let referrer {
            throw RepoError(
              .undoConflict,
              "'\(entry.name)' cannot be undone or redone: \(edge.source) \(describeRecordKey(referrer)), made since, refers to it through \(edge.name)",
              model: name, id: describeRecordKey(key), field: edge.name)
          }
        }
      }
    }
  }

  private static func conflict(_ entry: UndoEntry, _ keyspace: String, _ key: [UInt8], _ why: String) -> RepoError {
    if let hash = keyspace.firstIndex(of: "#") {
      let model = String(keyspace[..<hash])
      return RepoError(
        .undoConflict, "'\(entry.name)' cannot be undone or redone: an entry of \(keyspace) \(why)", model: model)
    }
    return RepoError(
      .undoConflict, "'\(entry.name)' cannot be undone or redone: the record \(why) (a later commit wrote it)",
      model: keyspace, id: describeRecordKey(key))
  }
}

#if canImport(Darwin)
  extension Store {
    /// Registers the newest undo action with `manager`, so that its Undo
    /// (and then Redo) command undoes and redoes it in this store. Call it
    /// after each ``write(undoable:_:)`` whose action the manager should
    /// offer, on the main thread; an undo or redo that fails (a conflict)
    /// is handed to `onError` and leaves the manager's stacks as they were
    /// after that command.
    @MainActor
    public func registerUndo(
      with manager: UndoManager, onError: @escaping @MainActor @Sendable (Error) -> Void = { _ in }
    ) {
      guard let action = undoActions.last else { return }
      register(action, redo: false, with: manager, onError: onError)
    }

    @MainActor
    private func register(
      _ action: UndoAction, redo: Bool, with manager: UndoManager,
      onError: @escaping @MainActor @Sendable (Error) -> Void
    ) {
      manager.registerUndo(withTarget: self) { store in
        MainActor.assumeIsolated {
          do {
            let next = redo ? try store.redoNow(action) : try store.undoNow(action)
            store.register(next, redo: !redo, with: manager, onError: onError)
          } catch {
            onError(error)
          }
        }
      }
      manager.setActionName(action.name)
    }
  }
#endif
