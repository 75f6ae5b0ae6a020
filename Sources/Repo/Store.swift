import Dispatch
import Engine
import Foundation
import Synchronization

/// The repository layer's counters.
final class RepoCounters: Sendable {
  let recordsRead = Atomic<Int>(0)
  /// Records decoded through the model's `init(from:)`.
  let recordsDecoded = Atomic<Int>(0)
  /// Query plans made (not taken from a model's PlanCache).
  let plansMade = Atomic<Int>(0)
  /// Whether predicates are tested on record bytes (tests turn it off to
  /// compare both paths on one store).
  let byteFilters = Atomic<Bool>(byteTestsEnabled)
}

/// A store of models: an Engine database with typed repositories over it.
///
/// ```swift
/// let store = try Store.open(at: path)       // or Store.inMemory() in tests
/// let todos = store.repository(Todo.self)
/// try await todos.insert(Todo(id: 1, title: "Buy milk"))
/// let open = try await todos.fetch(FetchDescriptor(predicate: #Predicate { !$0.done }))
/// ```
///
/// Writes run one at a time on the store's own queue, so awaiting them
/// never blocks a caller's thread; reads run on the caller's task against a
/// snapshot and never wait for writes.
public final class Store: Sendable {
  /// The database underneath.
  public let database: Database
  private let writeQueue = DispatchQueue(label: "cairn.store.write")
  let spaces: SpaceCache
  let counters = RepoCounters()
  private let schemaLog = Mutex<[SchemaChange]>([])
  let undoLog = UndoLog()
  /// Persistent history, when recorded.
  public let history: HistoryOptions?

  /// Opens (or creates) the store in the folder at `path`. With `history`,
  /// every commit made through the store is recorded for
  /// ``history(since:limit:)``.
  public static func open(at path: String, options: Options = Options(), history: HistoryOptions? = nil) throws
    -> Store
  {
    Store(database: try Database.open(at: path, options: options), history: history)
  }

  /// Opens (or creates) the store in the folder at `path` and checks every
  /// model of `schema` against what the store recorded, before anything is
  /// read: safe changes are applied in one transaction (see
  /// ``schemaChanges``), incompatible ones refused. See ``Schema``.
  ///
  /// - Throws: ``RepoError/Code/schemaMismatch`` (the store is closed and
  ///   left as it was), and whatever ``open(at:options:history:)`` throws.
  public static func open(
    at path: String, options: Options = Options(), history: HistoryOptions? = nil, schema: Schema
  ) throws -> Store {
    let store = Store(database: try Database.open(at: path, options: options), history: history)
    do {
      try store.check(schema)
    } catch {
      try? store.close()
      throw error
    }
    return store
  }

  /// Removes the store in the folder at `path` — every file of it, and the
  /// folder when nothing else is left there — so the next ``open(at:options:history:)``
  /// starts an empty store: the "destroy and rebuild" of a prototype whose
  /// models changed. Nothing is done when there is no folder at `path`.
  ///
  /// Refuses while the store is open anywhere: in this process (close every
  /// `Store` and `Database` of it first) or in another, such as an app
  /// extension reading it; opens that begin meanwhile are refused too.
  /// See ``Database/destroy(at:options:)``.
  ///
  /// - Throws: ``EngineError/Code/locked`` while the store is open,
  ///   ``EngineError/Code/notAStore`` if the folder holds no Cairn store
  ///   (then nothing is removed).
  public static func destroy(at path: String, options: Options = Options()) throws {
    try Database.destroy(at: path, options: options)
  }

  /// A store in memory, with the same engine and API: what app tests use
  /// instead of hand-written mocks.
  public static func inMemory(history: HistoryOptions? = nil) throws -> Store {
    Store(database: try Database.inMemory(), history: history)
  }

  /// A store in memory whose models are checked as ``open(at:options:history:schema:)``
  /// checks them.
  public static func inMemory(history: HistoryOptions? = nil, schema: Schema) throws -> Store {
    let store = try inMemory(history: history)
    try store.check(schema)
    return store
  }

  /// Wraps an open database.
  public init(database: Database, history: HistoryOptions? = nil) {
    self.database = database
    self.history = history
    spaces = SpaceCache(counters: counters)
  }

