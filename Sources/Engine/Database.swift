import Dispatch
import Synchronization

/// A Cairn store: named keyspaces of byte-string keys and values, kept
/// durably in a folder, with snapshot reads running beside one writer.
///
/// ```swift
/// let db = try Database.open(at: "/path/to/store")
/// try db.write { tx in
///     try tx.put(Array("alice".utf8), Array("42".utf8), in: "users")
/// }
/// let value = try db.read { try $0.get(Array("alice".utf8), in: "users") }
/// try db.close()
/// ```
///
/// A store is a folder holding `cairn.data` (the append-only B+tree file),
/// `cairn.wal` (the write-ahead log) and `cairn.lock`. One process writes a
/// store at a time; a second open for writing fails at once with
/// ``EngineError/Code/locked``.
///
/// All methods are thread-safe. Reads never wait for the writer, and the
/// writer never waits for readers. Write transactions run one at a time: a
/// second ``write(_:)`` waits until the first commits or rolls back. Do not
/// start a write transaction while one is open on the same thread; it waits
/// forever.
public final class Database: @unchecked Sendable {
  /// The store's folder.
  public let path: String
  let options: Options
  let fs: any FileSystem
  /// The I/O counters; the node store counts into the same object.
  var counters: Counters { store.counters }
  /// The node cache of the current data file.
  var cache: NodeCache { store.cache }
  let storeID: [UInt8]
  let dataPath: String
  let walPath: String
  private var fileLock: (any FileLock)?

  // Published state: what new snapshots see.
  private let versionLock = Lock()
  private var _current: Version
  private var _closed = false
  /// `_closed`, readable without the lock: every cursor step checks it.
  private let closedFlag = Atomic<Bool>(false)

  // The writer's state: touched only while holding `gate`.
  let gate = WriterGate()
  var committedTrees: [String: TreeRoot]
  var lastSequence: CommitSequence
  var lastCheckpoint: CheckpointInfo
  var generation: UInt64 = 0
  var store: NodeStore
  var lastCommitOffset: BlockOffset
  var wal: WALFile?

  // The commit pipeline: guarded by `syncLock`.
  let syncLock = Lock()
  let syncCondition = Condition()
  var walWritten: UInt64 = 0
  var walDurable: UInt64 = 0
  var syncing = false
  var flushScheduled = false
  var pendingVersions: [(end: UInt64, version: Version, changes: WriteSet?)] = []
  var poison: EngineError?

  /// Change subscriptions (``subscribe(bufferLimit:)``).
  let subscribers = Subscribers()

  init(
    path: String, options: Options, fileLock: any FileLock, storeID: [UInt8], store: NodeStore, recovered: Recovered
  ) {
    self.path = path
    self.options = options
    self.fs = options.fileSystem
    self.fileLock = fileLock
    self.storeID = storeID
    self.store = store
    self.dataPath = Path.join(path, StoreFiles.data)
    self.walPath = Path.join(path, StoreFiles.wal)
    self.committedTrees = recovered.trees
    self.lastSequence = recovered.sequence
    self.lastCheckpoint = recovered.checkpoint
    self.lastCommitOffset = recovered.commitOffset
    self.generation = 1
    self._current = Version(
      sequence: recovered.sequence, trees: recovered.trees, store: store, checkpoint: recovered.checkpoint)
  }

  deinit {
    if !isClosed { try? close() }
  }

  // MARK: Opening

  /// Opens the store in the folder at `path`, creating it if missing (unless
  /// ``Options/createIfMissing`` is false), and recovers it: the last
  /// checkpoint from the data file, then every complete WAL record after it.
  ///
  /// - Throws: ``EngineError/Code/locked`` if another process or handle has
  ///   it open for writing; ``EngineError/Code/notAStore`` if the folder holds
  ///   something else; ``EngineError/Code/corrupted`` naming the file and
  ///   offset if a checksum or a format rule fails.
  public static func open(at path: String, options: Options = Options()) throws -> Database {
    try Recovery.open(at: path, options: options.validated())
  }

  /// A store in memory, with the same engine and API, for tests and caches.
  ///
  /// It lives on a private ``MemoryFileSystem`` and is gone when closed.
  public static func inMemory(options: Options = Options()) throws -> Database {
    var options = options
    options.fileSystem = MemoryFileSystem()
    options.readOnly = false
    options.createIfMissing = true
    return try open(at: "/cairn", options: options)
  }

  /// Whether ``close()`` has been called.
  public var isClosed: Bool { closedFlag.load(ordering: .acquiring) }

