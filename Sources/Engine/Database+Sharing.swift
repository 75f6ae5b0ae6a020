import Dispatch
import Synchronization

/// Sharing a store between processes: taking the write lock, catching up
/// with what other processes committed, and repairing what a process
/// killed mid-write left behind. FORMAT.md §10 has the protocol.
///
/// How a process learns of another's commits: the writer publishes each
/// commit in the coordination file (``Coordination``) once it is durable,
/// and, when some process is watching for commits, writes to it to wake
/// the watchers. Every snapshot compares the
/// file's publication word with the one this process last followed — one
/// atomic load from shared memory — and when it moved, reads the new
/// records from the WAL and applies them to this process's trees
/// (``catchUp()``), or, after another process checkpointed or compacted,
/// starts again from the checkpoint it names.

/// What this process follows of the shared state (guarded by
/// `Database.follower`).
struct Follower {
  /// The coordination word the published version matches.
  var word: UInt64
  /// The WAL the published version's last records are in, open for reading.
  var wal: any StorageFile
  var walHeader: WALHeader

  /// Records that the published version matches `word`.
  mutating func followed(_ word: UInt64, _ db: Database) {
    self.word = word
    db.syncedWord.store(word, ordering: .releasing)
  }
}

/// A catch-up that found the files in another state than the coordination
/// file described (a checkpoint or compaction raced it): it starts over.
struct Moved: Error {}

/// How long a process waits for the files to match the coordination file
/// (a writer between renaming a file and publishing it) before it reads the
/// files as they are.
enum Settling {
  static let milliseconds = Atomic<Int>(50)
}

extension Database {
  // MARK: The write lock

  /// Claims the store's write lock for the holder of the gate. When this
  /// process did not hold it, other processes may have written since: it
  /// catches up with them, repairs what a killed writer left, and starts
  /// the writer from there.
  ///
  /// - Throws: ``EngineError/Code/busy`` after `timeout` seconds;
  ///   ``EngineError/Code/corrupted`` if the files are damaged.
  func claimWriteLock(holding hold: borrowing WriterGate.Hold, timeout: Double) throws -> WriteClaim {
    let fresh = try writeLock.claim(timeout: timeout)
    let claim = WriteClaim(writeLock)
    if fresh {
      // No other process took the lock since this one last did (the count
      // is where this process left it, and nothing was published since it
      // followed): the files are as it left them, and there is nothing to
      // catch up with or repair. A process that writes alone pays no stat
      // calls per transaction.
      let before = coordination?.countLockTake()
      let untouched =
        before != nil && before == hold.state.lockTake
        && coordination?.current == syncedWord.load(ordering: .acquiring)
        && coordination?.isValid(storeID: storeID, boot: boot) == true
      hold.state.lockTake = before.map { $0 &+ 1 }
      if !untouched {
        do {
          try takeOver(holding: hold)
        } catch {
          claim.release()
          throw error
        }
      }
    }
    return claim
  }

  /// Brings the writer up to the store as the files hold it, now that no
  /// other process can write.
  private func takeOver(holding hold: borrowing WriterGate.Hold) throws {
    guard let coordination else { return }
    if coordination.read(storeID: storeID, boot: boot) == nil {
      try repair(holding: hold, shared: nil)
    } else {
      try catchUp()
      // A process killed mid-write leaves bytes past what it published, or a
      // WAL it renamed into place but never announced.
      guard let (_, shared) = coordination.read(storeID: storeID, boot: boot) else {
        return try repair(holding: hold, shared: nil)
      }
      // It also leaves a data file or WAL renamed into place but never
      // announced: the files the paths name now are not the ones followed.
      let (walFile, walHeader) = follower.withLock { ($0.wal, $0.walHeader) }
      let current = self.current
      let walIdentity = try walFile.identity()
      let dataIdentity = try current.store.file.identity()
      let walSize = try walFile.size()
      let dataSize = try current.store.file.size()
      let sameFiles = fs.identity(of: walPath) == walIdentity && fs.identity(of: dataPath) == dataIdentity
      if !sameFiles || walHeader.salt != shared.walSalt || current.sequence != shared.sequence
        || walSize != shared.walEnd || dataSize != shared.dataFileEnd
      {
        try repair(holding: hold, shared: shared)
      }
    }
    adopt(holding: hold)
  }