  /// Records read by queries since the store was opened (each record a
  /// query decoded once counts once), for tests and profiling.
  public var recordsRead: Int { counters.recordsRead.load(ordering: .relaxed) }

  /// Records decoded into models since the store was opened: what a byte-level
  /// filter saves shows here (records a query tested but did not decode are
  /// in ``recordsRead`` only).
  public var recordsDecoded: Int { counters.recordsDecoded.load(ordering: .relaxed) }

  /// Query plans made since the store was opened. A query of a shape run
  /// before (the same key paths, operators and kinds of constant, sort and
  /// window; any constant values) reuses that plan's choice with its own
  /// key ranges and does not count, unless its constants make the choice
  /// far dearer than planned.
  public var plansMade: Int { counters.plansMade.load(ordering: .relaxed) }

  /// Whether queries test predicates on record bytes where they can (on by
  /// default; off means every record a query reads is decoded first).
  var byteFilters: Bool {
    get { counters.byteFilters.load(ordering: .relaxed) }
    set { counters.byteFilters.store(newValue, ordering: .relaxed) }
  }

  /// Closes the database.
  public func close() throws { try database.close() }

  /// The repository of `type`.
  public func repository<M: Codable & Sendable & Identifiable>(_ type: M.Type = M.self) -> Repository<M>
  where M.ID: Codable & Hashable & Sendable {
    Repository(store: self)
  }

  func space<M>(_ type: M.Type) throws -> ModelSpace<M> { try spaces.get(type) }

  /// The access of `type`, its shape checked (``checkOnFirstUse(_:)``).
  func access<M: Codable & Sendable & Identifiable>(_ type: M.Type) throws -> ModelAccess<M>
  where M.ID: Codable & Hashable & Sendable {
    let a = try spaces.access(type)
    if !a.schemaSettled.load(ordering: .acquiring) { try checkOnFirstUse(a) }
    return a
  }

  // MARK: Schema

  /// What schema checks changed since the store was opened: at open (with
  /// a ``Schema``) and at the first use of each model's repository.
  public var schemaChanges: [SchemaChange] { schemaLog.withLock { $0 } }

  /// The shape each model has as recorded in the store, by stored name.
  public func recordedShapes() throws -> [String: ModelShape] {
    try Repo.recordedShapes(in: try database.snapshot())
  }

  func noteSchemaChanges(_ changes: [SchemaChange]) {
    guard !changes.isEmpty else { return }
    spaces.graph.shapesChanged()
    schemaLog.withLock { $0 += changes }
  }

  /// Runs `schema`'s pending migration steps, each in a transaction of its
  /// own, then checks every model on a snapshot and applies what changed in
  /// one write transaction (planned again inside it, since another process
  /// may have applied it meanwhile).
  func check(_ schema: Schema) throws {
    try schema.migrations.validate()
    let pending = try schema.migrations.pending(try database.snapshot())
    if !pending.isEmpty, database.isReadOnly {
      throw RepoError(
        .schemaMismatch,
        "migration step \"\(pending[0].name)\" has not run (\(pending.count) pending), and the store is open read-only")
    }
    for step in pending {
      let change = try writeNow { tx in try runStep(step, tx.transaction, progress: schema.progress) }
      if let change { noteSchemaChanges([change]) }
    }

    let snapshot = try database.snapshot()
    let plans = try schema.models.map { try $0.plan(self, snapshot) }
    let conflicted = plans.contains { !$0.conflicts.isEmpty }
    // A read-only handle cannot erase either.
    if conflicted, schema.onIncompatibleChange == .fail || database.isReadOnly,
      let error = plans.first(where: { $0.error != nil })?.error
    {
      throw error
    }
    if plans.allSatisfy(\.isCurrent) || database.isReadOnly {
      for m in schema.models { try m.settled(self) }
      return
    }
    let changes = try writeNow { tx in try applyPlans(schema, tx.transaction) }
    noteSchemaChanges(changes)
    for m in schema.models { try m.settled(self) }
  }

