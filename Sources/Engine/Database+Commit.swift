import Dispatch

/// The commit pipeline's state, guarded by `Database.pipeline`.
struct CommitPipeline {
  /// The log commits append to.
  var wal: WALWriter
  /// Whether a leader is fsyncing the log now.
  var syncing = false
  /// Whether a background flush is scheduled (``Durability/normal``).
  var flushScheduled = false
  /// Committed versions waiting for their record to be durable, in order,
  /// each with the log position its record ends at and its transaction's
  /// claim on the write lock, given back once it is published.
  var waiting: [(end: UInt64, version: Version, changes: WriteSet?, claim: WriteClaim)] = []
  /// The first failed write or fsync; every later write fails with it.
  var poison: EngineError?

  /// After a failed fsync: the waiting versions will never be published;
  /// their claims on the write lock go back, so other processes can write
  /// (and the next writer recovers what reached the log).
  mutating func abandonWaiting() {
    for entry in waiting { entry.claim.release() }
    waiting.removeAll()
  }
}

/// The commit pipeline: WAL append, group commit, publication.
///
/// 1. The writer (holding the gate) appends its record to the WAL and
///    queues the new version, tagged with the WAL position it ends at.
/// 2. It releases the gate, so the next writer can start, and waits until
///    the WAL is durable through its record.
/// 3. One waiter at a time becomes the leader: it fsyncs whatever has been
///    appended so far, outside the lock, then publishes every queued version
///    the fsync covered and wakes the others. Commits that arrived during an
///    fsync share the next one (group commit).
///
/// A version is published only once its record is durable (in ``Durability/full``
/// mode), so no snapshot ever sees a commit a crash could take back.
extension Database {
  /// A transaction whose WAL record would pass this many bytes commits by
  /// checkpoint instead: its nodes go straight to the data file, which saves
  /// writing everything twice.
  var largeTransactionBytes: Int { Swift.max(1 << 20, options.checkpointThreshold / 4) }

  /// Commits `tx`, which holds the gate and a claim on the write lock; the
  /// gate is released on every path, the claim once the commit is
  /// published or has failed.
  func commit(_ tx: WriteTransaction) throws {
    guard let hold = tx.takeHold(), let claim = tx.takeClaim() else {
      preconditionFailure("committing a transaction that holds no gate")
    }
    try checkWritable()
    guard tx.changed else { return }
    let sequence = hold.state.sequence.next

    guard let log = tx.log else {
      // Too big for one WAL record: checkpoint it straight into the data file.
      defer { claim.release() }
      try commitByCheckpoint(tx.trees, sequence, changes: tx.changes, holding: hold)
      return
    }

    // 1. Append the record.
    let wal = pipeline.withLock { $0.wal }
    let record = try wal.record(for: log, sequence: sequence)
    let end: UInt64
    do {
      end = try wal.write(record)
    } catch {
      throw setPoison(error)
    }
    counters.walBytesWritten.add(record.count)
    counters.commits.add(1)
    hold.state.trees = tx.trees
    hold.state.sequence = sequence
    hold.state.copiedSinceCheckpoint += tx.copiedBytes
    let copied = hold.state.copiedSinceCheckpoint
    let version = Version(
      sequence: sequence, trees: tx.trees, store: hold.state.store, checkpoint: hold.state.checkpoint,
      log: LogPosition(walSalt: wal.salt, walEnd: end, dataGeneration: hold.state.dataGeneration))
    pipeline.withLock { p in
      p.wal.appended(through: end)
      p.waiting.append((end, version, tx.changes, claim))
      if case .normal = options.durability {
        publish(&p, through: end)
        scheduleFlush(&p)
      }
    }

    // 2. Let the next writer in, then wait for durability.
    hold.release()
    if case .full = options.durability { try waitDurable(through: end) }

    if end > UInt64(options.checkpointThreshold) || copied > options.checkpointMemoryThreshold ?? Int.max {
      // The commit is durable; a failed checkpoint poisons the store and the
      // next write reports it.
      try? checkpointIfNeeded()
    }
  }

  /// Waits until the WAL is durable through `end`, leading an fsync if no
  /// one else is. Throws if an fsync failed before that point was reached.
  func waitDurable(through end: UInt64) throws {
    while true {
      // Wait until the log is durable, poisoned, or free to fsync.
      let lead = try pipeline.withLock(when: { $0.wal.durable >= end || $0.poison != nil || !$0.syncing }) {
        p throws(EngineError) -> (wal: WALWriter, target: UInt64)? in
        if p.wal.durable >= end { return nil }
        if let poison = p.poison {
          throw EngineError(
            .poisoned, "the WAL fsync failed; this commit is not durable", path: poison.path,
            underlying: poison.description)
        }
        p.syncing = true
        return (p.wal, p.wal.written)
      }
      guard let lead else { return }

      // 3. Lead: fsync everything appended so far, outside the lock.
      var failure: Error?
      do {
        try lead.wal.sync()
        counters.walSyncs.add(1)
      } catch {
        failure = error
      }
      pipeline.withLock(notify: true) { p in
        p.syncing = false
        if let failure {
          // Linux forgets the dirty pages of a failed fsync and reports
          // success next time: nothing after this point can be trusted.
          if p.poison == nil { p.poison = failure as? EngineError ?? EngineError(.io, "\(failure)") }
          p.abandonWaiting()
        } else {
          p.wal.synced(through: lead.target)
          publish(&p, through: p.wal.durable)
        }
      }
    }
  }

  /// Publishes the newest waiting version whose record ends at or before
  /// `end` — in the coordination file for other processes, then to this
  /// one's snapshots — hands every one of them to the subscribers, in
  /// order, and gives back their claims on the write lock. Called under the
  /// pipeline lock.
  func publish(_ p: inout CommitPipeline, through end: UInt64) {
    var n = 0
    while n < p.waiting.count && p.waiting[n].end <= end { n += 1 }
    guard n > 0 else { return }
    let ready = p.waiting[..<n]
    let newest = ready[ready.endIndex - 1].version
    let durable = p.wal.durable
    let word = follower.withLock { f -> UInt64? in
      // Read even with no subscriber: whether there is one is asked only
      // after publishing, so one that subscribes meanwhile is not skipped.
      let before = current
      let word = coordination?.publish(newest.sharedState(walDurable: durable))
      if let word { f.followed(word, self) }
      publish(newest)
      if subscribers.count > 0 { deliver(ready.lazy.map { ($0.version, $0.changes) }, after: before) }
      return word
    }
    if let word { coordination?.notify(word) }
    for entry in ready { entry.claim.release() }
    p.waiting.removeFirst(n)
  }

  /// In ``Durability/normal`` mode, arranges an fsync within the sync interval.
  /// Called under the pipeline lock.
  func scheduleFlush(_ p: inout CommitPipeline) {
    guard !p.flushScheduled, case .normal(let ms) = options.durability else { return }
    p.flushScheduled = true
    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(ms)) { [weak self] in
      self?.backgroundFlush()
    }
  }

  private func backgroundFlush() {
    let target: UInt64? = pipeline.withLock { p in
      guard p.flushScheduled, p.poison == nil else { return nil }
      p.flushScheduled = false
      return p.wal.written
    }
    guard let target else { return }
    // A failure poisons the store; the next write reports it.
    try? waitDurable(through: target)
  }
}