  /// What turns the header of a data file this handle opens into its
  /// cipher: this handle's key, reused while it still opens the file's key
  /// block (another process may have rekeyed it).
  func unlocker(for file: any StorageFile) -> (DataFileHeader) throws -> BlockCipher? {
    let known = current.store.cipher
    let encryption = self.encryption.withLock { $0 }
    return { header in
      try KeyBlock.cipher(for: file, header: header, encryption: encryption, reusing: known)
    }
  }

  /// Makes the published version the writer's starting point, and the log
  /// it ends in the one commits append to.
  private func adopt(holding hold: borrowing WriterGate.Hold) {
    let version = current
    let (file, header) = follower.withLock { ($0.wal, $0.walHeader) }
    hold.state.trees = version.trees
    hold.state.sequence = version.sequence
    hold.state.checkpoint = version.checkpoint
    hold.state.store = version.store
    hold.state.dataGeneration = version.log.dataGeneration
    let durable = coordination?.read(storeID: storeID, boot: boot)?.state.walDurable ?? version.log.walEnd
    pipeline.withLock(when: { !$0.syncing }) { p in
      guard p.wal.salt != header.salt || p.wal.written != version.log.walEnd else { return }
      p.wal = WALWriter(
        file: file, header: header, cipher: version.store.cipher, end: version.log.walEnd, durable: durable)
    }
  }

  /// Recovers the store from its files, as an open after a crash does —
  /// the latest checkpoint, every complete WAL record after it, torn tails
  /// cut off — and publishes the result: the first writer after a process
  /// was killed mid-write, or after a reboot, does this. Called holding the
  /// gate and the write lock.
  private func repair(holding hold: borrowing WriterGate.Hold, shared: SharedState?) throws {
    let data = try fs.open(dataPath, .readWrite)
    let (plan, wal) = try RecoveryPlan.read(dataFile: data, unlock: unlocker(for: data)) {
      try fs.open(walPath, .readWrite)
    }
    if plan.tornDataBytes > 0 {
      try data.truncate(to: plan.checkpoint.end)
      try data.sync()
    }
    if plan.walScan.discarded > 0 {
      try wal.truncate(to: plan.walScan.end)
    }
    try wal.sync()
    let generation = (shared?.dataGeneration ?? 0) &+ 1
    let store = NodeStore(
      file: data, cache: NodeCache(capacity: options.cacheSize), counters: counters, cipher: plan.cipher,
      mapped: options.mapsDataFile)
    let trees = try Recovery.trees(of: plan, store: store, options: options, owner: nextGeneration(), walPath: walPath)
    let version = Version(
      sequence: plan.lastSequence, trees: trees, store: store, checkpoint: plan.checkpoint.info,
      log: LogPosition(walSalt: plan.walHeader.salt, walEnd: plan.walScan.end, dataGeneration: generation))
    let state = version.sharedState(walDurable: plan.walScan.end)
    let word = follower.withLock { f -> UInt64 in
      let before = current
      let word: UInt64
      if let coordination, coordination.isValid(storeID: storeID, boot: boot) {
        word = coordination.publish(state)
      } else {
        word = coordination?.initialize(storeID: storeID, boot: boot, state: state) ?? 0
      }
      f.wal = wal
      f.walHeader = plan.walHeader
      f.followed(word, self)
      publish(version)
      if version.sequence > before.sequence && subscribers.count > 0 {
        deliver(unknownChangesFrom: before, to: version)
      }
      return word
    }
    coordination?.notify(word)
  }

  // MARK: Catching up

  /// Brings the published version up to the coordination file's: applies
  /// the records other processes committed since, or starts from the
  /// checkpoint another process wrote. Delivers each commit to the
  /// subscribers. Readers call it when the publication word moved.
  func catchUp() throws {
    guard let coordination else { return }
    var attempts = 0
    while true {
      do {
        try follower.withLock { (f: inout Follower) throws in
          guard let (word, shared) = coordination.read(storeID: storeID, boot: boot) else {
            // Not valid (a new boot, or a writer is repairing it): there is
            // nothing to follow until a writer publishes.
            f.followed(coordination.current, self)
            return
          }
          guard word != f.word else { return }
          try advance(&f, to: shared)
          f.followed(word, self)
        }
        return
      } catch is Moved {
        // A writer is between renaming a file into place and announcing
        // it: give it a moment. After 50 ms, it is not coming — a writer was
        // killed there — and the files say what the store holds.
        attempts += 1
        if attempts > 10 { sleepSeconds(0.001) }
        if attempts >= 10 + Settling.milliseconds.load(ordering: .relaxed) { return try followFiles() }
      }
    }
  }