  /// Runs migration step `step` in `tx` and records it, unless the store
  /// ran it already (another process, meanwhile). Returns what it did.
  private func runStep(
    _ step: Migrator.Step, _ tx: WriteTransaction, progress: (@Sendable (SchemaProgress) -> Void)?
  ) throws -> SchemaChange? {
    guard try !Migrator.applied(tx).contains(step.name) else { return nil }
    let migration = Migration(name: step.name, store: self, transaction: tx, progress: progress)
    try step.body(migration)
    try Migrator.record(step.name, tx)
    return migration.change
  }

  /// Plans every model of `schema` in `tx` and applies the plans; erases
  /// the store first on a conflict when the schema says so. Returns the
  /// changes made.
  private func applyPlans(_ schema: Schema, _ tx: WriteTransaction) throws -> [SchemaChange] {
    var changes: [SchemaChange] = []
    var plans = try schema.models.map { try $0.plan(self, tx) }
    if plans.contains(where: { !$0.conflicts.isEmpty }) {
      if schema.onIncompatibleChange == .fail, let error = plans.first(where: { $0.error != nil })?.error {
        throw error
      }
      for p in plans where !p.conflicts.isEmpty {
        changes.append(
          SchemaChange(
            kind: .erased, model: p.model, name: p.conflicts.first?.field, detail: p.error.map(\.message) ?? ""))
      }
      for keyspace in try tx.keyspaces() { _ = try tx.dropKeyspace(keyspace) }
      // The steps were for the data just erased.
      for step in schema.migrations.steps { try Migrator.record(step.name, tx) }
      plans = try schema.models.map { try $0.plan(self, tx) }
    }
    for (m, plan) in zip(schema.models, plans) {
      try m.apply(self, tx, plan, schema.progress)
      changes += plan.changes
    }
    return changes
  }

  /// What opening the store at `path` with `schema` would do — the
  /// migration steps it would run, with the records each would read, write
  /// and delete, and the changes the check would apply — or what would
  /// stop it. Everything runs in one write transaction that is then rolled
  /// back: the store is left as it was.
  ///
  /// - Throws: what ``open(at:options:history:)`` throws (no store is
  ///   created at `path`), or an error a migration step throws.
  public static func dryRun(at path: String, options: Options = Options(), schema: Schema) throws -> SchemaReport {
    var options = options
    options.createIfMissing = false
    let store = Store(database: try Database.open(at: path, options: options))
    defer { try? store.close() }
    try schema.migrations.validate()
    struct Rollback: Error { let report: SchemaReport }
    do {
      try store.writeNow { tx in
        var report = SchemaReport(changes: [], error: nil)
        for step in try schema.migrations.pending(tx.transaction) {
          if let change = try store.runStep(step, tx.transaction, progress: schema.progress) {
            report.changes.append(change)
          }
        }
        let plans = try schema.models.map { try $0.plan(store, tx.transaction) }
        report.changes += plans.flatMap(\.changes)
        report.error = plans.first { $0.error != nil }?.error
        throw Rollback(report: report)
      }
    } catch let done as Rollback {
      return done.report
    }
    return SchemaReport(changes: [], error: nil)
  }

  /// Checks a model not listed in a ``Schema`` at the first use of its
  /// repository: an incompatible change throws; safe ones are applied in a
  /// write transaction of their own — unless this thread is inside one of
  /// the store's write transactions, which then applies them itself
  /// (``StoreTransaction/repository(_:)``), or the store is read-only.
  func checkOnFirstUse<M>(_ access: ModelAccess<M>) throws {
    let plan = try access.schemaPlan(try database.snapshot())
    if let error = plan.error { throw error }
    if plan.isCurrent || database.isReadOnly {
      access.schemaSettled.store(true, ordering: .releasing)
      return
    }
    // A write begun on this thread (the store's, or the engine's directly)
    // would deadlock: that transaction's own repositories apply it.
    if database.isWritingOnCurrentThread { return }
    do {
      let changes = try writeNow { tx in
        let plan = try access.schemaPlan(tx.transaction)
        try access.applySchema(plan, tx.transaction, progress: nil)
        return plan.changes
      }
      noteSchemaChanges(changes)
    } catch let e as EngineError where e.code == .readOnly {
      // A store on a read-only medium: read it as it is.
    }
    access.schemaSettled.store(true, ordering: .releasing)
  }