  /// Checkpoints (when opened for writing), closes the files and releases the
  /// lock. Snapshots and cursors still open fail with
  /// ``EngineError/Code/closed`` afterwards. Calling it twice does nothing.
  public func close() throws {
    gate.acquire()
    defer { gate.release() }
    if versionLock.withLock({ _closed }) { return }
    var failure: Error?
    if !options.readOnly, syncLock.withLock({ poison }) == nil {
      do { try checkpointHoldingGate() } catch { failure = error }
    }
    versionLock.withLock { _closed = true }
    closedFlag.store(true, ordering: .releasing)
    subscribers.finishAll()
    syncLock.withLock { flushScheduled = false }
    wal?.file.close()
    store.file.close()
    fileLock?.unlock()
    fileLock = nil
    if let failure { throw failure }
  }

  // MARK: Reading

  var current: Version { versionLock.withLock { _current } }

  func publish(_ version: Version) {
    versionLock.withLock { _current = version }
  }

  /// A read transaction: a snapshot of the last commit that finished.
  ///
  /// It sees exactly that state for as long as it lives, whatever commits
  /// and checkpoints happen meanwhile. Holding it keeps the nodes it sees
  /// alive, so release long-lived snapshots when done.
  ///
  /// - Throws: ``EngineError/Code/closed`` if the database is closed.
  public func snapshot() throws -> Snapshot {
    let version = try versionLock.withLock { () throws(EngineError) -> Version in
      guard !_closed else { throw EngineError(.closed, "the database is closed", path: path) }
      return _current
    }
    return Snapshot(database: self, version: version)
  }

  /// Runs `body` with a snapshot of the last commit.
  public func read<T>(_ body: (Snapshot) throws -> T) throws -> T {
    try body(snapshot())
  }

  // MARK: Writing

  /// Begins a write transaction, waiting while another is open.
  ///
  /// End it with ``WriteTransaction/commit()`` or
  /// ``WriteTransaction/rollback()``; if it is released without either, it
  /// rolls back.
  ///
  /// - Throws: ``EngineError/Code/readOnly``, ``EngineError/Code/closed``, or
  ///   ``EngineError/Code/poisoned`` after a failed write or fsync.
  public func beginWrite() throws -> WriteTransaction {
    try beginWrite(trackingChanges: false)
  }

  /// Begins a write transaction that records what it changes
  /// (``WriteTransaction/changes``) even when nothing is subscribed.
  ///
  /// Transactions track their changes by themselves while any
  /// ``subscribe(bufferLimit:)`` stream is live; with none, and without
  /// this, they record nothing.
  public func beginWrite(trackingChanges: Bool) throws -> WriteTransaction {
    guard !options.readOnly else { throw EngineError(.readOnly, "the store was opened read-only", path: path) }
    gate.acquire()
    do {
      try checkWritable()
    } catch {
      gate.release()
      throw error
    }
    generation += 1
    let tx = WriteTransaction(database: self, trees: committedTrees, owner: generation, logging: true)
    if trackingChanges || subscribers.count > 0 { tx.trackChanges() }
    return tx
  }

  /// Runs `body` in a write transaction and commits it. If `body` throws,
  /// every change it made is rolled back and the error is rethrown.
  ///
  /// Returns once the commit is durable, in ``Durability/full`` mode.
  /// `trackingChanges`: as in ``beginWrite(trackingChanges:)``.
  @discardableResult
  public func write<T>(trackingChanges: Bool = false, _ body: (WriteTransaction) throws -> T) throws -> T {
    let tx = try beginWrite(trackingChanges: trackingChanges)
    do {
      let result = try body(tx)
      try tx.commit()
      return result
    } catch {
      tx.rollback()
      throw error
    }
  }

  func checkWritable() throws {
    if versionLock.withLock({ _closed }) { throw EngineError(.closed, "the database is closed", path: path) }
    if let poison = syncLock.withLock({ poison }) {
      throw EngineError(
        .poisoned, "an earlier write or fsync failed; close and reopen the store to recover", path: poison.path,
        underlying: poison.description)
    }
  }

  /// Marks the store unusable for writes after a failed write or fsync.
  func setPoison(_ error: Error) -> EngineError {
    let e = error as? EngineError ?? EngineError(.io, "\(error)")
    syncLock.withLock {
      if poison == nil { poison = e }
      syncCondition.broadcast()
    }
    return e
  }

