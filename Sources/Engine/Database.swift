import CAtomics
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
/// `cairn.wal` (the write-ahead log), `cairn.lock` (the write lock) and
/// `cairn.shm` (where processes publish their commits).
///
/// Any number of processes — an app, its widget, an extension, a tool — may
/// open one store at once, each read-write or read-only. Writes are taken
/// one at a time across all of them: a write transaction takes the store's
/// write lock when it begins and gives it back when it commits or rolls
/// back, waiting at most ``Options/busyTimeout`` for another process's
/// writes. A snapshot taken after another process's commit returned sees
/// that commit. A store that is open but not writing holds no lock.
///
/// All methods are thread-safe. Reads never wait for the writer, and the
/// writer never waits for readers, in any process. Write transactions run
/// one at a time: a second ``write(_:)`` waits until the first commits or
/// rolls back. Do not start a write transaction while one is open on the
/// same thread; it waits forever.
public final class Database: Sendable {
  /// The store's folder.
  public let path: String
  let options: Options
  /// Whether the store was opened read-only (``Options/readOnly``).
  public var isReadOnly: Bool { options.readOnly }

  /// Whether a write transaction, checkpoint, compaction or close that
  /// began on the calling thread is under way: a write begun now on this
  /// thread would wait for it forever.
  public var isWritingOnCurrentThread: Bool { gate.heldByCurrentThread }
  let fs: any FileSystem
  let storeID: [UInt8]
  let dataPath: String
  let walPath: String
  /// The I/O counters; every node store of this database counts into them.
  let counters: Counters
  /// The coordination file, where commits are published to every process;
  /// nil only for a read-only store that could not map it.
  let coordination: Coordination?
  /// This boot's identifier: the coordination file is valid only for it.
  let boot: UInt64
  /// The cross-process write lock.
  let writeLock: WriteLock

  // The locks, in the order they nest: a thread holding one may take only
  // those below it, never one above.
  //
  //   1. gate       The writer (WriterState): one write transaction,
  //                 checkpoint, compaction or close at a time. Held from a
  //                 transaction's begin to its commit, possibly across
  //                 threads, so it is a gate, not a mutex. Whoever holds it
  //                 also holds a claim on the cross-process `writeLock`.
  //   2. pipeline   The commit pipeline (CommitPipeline): the WAL writer's
  //                 positions, group commit, versions waiting for their
  //                 fsync, the poison.
  //   3. follower   Catching up with other processes (Follower): the
  //                 coordination word the published version matches, and
  //                 the WAL being followed. Publication takes it too, so a
  //                 commit is delivered once, by its own process or by
  //                 catching up, never by both.
  //   4. published  What new snapshots see (Published).
  //   5. Leaves, which take no other lock: the subscribers' queues, the
  //      node cache's shards, a file's descriptor, `writeLock`'s count.
  //
  // Publication takes 2, 3, 4; checkpoint and compaction take 1 then 2,
  // and 1 then 3; catching up takes 3 then 4. Readers take only 4, briefly,
  // and 3 when another process committed; they never wait for 1 or 2.
  let gate: WriterGate
  let pipeline: LockedCondition<CommitPipeline>
  let follower: Locked<Follower>
  private let published: Locked<Published>
  /// `Published.closed`, readable without the lock: every cursor step checks it.
  private let closedFlag = Atomic<Bool>(false)
  /// This handle's slot in the coordination file's handle table (FORMAT.md
  /// §10.6), or -1: freed at close, so a destroy sees the store closed.
  private let handleSlot = Atomic<Int>(-1)
  /// `Follower.word`, readable without the lock: every snapshot compares it
  /// with the coordination file's.
  let syncedWord = Atomic<UInt64>(0)
  /// Generations of nodes: each write transaction, and each batch of
  /// commits replayed from another process, gets its own.
  private let generations = Atomic<UInt64>(1)
  /// The thread that follows other processes' commits for subscribers.
  let watcher = Locked<CommitWatcher?>(nil)

  /// Change subscriptions (``subscribe(bufferLimit:)``).
  let subscribers = Subscribers()
  /// The key or passphrase this handle opens data files with: the options',
  /// until ``rekey(to:)`` changes it.
  let encryption: Locked<Encryption?>

  /// What new snapshots see.
  struct Published {
    var current: Version
    var closed = false
  }