  /// Runs `body` in one write transaction and commits it; if `body` throws,
  /// every change it made, in every repository, is rolled back.
  ///
  /// ```swift
  /// try await store.write { tx in
  ///   try tx.repository(Post.self).deleteAll()
  ///   try tx.repository(Post.self).insert(contentsOf: payload)
  /// }
  /// ```
  @discardableResult
  public func write<T: Sendable>(_ body: @escaping @Sendable (StoreTransaction) throws -> T) async throws -> T {
    try await onWriteQueue { try self.writeNow(body) }
  }

  /// ``write(_:)`` without `async`: blocks the calling thread until committed.
  @discardableResult
  public func writeNow<T>(_ body: (StoreTransaction) throws -> T) throws -> T {
    try database.write(trackingChanges: history != nil) { tx in
      let result = try body(StoreTransaction(store: self, transaction: tx))
      if let history { try HistoryLog.record(tx, history) }
      return result
    }
  }

  // MARK: Undo

  /// Runs `body` in one write transaction, commits it, and keeps what it
  /// changed so ``undo()`` can restore it: an action named `name` ("Delete
  /// Post") on top of the undo stack (or folded into the open group, see
  /// ``beginUndoGroup(_:)``). A new action empties the redo stack.
  ///
  /// Everything the transaction changed is kept — cascades, nullified
  /// references, range deletes, index entries — as the keys it changed and
  /// the values they held before (read from the snapshot the transaction
  /// started from, after `body` ran). A transaction too big to keep (past
  /// ``undoLimits``' bytes, or over `WriteSet.keyLimit` keys in one
  /// keyspace) or one that changed the recorded shape or indexes of a
  /// model that held records (a schema change applied inside it) commits
  /// all the same, and empties both stacks: nothing before it can be undone
  /// in order. (A model's first shape, recorded with its first records,
  /// stays when they are undone.)
  @discardableResult
  public func write<T: Sendable>(
    undoable name: String, _ body: @escaping @Sendable (StoreTransaction) throws -> T
  ) async throws -> T {
    try await onWriteQueue { try self.writeNow(undoable: name, body) }
  }

  /// ``write(undoable:_:)`` without `async`: blocks the calling thread until committed.
  @discardableResult
  public func writeNow<T>(undoable name: String, _ body: (StoreTransaction) throws -> T) throws -> T {
    var entry = UndoEntry(id: undoLog.makeID(), name: name, token: .zero)
    var kept = true
    let result = try database.write(trackingChanges: true) { tx in
      let start = try tx.snapshotAtStart()
      let result = try body(StoreTransaction(store: self, transaction: tx))
      entry.token = ChangeToken(tx.sequence)
      do {
        try UndoCapture.capture(tx, start: start, into: &entry, skipping: spaces.graph.textKeyspaces())
      } catch is UndoCapture.Refusal {
        kept = false
      }
      if let history { try HistoryLog.record(tx, history) }
      return result
    }
    if !kept {
      undoLog.removeAll()
    } else if !entry.spaces.isEmpty {
      undoLog.record(entry)
    }
    return result
  }

  /// What is kept to undo; changing it trims the undo stack at the next action.
  public var undoLimits: UndoLimits {
    get { undoLog.withLock { $0.limits } }
    set { undoLog.withLock { $0.limits = newValue } }
  }

  /// The actions ``undo()`` would undo, oldest first (the next one last).
  public var undoActions: [UndoAction] { undoLog.undoActions }
  /// The actions ``redo()`` would redo, oldest first (the next one last).
  public var redoActions: [UndoAction] { undoLog.redoActions }
  /// Whether there is an action to undo.
  public var canUndo: Bool { !undoActions.isEmpty }
  /// Whether there is an action to redo.
  public var canRedo: Bool { !redoActions.isEmpty }

  /// Groups every undoable write until the matching ``endUndoGroup()``
  /// into one action named `name`, undone and redone as one. Groups nest;
  /// the outermost name is kept.
  public func beginUndoGroup(_ name: String) { undoLog.beginGroup(name) }

  /// Closes the group ``beginUndoGroup(_:)`` opened; at the outermost, its
  /// action goes on the undo stack.
  public func endUndoGroup() { undoLog.endGroup() }

