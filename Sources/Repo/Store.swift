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

  func access<M: Codable & Sendable & Identifiable>(_ type: M.Type) throws -> ModelAccess<M>
  where M.ID: Codable & Hashable & Sendable { try spaces.access(type) }

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
    try await withCheckedThrowingContinuation { continuation in
      writeQueue.async {
        continuation.resume(with: Result { try self.writeNow(body) })
      }
    }
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
    let a = ModelAccess(space: try space(type))
    accesses[ObjectIdentifier(type)] = a
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
    let access = try store.access(type)
    if prepared.insert(ObjectIdentifier(type)).inserted { try access.prepare(transaction) }
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
    SnapshotRepository(access: try store.access(type), snapshot: snapshot)
  }
}
