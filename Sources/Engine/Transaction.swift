/// A write transaction: changes to any keyspaces, applied atomically by
/// ``commit()`` or discarded by ``rollback()``.
///
/// Reads through the transaction see its own writes. Only one write
/// transaction is open at a time; it is not thread-safe, but it may move
/// between threads (begin on one, commit on another).
///
/// If an operation fails half-way (an I/O error while reading a node), the
/// transaction can no longer commit: it throws on every later call until
/// rolled back, so a half-applied change never reaches the store.
public final class WriteTransaction: KeyValueReader {
  enum State {
    case open
    case committed
    case rolledBack
    case failed(EngineError)
  }

  let database: Database
  /// The writer gate, held from begin to commit or rollback; dropping it
  /// (with the transaction) opens the gate.
  private var hold: WriterGate.Hold?
  /// The claim on the store's write lock, given back when the commit is
  /// published or the transaction rolls back.
  private var claim: WriteClaim?
  // Exclusivity is not checked at run time on these two: a transaction is
  // used by one caller at a time (it may move between threads, never be
  // shared), and no write calls back into the transaction while it is
  // changing them. The checks cost 6% of a repository insert.
  /// The trees as this transaction changes them, and what it changed.
  @exclusivity(unchecked) private var editor: TreeEditor
  /// The WAL record being built; nil once the transaction outgrew a WAL
  /// record and will commit by checkpoint.
  @exclusivity(unchecked) var log: WALRecordBuilder? = WALRecordBuilder()
  private(set) var changed = false
  private(set) var state: State = .open

  /// Every keyspace's tree as the transaction left it.
  var trees: [String: TreeRoot] { editor.trees }
  /// Bytes of the nodes this transaction copied to change them.
  var copiedBytes: Int { editor.context.copies?.bytes ?? 0 }

  /// What the transaction changed so far; nil when not tracking.
  public var changes: WriteSet? { editor.changes }

  /// The sequence this transaction's commit gets, if it changes anything.
  public let sequence: CommitSequence
  /// The writer's state as the transaction began (references only: the
  /// trees are copy-on-write and shared with the editor's).
  private let start: WriterState

  init(database: Database, holding hold: consuming WriterGate.Hold, claim: WriteClaim) {
    self.database = database
    self.claim = claim
    self.editor = TreeEditor(
      trees: hold.state.trees,
      context: TreeContext(
        store: hold.state.store, owner: database.nextGeneration(), nodeSize: database.options.nodeSize,
        largeValueThreshold: database.options.largeValueThreshold, copies: CopyMeter()), trackingChanges: false)
    self.sequence = hold.state.sequence.next
    self.start = hold.state
    self.hold = consume hold
  }

  /// A snapshot of the store as this transaction found it: every commit
  /// before it, none of its own changes. It stays readable after the
  /// transaction ends, like any snapshot (``Snapshot``).
  public func snapshotAtStart() throws -> Snapshot {
    try checkOpen()
    // The log position is what a version tells a process following the
    // store; a snapshot only reads the trees.
    let version = Version(
      sequence: start.sequence, trees: start.trees, store: start.store, checkpoint: start.checkpoint,
      log: LogPosition(walSalt: 0, walEnd: 0, dataGeneration: start.dataGeneration))
    return Snapshot(database: database, version: version)
  }

  /// Hands the gate to the commit.
  func takeHold() -> WriterGate.Hold? { hold.take() }

  /// Hands the claim on the write lock to the commit.
  func takeClaim() -> WriteClaim? {
    defer { claim = nil }
    return claim
  }

  private var isOpenOrFailed: Bool {
    switch state {
    case .open, .failed: true
    case .committed, .rolledBack: false
    }
  }

  var isOpen: Bool {
    if case .open = state { return true }
    return false
  }

  var context: TreeContext { editor.context }

  private func checkOpen() throws {
    switch state {
    case .open: return
    case .failed(let e):
      throw EngineError(.invalidArgument, "the transaction failed and must be rolled back", underlying: e.description)
    case .committed, .rolledBack:
      throw EngineError(.closed, "the transaction is already \(state)")
    }
  }