  /// Opens a database on what recovery found: the writer's state, the log
  /// to append to and to follow, and how far it follows the shared state.
  init(
    path: String, options: Options, storeID: [UInt8], counters: Counters, writer: WriterState, wal: WALWriter,
    coordination: Coordination?, boot: UInt64, word: UInt64, writeLock: WriteLock
  ) {
    self.path = path
    self.options = options
    self.fs = options.fileSystem
    self.storeID = storeID
    self.counters = counters
    self.coordination = coordination
    self.boot = boot
    self.dataPath = Path.join(path, StoreFiles.data)
    self.walPath = Path.join(path, StoreFiles.wal)
    self.writeLock = writeLock
    self.encryption = Locked(options.encryption)
    self.gate = WriterGate(writer)
    self.pipeline = LockedCondition(CommitPipeline(wal: wal))
    self.follower = Locked(Follower(word: word, wal: wal.file, walHeader: wal.header))
    self.syncedWord.store(word, ordering: .releasing)
    self.published = Locked(
      Published(
        current: Version(
          sequence: writer.sequence, trees: writer.trees, store: writer.store, checkpoint: writer.checkpoint,
          log: LogPosition(walSalt: wal.salt, walEnd: wal.written, dataGeneration: writer.dataGeneration))))
  }

  deinit {
    if !isClosed { try? close() }
  }

  /// A generation for nodes no one else may change.
  func nextGeneration() -> UInt64 { generations.add(1, ordering: .relaxed).newValue }

  // MARK: Opening

  /// Opens the store in the folder at `path`, creating it if missing (unless
  /// ``Options/createIfMissing`` is false), and recovers it: the last
  /// checkpoint from the data file, then every complete WAL record after it.
  ///
  /// Other processes may have it open meanwhile, reading or writing; the
  /// first writer after a crash repairs what the crash left.
  ///
  /// - Throws: ``EngineError/Code/notAStore`` if the folder holds something
  ///   else; ``EngineError/Code/corrupted`` naming the file and offset if a
  ///   checksum or a format rule fails; ``EngineError/Code/busy`` if a
  ///   store must be created or repaired while another process writes for
  ///   longer than ``Options/busyTimeout``.
  public static func open(at path: String, options: Options = Options()) throws -> Database {
    try Recovery.open(at: path, options: options.validated())
  }

  /// A store in memory, with the same engine and API, for tests and caches.
  ///
  /// Its files live in memory, private to it, and are gone when it is
  /// released. Syncs cost nothing, so commits are fast; nothing survives the
  /// process.
  public static func inMemory(options: Options = Options()) throws -> Database {
    var options = options
    options.fileSystem = VolatileFileSystem()
    options.readOnly = false
    options.createIfMissing = true
    return try open(at: "/cairn", options: options)
  }

  /// Keeps the handle-table slot `slot` until ``close()``.
  func adopt(handle slot: Int) { handleSlot.store(slot, ordering: .releasing) }