  /// Reads the store from its files as they are, as a read-only open
  /// without a coordination file does, when the coordination file
  /// describes files that are not there (its writer was killed between
  /// renaming a file and announcing it). The next writer repairs it.
  private func followFiles() throws {
    let data = try fs.open(dataPath, options.readOnly ? .readOnly : .readWrite)
    let (plan, wal) = try RecoveryPlan.read(dataFile: data, unlock: unlocker(for: data)) {
      try fs.open(walPath, options.readOnly ? .readOnly : .readWrite)
    }
    let store = NodeStore(
      file: data, cache: NodeCache(capacity: options.cacheSize), counters: counters, cipher: plan.cipher,
      mapped: options.mapsDataFile)
    let trees = try Recovery.trees(of: plan, store: store, options: options, owner: nextGeneration(), walPath: walPath)
    let version = Version(
      sequence: plan.lastSequence, trees: trees, store: store, checkpoint: plan.checkpoint.info,
      log: LogPosition(
        walSalt: plan.walHeader.salt, walEnd: plan.walScan.end, dataGeneration: LogPosition.unknownGeneration))
    follower.withLock { f in
      let before = current
      f.wal = wal
      f.walHeader = plan.walHeader
      if let coordination { f.followed(coordination.current, self) }
      publish(version)
      if version.sequence != before.sequence && subscribers.count > 0 {
        deliver(unknownChangesFrom: before, to: version)
      }
    }
  }