  /// Undoes the newest action: a new commit that restores exactly what it
  /// changed, seen by observers, change streams and history like any
  /// other. The action moves to the redo stack, and is returned.
  ///
  /// - Throws: `RepoError.nothingToUndo`; `RepoError.undoConflict` when a
  ///   record it would restore was changed since by a later commit (in any
  ///   process), or restoring it would break a relationship (a reference to
  ///   a record deleted since, or a record referred to since) — nothing is
  ///   changed and the action stays; engine errors as for any write.
  @discardableResult
  public func undo() async throws -> UndoAction {
    try await onWriteQueue { try self.undoNow() }
  }

  /// Redoes the newest undone action (see ``undo()``), moving it back to
  /// the undo stack.
  @discardableResult
  public func redo() async throws -> UndoAction {
    try await onWriteQueue { try self.redoNow() }
  }

  /// ``undo()`` without `async`. With `action`, only if it is the next one
  /// to undo (else `RepoError.nothingToUndo`).
  @discardableResult
  public func undoNow(_ action: UndoAction? = nil) throws -> UndoAction {
    try move(redo: false, id: action?.id)
  }

  /// ``redo()`` without `async`. With `action`, only if it is the next one
  /// to redo (else `RepoError.nothingToUndo`).
  @discardableResult
  public func redoNow(_ action: UndoAction? = nil) throws -> UndoAction {
    try move(redo: true, id: action?.id)
  }

  /// Forgets every action to undo and redo.
  public func removeAllUndoActions() { undoLog.removeAll() }

  private func move(redo: Bool, id: UInt64?) throws -> UndoAction {
    while undoLog.isGrouping { undoLog.endGroup() }
    undoLog.serial.lock()
    defer { undoLog.serial.unlock() }
    guard let entry = undoLog.top(redo: redo, id: id) else {
      throw RepoError(.nothingToUndo, redo ? "there is nothing to redo" : "there is nothing to undo")
    }
    let inverse = try writeNow { tx in try UndoCapture.apply(entry, tx.transaction, graph: spaces.graph) }
    undoLog.moved(entry.id, redo: redo, inverse: inverse)
    return inverse.action
  }

  private func onWriteQueue<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
      writeQueue.async { continuation.resume(with: Result { try body() }) }
    }
  }

  // MARK: Changes

  /// The commits that change model records from now on, as they finish:
  /// one ``StoreChange`` per commit, in commit order.
  ///
  /// A range delete (`deleteAll`, a batch delete over an id or index range)
  /// is reported as such; with `includeRangeIDs` the ids it removed are
  /// listed too, read from the snapshot before the commit (O(records
  /// deleted)). A subscriber more than `bufferLimit` commits behind gets
  /// them folded into one change; see ``StoreChanges``.
  public func changes(includeRangeIDs: Bool = false, bufferLimit: Int = 256) throws -> StoreChanges {
    StoreChanges(stream: try database.subscribe(bufferLimit: bufferLimit), includeRangeIDs: includeRangeIDs)
  }

  /// Live change subscriptions: ``changes(includeRangeIDs:bufferLimit:)``
  /// streams and ``Repository/observe(_:)`` observations not yet ended.
  public var liveSubscriptions: Int { database.subscriberCount }

  /// The token of the last commit.
  public var currentToken: ChangeToken { ChangeToken(database.lastCommittedSequence) }

  /// What every commit after `since` changed, oldest first (at most `limit`
  /// of them), from the persistent history — across restarts.
  ///
  /// - Throws: `RepoError.historyExpired` when commits after `since` are no
  ///   longer (or were never) recorded: pruned, or made while history was
  ///   off. Refetch what you keep and continue from ``currentToken``.
  public func history(since: ChangeToken, limit: Int? = nil) throws -> [StoreChange] {
    try HistoryLog.read(since: since, limit: limit, try database.snapshot())
  }

  /// Deletes the history up to and including `token`; asking for history
  /// since an earlier token then fails with `RepoError.historyExpired`.
  public func pruneHistory(through token: ChangeToken) async throws {
    try await write { tx in try HistoryLog.prune(through: token.rawValue, tx.transaction) }
  }

  /// Deletes the history recorded before `date`.
  public func pruneHistory(before date: Date) async throws {
    try await write { tx in try HistoryLog.prune(before: date, tx.transaction) }
  }

  /// Runs `body` against a snapshot of the last commit.
  public func read<T>(_ body: (StoreSnapshot) throws -> T) throws -> T {
    try body(StoreSnapshot(store: self, snapshot: try database.snapshot()))
  }

  /// A snapshot of the last commit, to read from for as long as it is kept.
  public func snapshot() throws -> StoreSnapshot {
    StoreSnapshot(store: self, snapshot: try database.snapshot())
  }
}