  /// Runs a change to the trees; any error leaves the transaction failed.
  /// `changedIf` says, from the result, whether anything changed.
  @discardableResult
  private func mutate<T>(_ body: () throws -> T, changedIf: (T) -> Bool = { _ in true }) throws -> T {
    do {
      let result = try body()
      if changedIf(result) { changed = true }
      return result
    } catch {
      let e = error as? EngineError ?? EngineError(.io, "\(error)")
      state = .failed(e)
      throw e
    }
  }

  /// The bytes of the WAL record this transaction would commit so far, or
  /// nil once it has outgrown one and will commit by checkpoint.
  public var loggedBytes: Int? { log?.size }

  /// A hint that this transaction will log about `bytes` more: when that
  /// and what it holds pass what one WAL record may carry, it stops
  /// building its record now, not once it gets there, and commits by
  /// checkpoint as it would have. A batch that knows its size (a
  /// repository's `insert(contentsOf:)`) saves copying its writes into a
  /// record that would be thrown away. A wrong guess costs only speed: a
  /// transaction committed by checkpoint is as durable as one logged.
  ///
  /// A guess within a fifth of the room left counts as too big: a batch
  /// guessed from its first few writes (shorter ids, shorter text) tends to
  /// guess low, and one that crossed the limit at its end would have built
  /// a record of nearly the whole limit only to throw it away.
  public func expectWrites(bytes: Int) {
    guard let log else { return }
    let room = database.largeTransactionBytes - log.size
    guard bytes > room - room / 5 else { return }
    self.log = nil
  }

  private func record(_ op: WALOperation) {
    guard log != nil else { return }
    log!.append(op)
    if log!.size > database.largeTransactionBytes { log = nil }
  }

  /// Starts recording changes (``changes``). Called before any write.
  func trackChanges() {
    if editor.changes == nil { editor.changes = WriteSet() }
  }

  private func checkKeyspaceLimit(_ name: String) throws {
    // The count first: the lookup is needed only near the limit.
    if editor.trees.count >= Limits.maxKeyspaces && editor.trees[name] == nil {
      throw EngineError(.invalidArgument, "the store already holds \(Limits.maxKeyspaces) keyspaces")
    }
  }

  // MARK: Writing

  /// Stores `value` under `key` in `keyspace`, replacing any value there.
  /// The keyspace is created if it does not exist.
  ///
  /// - Throws: ``EngineError/Code/keyTooLarge``, ``EngineError/Code/valueTooLarge``,
  ///   ``EngineError/Code/invalidArgument`` for a bad keyspace name.
  public func put(_ key: [UInt8], _ value: [UInt8], in keyspace: String) throws {
    try checkPut(key, value, keyspace)
    try mutate { try editor.put(key, value, in: keyspace) }
    record(.put(keyspace: keyspace, key: key, value: value))
  }

  /// Stores `value` under `key` only if `key` is absent from `keyspace`;
  /// a present key keeps its value. Returns whether it stored. One descent
  /// of the tree: cheaper than ``contains(_:in:)`` and then ``put(_:_:in:)``.
  @discardableResult
  public func insert(_ key: [UInt8], _ value: [UInt8], in keyspace: String) throws -> Bool {
    try checkPut(key, value, keyspace)
    let inserted = try mutate({ try editor.put(key, value, in: keyspace, ifAbsent: true) }, changedIf: { $0 })
    if inserted { record(.put(keyspace: keyspace, key: key, value: value)) }
    return inserted
  }

  /// What ``put(_:_:in:)`` and ``insert(_:_:in:)`` check before writing.
  private func checkPut(_ key: [UInt8], _ value: [UInt8], _ keyspace: String) throws {
    try checkOpen()
    try Validate.key(key)
    try Validate.value(value)
    try Validate.keyspace(keyspace)
    try checkKeyspaceLimit(keyspace)
  }