  /// Removes the store in the folder at `path`: every file Cairn keeps
  /// there (FORMAT.md §0), and the folder itself when nothing else is left
  /// in it. Nothing is done when there is no folder at `path`.
  ///
  /// It refuses while any handle has the store open, in this process or
  /// another, reading or writing: every open handle is recorded in the
  /// coordination file until it is closed (or its process ends), without
  /// holding a lock (FORMAT.md §10.6). Opens that begin while a destroy is
  /// under way fail with ``EngineError/Code/locked``.
  ///
  /// The data file goes first, and its removal is synced before anything
  /// else is removed: a crash midway leaves either the whole store or none
  /// (what remains of the other files is not a store, and the next open
  /// creates a new one over them).
  ///
  /// - Throws: ``EngineError/Code/locked`` while the store is open (the
  ///   message names the processes) or another process is destroying it;
  ///   ``EngineError/Code/busy`` if another process writes for longer than
  ///   ``Options/busyTimeout``; ``EngineError/Code/notAStore`` if the folder
  ///   holds no Cairn store (nothing is removed then).
  public static func destroy(at path: String, options: Options = Options()) throws {
    let options = try options.validated()
    let fs = options.fileSystem
    let path = Path.normalize(path)
    guard fs.exists(path) else { return }
    guard fs.isDirectory(path) else { throw EngineError(.notAStore, "not a folder", path: path) }
    let present = try fs.contentsOfDirectory(path).filter { StoreFiles.all.contains($0) }
    guard !present.isEmpty else {
      throw EngineError(.notAStore, "the folder holds no Cairn store; nothing was removed", path: path)
    }
    // The write lock keeps writers, creators and recoverers out meanwhile.
    let writeLock = WriteLock(fs: fs, path: Path.join(path, StoreFiles.lock))
    _ = try writeLock.claim(timeout: options.busyTimeout)
    defer {
      writeLock.release()
      writeLock.close()
    }
    if fs.exists(Path.join(path, StoreFiles.shm)) {
      guard let coordination = Coordination.open(folder: path, fs: fs, writable: true),
        coordination.region.isWritable
      else {
        throw EngineError(
          .io, "cannot map the coordination file writable to see who has the store open", path: path)
      }
      defer { coordination.close() }
      guard coordination.claimDestroy() else {
        let who = coordination.destroyer.map { " (process \(ProcessIdentity.pid($0)))" } ?? ""
        throw EngineError(.locked, "another process is destroying the store\(who)", path: path)
      }
      // The mark is stored before the table is read, as an open stores its
      // slot before reading the mark: one of the two sees the other.
      cairn_fence_seq_cst()
      let open = coordination.openHandles()
      guard open.isEmpty else {
        coordination.endDestroy()
        throw EngineError(.locked, "the store is open: \(describe(handles: open)); close it first", path: path)
      }
      // Released only once the files are gone: an open that reads the
      // mark before then is refused, one after finds no store.
      defer { coordination.endDestroy() }
      try removeFiles(in: path, fs: fs)
    } else {
      try removeFiles(in: path, fs: fs)
    }
    if try fs.contentsOfDirectory(path).isEmpty { try fs.removeDirectory(path) }
  }

  private static func describe(handles: [UInt64]) -> String {
    var counts: [Int32: Int] = [:]
    for h in handles { counts[ProcessIdentity.pid(h), default: 0] += 1 }
    return counts.sorted { $0.key < $1.key }.map { pid, n in
      (pid == ProcessIdentity.pid(ProcessIdentity.current) ? "this process" : "process \(pid)")
        + (n > 1 ? " (\(n) handles)" : "")
    }.joined(separator: ", ")
  }

  /// The data file first, synced; then the rest of Cairn's files.
  private static func removeFiles(in path: String, fs: any FileSystem) throws {
    let data = Path.join(path, StoreFiles.data)
    if fs.exists(data) {
      try fs.remove(data)
      try fs.syncDirectory(path)
    }
    for name in StoreFiles.all where name != StoreFiles.data {
      let file = Path.join(path, name)
      if fs.exists(file) { try fs.remove(file) }
    }
    try fs.syncDirectory(path)
  }

  /// Whether ``close()`` has been called.
  public var isClosed: Bool { closedFlag.load(ordering: .acquiring) }

  /// Closes the files. When opened for writing, it first checkpoints if no
  /// other process is writing at that moment (it does not wait for one).
  /// Snapshots and cursors still open fail with ``EngineError/Code/closed``
  /// afterwards. Calling it twice does nothing.
  public func close() throws {
    let hold = gate.acquire()
    if published.withLock({ $0.closed }) { return }
    var failure: Error?
    if !options.readOnly, pipeline.withLock({ $0.poison }) == nil,
      let claim = try? claimWriteLock(holding: hold, timeout: 0)
    {
      do { try checkpoint(holding: hold) } catch { failure = error }
      claim.release()
    }
    published.withLock { $0.closed = true }
    closedFlag.store(true, ordering: .releasing)
    stopWatching()
    subscribers.finishAll()
    let wal = pipeline.withLock { p in
      p.flushScheduled = false
      return p.wal
    }
    wal.close()
    follower.withLock { $0.wal.close() }
    hold.state.store.close()
    let slot = handleSlot.exchange(-1, ordering: .acquiringAndReleasing)
    if slot >= 0 { coordination?.unregisterHandle(slot) }
    coordination?.close()
    writeLock.close()
    if let failure { throw failure }
  }

  // MARK: Reading

  var current: Version { published.withLock { $0.current } }

  func publish(_ version: Version) {
    published.withLock { $0.current = version }
  }

