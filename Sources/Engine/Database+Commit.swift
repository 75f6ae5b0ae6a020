import Dispatch

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

  func nextGeneration() -> UInt64 {
    generation += 1
    return generation
  }

  /// Commits `tx`. Called with the gate held; releases it on every path.
  func commit(_ tx: WriteTransaction) throws {
    var holdingGate = true
    defer { if holdingGate { gate.release() } }
    try checkWritable()
    guard tx.changed else { return }
    let sequence = lastSequence.next

    guard let log = tx.log, let wal else {
      // Too big for one WAL record: checkpoint it straight into the data file.
      try commitByCheckpoint(tx.trees, sequence, changes: tx.changes)
      return
    }

    // 1. Append the record.
    let (position, durable) = syncLock.withLock { (walWritten, walDurable) }
    let record = log.record(
      sequence: sequence, syncedThrough: WALPosition(durable), position: position, salt: wal.salt)
    do {
      try wal.file.write(record, at: position)
    } catch {
      throw setPoison(error)
    }
    counters.walBytesWritten.add(record.count)
    counters.commits.add(1)
    committedTrees = tx.trees
    lastSequence = sequence
    let end = position + UInt64(record.count)
    let version = Version(sequence: sequence, trees: tx.trees, store: store, checkpoint: lastCheckpoint)
    syncLock.withLock {
      walWritten = end
      pendingVersions.append((end, version, tx.changes))
      if case .normal = options.durability {
        publishLocked(through: end)
        scheduleFlushLocked()
      }
    }

    // 2. Let the next writer in, then wait for durability.
    gate.release()
    holdingGate = false
    if case .full = options.durability { try waitDurable(through: end) }

    if end > UInt64(options.checkpointThreshold) {
      // The commit is durable; a failed checkpoint poisons the store and the
      // next write reports it.
      try? checkpointIfNeeded()
    }
  }

  /// Waits until the WAL is durable through `end`, leading an fsync if no
  /// one else is. Throws if an fsync failed before that point was reached.
  func waitDurable(through end: UInt64) throws {
    syncLock.lock()
    defer { syncLock.unlock() }
    while walDurable < end {
      if let poison {
        throw EngineError(
          .poisoned, "the WAL fsync failed; this commit is not durable", path: poison.path,
          underlying: poison.description)
      }
      if syncing {
        syncCondition.wait(syncLock)
        continue
      }
      // 3. Lead: fsync everything appended so far.
      syncing = true
      let target = walWritten
      let file = wal?.file
      syncLock.unlock()
      var failure: Error?
      do {
        try file?.sync()
        counters.walSyncs.add(1)
      } catch {
        failure = error
      }
      syncLock.lock()
      syncing = false
      if let failure {
        // Linux forgets the dirty pages of a failed fsync and reports
        // success next time: nothing after this point can be trusted.
        if poison == nil { poison = failure as? EngineError ?? EngineError(.io, "\(failure)") }
      } else {
        walDurable = Swift.max(walDurable, target)
        publishLocked(through: walDurable)
      }
      syncCondition.broadcast()
    }
  }

  /// Publishes the newest queued version whose record ends at or before
  /// `end`, then hands every one of them to the subscribers, in order.
  func publishLocked(through end: UInt64) {
    var n = 0
    while n < pendingVersions.count && pendingVersions[n].end <= end { n += 1 }
    guard n > 0 else { return }
    let published = pendingVersions[..<n]
    // Read even with no subscriber: whether there is one is asked only
    // after publishing, so one that subscribes meanwhile is not skipped.
    let before = current
    publish(published[published.endIndex - 1].version)
    if subscribers.count > 0 { deliver(published.lazy.map { ($0.version, $0.changes) }, after: before) }
    pendingVersions.removeFirst(n)
  }

  /// In ``Durability/normal`` mode, arranges an fsync within the sync interval.
  func scheduleFlushLocked() {
    guard !flushScheduled, case .normal(let ms) = options.durability else { return }
    flushScheduled = true
    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(ms)) { [weak self] in
      self?.backgroundFlush()
    }
  }

  private func backgroundFlush() {
    let target: UInt64? = syncLock.withLock {
      guard flushScheduled, poison == nil else { return nil }
      flushScheduled = false
      return walWritten
    }
    guard let target else { return }
    // A failure poisons the store; the next write reports it.
    try? waitDurable(through: target)
  }
}