  /// Writes every commit so far into the data file and starts a fresh WAL.
  ///
  /// Runs by itself when the WAL passes ``Options/checkpointThreshold`` and
  /// on ``close()``; call it to bound recovery time before a quiet period.
  public func checkpoint() throws {
    guard !options.readOnly else { throw EngineError(.readOnly, "the store was opened read-only", path: path) }
    gate.acquire()
    defer { gate.release() }
    try checkWritable()
    try checkpointHoldingGate()
  }

  // MARK: Changes

  /// Subscribes to commits: every commit that finishes after this call
  /// returns is delivered to the stream once, in commit order, with what it
  /// changed (``WriteSet``) and the store before and after it.
  ///
  /// Delivery never blocks the writer. A subscriber with more than
  /// `bufferLimit` events waiting gets later commits folded into its newest
  /// waiting event (see ``CommitEvent``) rather than a longer queue.
  ///
  /// While any subscription is live, every write transaction records its
  /// changes: one dictionary entry per key written. With none, writes
  /// record nothing.
  ///
  /// - Throws: ``EngineError/Code/closed``; ``EngineError/Code/invalidArgument``
  ///   if `bufferLimit` is below 1.
  public func subscribe(bufferLimit: Int = 256) throws -> CommitStream {
    guard bufferLimit >= 1 else {
      throw EngineError(.invalidArgument, "bufferLimit is \(bufferLimit); it must be at least 1")
    }
    let queue = SubscriberQueue(limit: bufferLimit)
    let subs = subscribers
    queue.setOnFinish { [weak queue] in if let queue { subs.remove(queue) } }
    // Register before taking the start snapshot: every commit published
    // after the snapshot is then delivered, and the queue drops the ones
    // delivered in between that the snapshot already shows.
    subscribers.add(queue)
    let start: Snapshot
    do {
      start = try snapshot()
    } catch {
      queue.finish()
      throw error
    }
    queue.begin(after: start.sequence)
    return CommitStream(queue: queue, start: start)
  }

  /// How many ``subscribe(bufferLimit:)`` streams are live.
  public var subscriberCount: Int { subscribers.count }

  /// Hands published commits to the subscribers, in order. `before` is the
  /// version the first of them followed.
  func deliver(_ published: some Sequence<(version: Version, changes: WriteSet?)>, after before: Version) {
    var before = before
    for (version, changes) in published {
      subscribers.deliver(
        CommitEvent(
          firstSequence: version.sequence, sequence: version.sequence, commits: 1,
          changes: changes ?? WriteSet(isComplete: false), before: Snapshot(database: self, version: before),
          after: Snapshot(database: self, version: version)))
      before = version
    }
  }

  // MARK: Information

  /// The sequence of the last commit that finished.
  public var lastCommittedSequence: CommitSequence { current.sequence }

  /// The I/O counters since the store was opened.
  public var statistics: Statistics {
    Statistics(
      nodeCacheHits: counters.nodeCacheHits.current, nodeCacheMisses: counters.nodeCacheMisses.current,
      nodesWritten: counters.nodesWritten.current, bytesRead: counters.bytesRead.current,
      dataBytesWritten: counters.dataBytesWritten.current, walBytesWritten: counters.walBytesWritten.current,
      dataSyncs: counters.dataSyncs.current, walSyncs: counters.walSyncs.current,
      checkpoints: counters.checkpoints.current, compactions: counters.compactions.current,
      commits: counters.commits.current, cacheBytes: cache.usedBytes)
  }

  /// Bytes in the WAL now (including its header).
  public var walSize: UInt64 { syncLock.withLock { walWritten } }

  /// How the store's files are used: live and garbage bytes of the data
  /// file as of the last checkpoint, and the WAL's size.
  public var storage: StorageStatistics {
    let version = current
    let keyspaces = version.trees.mapValues { StorageStatistics.Keyspace(keys: $0.count, height: $0.height) }
    return StorageStatistics(
      dataFileBytes: version.checkpoint.fileBytes, liveBytes: version.checkpoint.liveBytes, walBytes: walSize,
      checkpointSequence: version.checkpoint.sequence, lastSequence: version.sequence, keyspaces: keyspaces)
  }
}

/// The files of a store's folder (FORMAT.md §0).
enum StoreFiles {
  static let data = "cairn.data"
  static let wal = "cairn.wal"
  static let lock = "cairn.lock"
  static let newData = "cairn.data.new"
  static let newWAL = "cairn.wal.new"
  static let compactData = "cairn.data.compact"
  static let all = [data, wal, lock, newData, newWAL, compactData]
}

/// The WAL file being appended to.
struct WALFile {
  let file: any StorageFile
  let salt: UInt64
}