  /// Removes `key` from `keyspace`. Returns whether it was present.
  @discardableResult
  public func delete(_ key: [UInt8], in keyspace: String) throws -> Bool {
    try checkOpen()
    try Validate.key(key)
    let found = try mutate({ try editor.delete(key, in: keyspace) }, changedIf: { $0 })
    if found { record(.delete(keyspace: keyspace, key: key)) }
    return found
  }

  /// Removes every key `k` of `keyspace` with `start <= k < end`, as one
  /// logged operation whatever the number of keys. Returns how many keys
  /// were removed.
  @discardableResult
  public func deleteRange(from start: [UInt8], to end: [UInt8], in keyspace: String) throws -> UInt64 {
    try deleteRange(KeyRange(from: start, to: end), in: keyspace)
  }

  /// Removes every key of `range` in `keyspace`. See ``deleteRange(from:to:in:)``.
  @discardableResult
  public func deleteRange(_ range: KeyRange, in keyspace: String) throws -> UInt64 {
    try checkOpen()
    if let l = range.lower { try Validate.key(l) }
    if let u = range.upper { try Validate.key(u) }
    let removed = try mutate({ try editor.deleteRange(range, in: keyspace) }, changedIf: { $0 > 0 })
    if removed > 0 { record(.deleteRange(keyspace: keyspace, start: range.lower, end: range.upper)) }
    return removed
  }

  /// Creates an empty keyspace if none has that name.
  public func createKeyspace(_ name: String) throws {
    try checkOpen()
    try Validate.keyspace(name)
    guard editor.trees[name] == nil else { return }
    try checkKeyspaceLimit(name)
    editor.create(name)
    changed = true
    record(.createKeyspace(name))
  }

  /// Removes a keyspace and all its keys. Returns whether it existed.
  @discardableResult
  public func dropKeyspace(_ name: String) throws -> Bool {
    try checkOpen()
    guard editor.drop(name) else { return false }
    changed = true
    record(.dropKeyspace(name))
    return true
  }

  // MARK: Ending

  /// Makes every change durable and visible to new snapshots, atomically.
  ///
  /// In ``Durability/full`` mode it returns once the WAL record is fsynced
  /// (possibly sharing the fsync with other committers). A transaction that
  /// changed nothing commits without writing.
  ///
  /// - Throws: ``EngineError/Code/poisoned`` or ``EngineError/Code/io`` if
  ///   the write or fsync failed: the commit is then not acknowledged, and
  ///   the store refuses writes until reopened.
  public func commit() throws {
    try checkOpen()
    state = .committed
    try database.commit(self)
  }

  /// Discards every change. Does nothing if already committed or rolled back.
  public func rollback() {
    guard isOpenOrFailed else { return }
    state = .rolledBack
    hold = nil
    claim?.release()
    claim = nil
  }

  // MARK: Reading

  public func get(_ key: [UInt8], in keyspace: String) throws -> [UInt8]? {
    try checkOpen()
    return try trees[keyspace]?.get(key, context)
  }

  public func visitValue(
    forKey key: UnsafeRawBufferPointer, in keyspace: String, _ body: (UnsafeRawBufferPointer) throws -> Void
  ) throws -> Bool {
    try checkOpen()
    return try trees[keyspace]?.withValue(key, context, body) != nil
  }

  /// A cursor over the transaction's state as it is now; later writes in
  /// this transaction are not seen by it.
  public func cursor(in keyspace: String, range: KeyRange) throws -> Cursor {
    try checkOpen()
    // Freeze: nodes so far become immutable for this transaction, so the
    // cursor's view cannot change under it.
    editor.context.owner = database.nextGeneration()
    return try Cursor(tree: trees[keyspace] ?? .empty, context: context, range: range) { [weak self] in
      self?.isOpen ?? false
    }
  }

  public func count(in keyspace: String, range: KeyRange) throws -> UInt64 {
    try checkOpen()
    guard let tree = trees[keyspace] else { return 0 }
    if range == .all { return tree.count }
    return try tree.count(in: range, context)
  }

  public func keyspaces() throws -> [String] {
    try checkOpen()
    return trees.keys.sorted()
  }
}