/// A value of a generic type kept where the type is erased, and read back
/// with `unsafeDowncast` by code that knows the type: an `as?` cast to a
/// generic type costs about as much as the rest of a point read.
final class Boxed<Value> {
  let value: Value
  init(_ value: Value) { self.value = value }
}

/// Resolved model spaces by type, built once per store.
final class SpaceCache: @unchecked Sendable {
  private let lock = NSLock()
  /// By model type: the `ModelSpace<M>` for the type whose identifier is the key.
  private var spaces: [ObjectIdentifier: AnyObject] = [:]
  /// By model type: its `ModelAccess<M>` (immutable, shared by every
  /// repository of the type, so making a repository allocates nothing).
  private var accesses: [ObjectIdentifier: AnyObject] = [:]
  let counters: RepoCounters
  /// The relationships among the models of `accesses`.
  let graph = RelationshipGraph()

  init(counters: RepoCounters) { self.counters = counters }

  func get<M>(_ type: M.Type) throws -> ModelSpace<M> {
    lock.lock()
    defer { lock.unlock() }
    return try space(type)
  }

  /// The shared `ModelAccess` of `type`.
  func access<M: Codable & Sendable & Identifiable>(_ type: M.Type) throws -> ModelAccess<M>
  where M.ID: Codable & Hashable & Sendable {
    lock.lock()
    defer { lock.unlock() }
    // Safe: the entry of this identifier is a ModelAccess<M>.
    if let a = accesses[ObjectIdentifier(type)] { return unsafeDowncast(a, to: ModelAccess<M>.self) }
    let a = ModelAccess(space: try space(type), graph: graph)
    accesses[ObjectIdentifier(type)] = a
    a.register(in: graph)
    return a
  }

  /// `get` with the lock held.
  private func space<M>(_ type: M.Type) throws -> ModelSpace<M> {
    // Safe: the entry of this identifier is a ModelSpace<M>.
    if let s = spaces[ObjectIdentifier(type)] { return unsafeDowncast(s, to: ModelSpace<M>.self) }
    let s = try ModelSpace(type, counters: counters)
    spaces[ObjectIdentifier(type)] = s
    return s
  }
}

/// One write transaction across any repositories of a store.
public final class StoreTransaction {
  let store: Store
  /// The engine transaction underneath.
  public let transaction: WriteTransaction
  private var prepared = Set<ObjectIdentifier>()

  init(store: Store, transaction: WriteTransaction) {
    self.store = store
    self.transaction = transaction
  }

  /// The repository of `type`, bound to this transaction.
  public func repository<M: Codable & Sendable & Identifiable>(_ type: M.Type = M.self) throws
    -> TransactionRepository<M>
  where M.ID: Codable & Hashable & Sendable {
    let access = try store.spaces.access(type)
    if prepared.insert(ObjectIdentifier(type)).inserted { try access.prepare(transaction, store: store) }
    return TransactionRepository(access: access, transaction: transaction)
  }
}

/// A read-only view of one commit across any repositories.
public final class StoreSnapshot: @unchecked Sendable {
  let store: Store
  /// The engine snapshot underneath.
  public let snapshot: Snapshot

  init(store: Store, snapshot: Snapshot) {
    self.store = store
    self.snapshot = snapshot
  }

  /// The repository of `type`, reading this snapshot.
  public func repository<M: Codable & Sendable & Identifiable>(_ type: M.Type = M.self) throws
    -> SnapshotRepository<M>
  where M.ID: Codable & Hashable & Sendable {
    SnapshotRepository(access: try store.access(type), snapshot: snapshot, store: store)
  }
}