  /// A read transaction: a snapshot of the last commit that finished.
  ///
  /// It sees exactly that state for as long as it lives, whatever commits
  /// and checkpoints happen meanwhile. Holding it keeps the nodes it sees
  /// alive, so release long-lived snapshots when done.
  ///
  /// A commit another process made before this call sees it: the
  /// coordination file's publication word is compared with the one this
  /// process last followed (one atomic load), and when it moved, the
  /// commits made since are read from the WAL first.
  ///
  /// - Throws: ``EngineError/Code/closed`` if the database is closed;
  ///   ``EngineError/Code/corrupted`` or ``EngineError/Code/io`` if another
  ///   process's commits cannot be read.
  public func snapshot() throws -> Snapshot {
    if let c = coordination, c.current != syncedWord.load(ordering: .acquiring) { try catchUp() }
    let version = try published.withLock { (p) throws(EngineError) -> Version in
      guard !p.closed else { throw EngineError(.closed, "the database is closed", path: path) }
      return p.current
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
  /// It takes the store's write lock, waiting while another process writes
  /// (at most ``Options/busyTimeout``), and starts from every commit made
  /// before, in any process.
  ///
  /// - Throws: ``EngineError/Code/readOnly``, ``EngineError/Code/closed``,
  ///   ``EngineError/Code/busy`` when another process kept the write lock
  ///   past the timeout, or ``EngineError/Code/poisoned`` after a failed
  ///   write or fsync.
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
    let hold = gate.acquire()
    try checkWritable()
    let claim = try claimWriteLock(holding: hold, timeout: options.busyTimeout)
    let tx = WriteTransaction(database: self, holding: hold, claim: claim)
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
    if published.withLock({ $0.closed }) { throw EngineError(.closed, "the database is closed", path: path) }
    if let poison = pipeline.withLock({ $0.poison }) {
      throw EngineError(
        .poisoned, "an earlier write or fsync failed; close and reopen the store to recover", path: poison.path,
        underlying: poison.description)
    }
  }

  /// Marks the store unusable for writes after a failed write or fsync.
  func setPoison(_ error: Error) -> EngineError {
    let e = error as? EngineError ?? EngineError(.io, "\(error)")
    pipeline.withLock(notify: true) { p in
      if p.poison == nil { p.poison = e }
      p.abandonWaiting()
    }
    return e
  }

  /// Writes every commit so far into the data file and starts a fresh WAL.
  ///
  /// Runs by itself when the WAL passes ``Options/checkpointThreshold`` and
  /// on ``close()``; call it to bound recovery time before a quiet period.
  ///
  /// Takes the write lock like a write transaction.
  public func checkpoint() throws {
    guard !options.readOnly else { throw EngineError(.readOnly, "the store was opened read-only", path: path) }
    let hold = gate.acquire()
    try checkWritable()
    let claim = try claimWriteLock(holding: hold, timeout: options.busyTimeout)
    defer { claim.release() }
    try checkpoint(holding: hold)
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
  /// Commits made by other processes are delivered too, with the same
  /// write sets, in commit order: while a subscription is live a thread
  /// watches the coordination file (inotify on Linux; a 10 ms poll where
  /// the platform offers no file events to this build) and reads their
  /// records as they are published. A commit that cannot be told apart —
  /// another process compacted, or checkpointed twice, before this one read
  /// its records — arrives as an event whose write set is not complete.
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
    startWatching()
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
      commits: counters.commits.current, cacheBytes: current.store.cache.usedBytes)
  }

  /// Bytes in the WAL now (including its header).
  public var walSize: UInt64 { current.log.walEnd }

  /// Whether nodes are read through a map of the data file (``Options/mapsDataFile``).
  var readsMappedDataFile: Bool { current.store.isMapped }

  /// How the store's files are used: live and garbage bytes of the data
  /// file as of the last checkpoint, and the WAL's size.
  public var storage: StorageStatistics {
    let version = current
    let keyspaces = version.trees.mapValues { StorageStatistics.Keyspace(keys: $0.count, height: $0.height) }
    return StorageStatistics(
      dataFileBytes: version.checkpoint.fileBytes, liveBytes: version.checkpoint.liveBytes,
      walBytes: version.log.walEnd,
      checkpointSequence: version.checkpoint.sequence, lastSequence: version.sequence, keyspaces: keyspaces)
  }
}

/// The files of a store's folder (FORMAT.md §0).
enum StoreFiles {
  static let data = "cairn.data"
  static let wal = "cairn.wal"
  static let lock = "cairn.lock"
  static let newData = "cairn.data.new"
  static let shm = "cairn.shm"
  static let newWAL = "cairn.wal.new"
  static let compactData = "cairn.data.compact"
  static let all = [data, wal, lock, shm, newData, newWAL, compactData]
}