  /// Advances from the published version to `shared`. Called under the follower lock.
  private func advance(_ f: inout Follower, to shared: SharedState) throws {
    let base = current
    let sameFiles =
      shared.dataGeneration == base.log.dataGeneration && shared.walSalt == base.log.walSalt
      && shared.checkpointOffset == base.checkpoint.commitOffset && f.walHeader.salt == shared.walSalt
    if sameFiles && shared.sequence == base.sequence && shared.walEnd == base.log.walEnd { return }
    let tracking = subscribers.count > 0
    var events: [(Version, WriteSet?)] = []
    let final: Version

    if sameFiles && shared.walEnd >= base.log.walEnd {
      // 1. The same log: the records after ours. From its start (a handle
      //    just opened at the checkpoint), the log may begin with records
      //    the checkpoint holds: a writer killed between writing a
      //    checkpoint and renaming a fresh log into place leaves them, and
      //    the next writer's repair keeps that log.
      let fromStart = base.log.walEnd == UInt64(HeaderLayout.size)
      let bytes = try readExactly(f.wal, from: base.log.walEnd, to: shared.walEnd)
      (events, final) = try replay(
        bytes, base: base.log.walEnd, salt: shared.walSalt, onto: base, through: shared.sequence, tracking: tracking,
        skippingThrough: fromStart ? base.checkpoint.sequence : .zero)
    } else {
      // 2. Another process checkpointed, compacted or repaired: start from
      //    the checkpoint it names. First, for subscribers, the records of
      //    the log followed so far that led up to it.
      var last = base
      if tracking && f.walHeader.salt == base.log.walSalt, let size = try? f.wal.size(), size > base.log.walEnd,
        size - base.log.walEnd <= UInt64(WALLayout.maximumPayload) * 4,
        let bytes = try? f.wal.read(at: base.log.walEnd, count: Int(size - base.log.walEnd)),
        let (tail, end) = try? replay(
          bytes, base: base.log.walEnd, salt: base.log.walSalt, onto: base, through: shared.checkpointSequence,
          tracking: true, partial: true)
      {
        events += tail
        last = end
      }
      let store: NodeStore
      if shared.dataGeneration == base.log.dataGeneration {
        store = base.store
      } else {
        let file = try fs.open(dataPath, options.readOnly ? .readOnly : .readWrite)
        guard let header = try? RecoveryPlan.readDataHeader(file) else {
          file.close()
          throw Moved()
        }
        let cipher: BlockCipher?
        do {
          cipher = try unlocker(for: file)(header)
        } catch {
          file.close()
          throw error
        }
        store = NodeStore(
          file: file, cache: NodeCache(capacity: options.cacheSize), counters: counters, cipher: cipher,
          mapped: options.mapsDataFile)
      }
      guard
        let found = try? RecoveryPlan.readCommit(
          store.file, at: shared.checkpointOffset.rawValue, cipher: store.cipher),
        found.record.sequence == shared.checkpointSequence, found.end == shared.dataFileEnd
      else { throw Moved() }
      var trees: [String: TreeRoot] = [:]
      for root in found.record.roots {
        var tree = TreeRoot(root: root.root.map { .disk($0) }, count: root.count, height: root.height)
        tree.pin(store)
        trees[root.name] = tree
      }
      var wal = f.wal
      var header = f.walHeader
      if header.salt != shared.walSalt {
        wal = try fs.open(walPath, options.readOnly ? .readOnly : .readWrite)
        guard let h = try? WALHeader.decode(try wal.read(at: 0, count: HeaderLayout.size), path: walPath),
          h.salt == shared.walSalt
        else { throw Moved() }
        header = h
      }
      let checkpointed = Version(
        sequence: found.record.sequence, trees: trees, store: store, checkpoint: found.info,
        log: LogPosition(
          walSalt: shared.walSalt, walEnd: UInt64(HeaderLayout.size), dataGeneration: shared.dataGeneration))
      // Commits whose records this process never saw (two checkpoints, or
      // a compaction, since it last looked): their keys are unknown.
      if tracking && found.record.sequence > last.sequence { events.append((checkpointed, nil)) }
      let bytes = try readExactly(wal, from: UInt64(HeaderLayout.size), to: shared.walEnd)
      let (replayed, end) = try replay(
        bytes, base: UInt64(HeaderLayout.size), salt: shared.walSalt, onto: checkpointed, through: shared.sequence,
        tracking: tracking, skippingThrough: found.record.sequence)
      events += replayed
      final = end
      f.wal = wal
      f.walHeader = header
    }

    guard final.sequence == shared.sequence, final.log.walEnd == shared.walEnd else { throw Moved() }
    publish(final)
    guard tracking else { return }
    var before = base
    for (version, changes) in events where version.sequence > before.sequence {
      subscribers.deliver(
        CommitEvent(
          firstSequence: before.sequence.next, sequence: version.sequence,
          commits: Int(version.sequence.rawValue - before.sequence.rawValue),
          changes: changes ?? WriteSet(isComplete: false), before: Snapshot(database: self, version: before),
          after: Snapshot(database: self, version: version)))
      before = version
    }
  }

  /// The bytes of a file from `start` to `end`, all of them, or `Moved`.
  ///
  /// The published end comes from shared memory: it is checked against the
  /// file's length before anything is allocated for it.
  private func readExactly(_ file: any StorageFile, from start: UInt64, to end: UInt64) throws -> [UInt8] {
    guard end > start else { return [] }
    guard end <= (try file.size()), end - start <= UInt64(Int.max) else { throw Moved() }
    let bytes = try file.read(at: start, count: Int(end - start))
    guard bytes.count == Int(end - start) else { throw Moved() }
    return bytes
  }

  /// Applies the records in `bytes` (the WAL from file position `base`,
  /// salted `salt`) on top of `version`. Records at or below
  /// `skippingThrough` before the first one applied are passed over (F-15:
  /// a log may begin with records its checkpoint holds); the others must
  /// follow on from `version` without a gap, through `through`. With `partial`, the bytes
  /// are a log read to its end: replaying stops after `through`, or where
  /// the log does.
  ///
  /// Returns, with `tracking`, one version per commit with its write set,
  /// and always the version after the last record read.
  func replay(
    _ bytes: [UInt8], base: UInt64, salt: UInt64, onto version: Version, through: CommitSequence,
    tracking: Bool, skippingThrough: CommitSequence = .zero, partial: Bool = false
  ) throws -> (commits: [(Version, WriteSet?)], final: Version) {
    var commits: [(Version, WriteSet?)] = []
    var trees = version.trees
    var sequence = version.sequence
    var end = base
    let owner = nextGeneration()
    func make() -> Version {
      Version(
        sequence: sequence, trees: trees, store: version.store, checkpoint: version.checkpoint,
        log: LogPosition(walSalt: salt, walEnd: end, dataGeneration: version.log.dataGeneration))
    }
    do {
      _ = try WALReader.scan(bytes, base: base, salt: salt, path: walPath, cipher: version.store.cipher) { record in
        if partial && record.sequence > through { throw Moved() }
        if record.sequence > skippingThrough || sequence != version.sequence {
          guard record.sequence == sequence.next else {
            throw EngineError(
              .corrupted, "WAL record has sequence \(record.sequence) where \(sequence.next) should follow",
              path: walPath, offset: record.position, rule: .f15)
          }
          // A version per commit needs its own generation: the next commit
          // must copy, not change, the nodes the previous version shows.
          var editor = TreeEditor(
            trees: trees,
            context: TreeContext(
              store: version.store, owner: tracking ? nextGeneration() : owner, nodeSize: options.nodeSize,
              largeValueThreshold: options.largeValueThreshold),
            trackingChanges: tracking)
          for op in record.operations { try editor.apply(op, position: record.position, path: walPath) }
          trees = editor.trees
          sequence = record.sequence
          end = record.position + UInt64(record.length)
          if tracking { commits.append((make(), editor.changes)) }
        } else {
          end = record.position + UInt64(record.length)
        }
      }
    } catch is Moved where partial {
      // Past `through`: the rest came after the checkpoint.
    }
    return (commits, make())
  }

  /// One event for commits whose changes are not known.
  func deliver(unknownChangesFrom before: Version, to after: Version) {
    subscribers.deliver(
      CommitEvent(
        firstSequence: before.sequence.next, sequence: after.sequence,
        commits: Int(after.sequence.rawValue - before.sequence.rawValue), changes: WriteSet(isComplete: false),
        before: Snapshot(database: self, version: before), after: Snapshot(database: self, version: after)))
  }

  // MARK: Watching

  /// Starts the thread that follows other processes' commits for
  /// subscribers, if it is not running.
  func startWatching() {
    guard let coordination else { return }
    watcher.withLock { w in
      guard w == nil, let watch = try? fs.watch(coordination.path) else { return }
      w = CommitWatcher(database: self, coordination: coordination, watch: watch)
    }
  }

  /// Stops the watching thread.
  func stopWatching() {
    watcher.withLock { w in
      w?.stop()
      w = nil
    }
  }
}

/// A thread that waits for writes to the coordination file and catches up,
/// so subscribers hear of other processes' commits without taking a
/// snapshot. Where the file system offers no events, it checks every 10 ms.
final class CommitWatcher: Sendable {
  private let stopped = Locked(false)
  private let watch: any FileWatcher
  /// Where it is counted as a watcher (FORMAT.md §10.2), so writers wake
  /// it; nil if it could not be.
  private let counted: Coordination?

  /// Starts watching. `watch` is already registered, so counting the
  /// watcher now means every publication after this is either seen by the
  /// first check of `current` or followed by a write that wakes `watch`.
  init(database: Database, coordination: Coordination, watch: any FileWatcher) {
    self.watch = watch
    counted = coordination.addWatcher() ? coordination : nil
    // A queue of its own: the block runs for as long as the watch does.
    DispatchQueue(label: "cairn.watch").async { [weak database, stopped, watch] in
      defer { watch.close() }
      while !stopped.withLock({ $0 }) {
        _ = watch.wait(timeout: 0.01)
        guard let db = database, !db.isClosed else { return }
        guard db.subscribers.count > 0, let c = db.coordination else { continue }
        if c.current != db.syncedWord.load(ordering: .acquiring) { try? db.catchUp() }
      }
    }
  }

  /// Stops the thread and uncounts the watcher. Called before the
  /// database closes its coordination file.
  func stop() {
    let wasRunning = stopped.withLock { s -> Bool in
      defer { s = true }
      return !s
    }
    if wasRunning { counted?.removeWatcher() }
  }
}
