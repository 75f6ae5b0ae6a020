/// What a compaction did.
public struct CompactionReport: Sendable, Equatable {
  /// Data file length before.
  public var bytesBefore: UInt64
  /// Data file length after.
  public var bytesAfter: UInt64
  /// Wall-clock seconds taken.
  public var seconds: Double
}

/// Compaction: rewriting the live data into a fresh data file.
///
/// The protocol, with what a crash at each step leaves (FORMAT.md §6):
/// 1. Checkpoint, so the WAL is empty and every tree is on disk.
/// 2. Copy every live node and large value into `cairn.data.compact`, in key
///    order (children before parents), and a commit record naming the new
///    roots with the same sequence; fsync before and after the record.
///    (Crash: the old files are untouched; the leftover is ignored.)
/// 3. Check every tree of the new file (every block read back, every
///    invariant, every count); stop here if anything is wrong.
/// 4. Write and fsync `cairn.wal.new`, naming the new commit record.
/// 5. Rename the new data file over `cairn.data`, then the new log over
///    `cairn.wal`, and fsync the folder. (Crash between the renames: the new
///    data file ends with its commit record, which recovery takes; the old
///    log is empty. Either way one complete store.)
/// 6. Switch to the new file. Snapshots taken before keep reading the old
///    one, which stays open (unlinked) until the last of them is released.
extension Database {
  /// Rewrites the live data of the latest commit into a fresh data file and
  /// swaps it in atomically, reclaiming all garbage.
  ///
  /// Writers wait while it runs; readers do not. A crash at any moment
  /// leaves either the old or the new store, complete.
  ///
  /// - Throws: ``EngineError/Code/readOnly``, ``EngineError/Code/closed``,
  ///   ``EngineError/Code/poisoned``; an I/O error before the swap leaves the
  ///   store as it was, after it poisons the store.
  @discardableResult
  public func compact() throws -> CompactionReport {
    try checkpointAndCompact(rekeying: nil)
  }

  /// Takes the writer and the write lock, checkpoints, and compacts; with
  /// `rekeying`, under that encryption, which this handle then opens files
  /// with.
  private func checkpointAndCompact(rekeying: KeyChange?) throws -> CompactionReport {
    guard !options.readOnly else { throw EngineError(.readOnly, "the store was opened read-only", path: path) }
    let hold = gate.acquire()
    try checkWritable()
    let claim = try claimWriteLock(holding: hold, timeout: options.busyTimeout)
    defer { claim.release() }
    try checkpoint(holding: hold)
    let report = try compact(holding: hold, rekeying: rekeying)
    if let rekeying { encryption.withLock { $0 = rekeying.encryption } }
    return report
  }

  /// Changes the store's encryption: a new key or passphrase for an
  /// encrypted store, `nil` to decrypt one, or a key for a clear store to
  /// encrypt it. Every block is rewritten under the new key by a compaction
  /// (the WAL is checkpointed first, so no record under the old key is
  /// left), and the swap is the compaction's atomic rename: a crash at any
  /// moment leaves the store opening with the old key or with the new one,
  /// whole.
  ///
  /// Other processes with the store open keep reading snapshots they hold;
  /// their next read of the new file needs the new key (until reopened with
  /// it, they get ``EngineError/Code/wrongKey``). Writers wait while it runs.
  ///
  /// - Throws: ``EngineError/Code/invalidArgument`` for a key that is not 32
  ///   bytes or an empty passphrase; what ``compact()`` throws.
  @discardableResult
  public func rekey(to encryption: Encryption?) throws -> CompactionReport {
    let encryption = try encryption.map { (e) throws(EngineError) in try e.validated() }
    return try checkpointAndCompact(rekeying: KeyChange(encryption: encryption))
  }

  /// A new encryption for the compacted file (``rekey(to:)``).
  struct KeyChange {
    var encryption: Encryption?
  }

  /// Runs a compaction, after a checkpoint. Called holding the gate and a
  /// claim on the write lock. With `rekeying`, the new file is written
  /// under that encryption, with a new key block (FORMAT.md §11.4).
  func compact(holding hold: borrowing WriterGate.Hold, rekeying: KeyChange? = nil) throws -> CompactionReport {
    let started = currentMilliseconds()
    let before = hold.state.checkpoint.fileBytes
    let tempPath = Path.join(path, StoreFiles.compactData)
    if fs.exists(tempPath) { try fs.remove(tempPath) }

    // 2. Copy the live trees into the new file: its header (and key block)
    //    first, the old ones unless the key changes.
    let oldStore = hold.state.store
    let oldHeader = try RecoveryPlan.readDataHeader(oldStore.file)
    var head = try oldStore.file.read(at: 0, count: HeaderLayout.size)
    var cipher = oldStore.cipher
    if oldHeader.encrypted && rekeying == nil {
      head += try oldStore.file.read(at: KeyBlock.offset, count: KeyBlock.blockSize)
    }
    if let rekeying {
      let key = try rekeying.encryption.map { (e) throws(EngineError) in try KeyBlock.create(for: e, storeID: storeID) }
      head = DataFileHeader(
        storeID: storeID, createdMilliseconds: oldHeader.createdMilliseconds, encrypted: key != nil
      ).encode()
      if let key { head += key.0.framed() }
      cipher = key?.1
    }
    let file = try fs.open(tempPath, .create)
    let newStore = NodeStore(
      file: file, cache: NodeCache(capacity: options.cacheSize), counters: counters, cipher: cipher,
      mapped: options.mapsDataFile)
    var installed = false
    defer {
      if !installed {
        file.close()
        try? fs.remove(tempPath)
      }
    }
    try file.truncate(to: 0)
    try file.write(head, at: 0)
    var writer = CheckpointWriter(
      target: newStore, copyingFrom: oldStore, start: UInt64(head.count), compress: options.compression)
    var trees: [String: TreeRoot] = [:]
    for (name, tree) in hold.state.trees {
      var t = tree
      if let root = tree.root {
        t.root = .disk(try writer.write(root))
        t.pin(newStore)
      }
      trees[name] = t
    }
    let sequence = hold.state.sequence
    let (offset, checkpoint) = try writer.commit(trees, sequence: sequence, previous: .none)

    // 3. Read every tree of the new file back before trusting it.
    let report = TreeChecker.verify(trees, TreeContext(store: newStore))
    guard report.isClean else {
      throw EngineError(
        .corrupted, "the compacted file failed its check, so it was not used: \(report.problems.prefix(3))",
        path: tempPath)
    }

    // 4. A log naming the new commit record.
    let log = try WALWriter.prepare(
      in: path, fs: fs, storeID: storeID, continuing: sequence, at: BlockOffset(offset), cipher: cipher)

    // 5. Swap both files in. From the first rename on, a failure leaves the
    //    files in a state only recovery should judge: poison the store.
    let wal: WALWriter
    do {
      try fs.rename(tempPath, to: dataPath)
      installed = true
      wal = try log.install()
    } catch {
      log.discard()
      throw setPoison(error)
    }

    // 6. Switch over; other processes see the data generation move and
    //    open the new file.
    hold.state.store = newStore
    hold.state.trees = trees
    hold.state.checkpoint = checkpoint
    hold.state.copiedSinceCheckpoint = 0
    hold.state.dataGeneration &+= 1
    install(wal)
    publish(
      rewritten: Version(
        sequence: sequence, trees: trees, store: newStore, checkpoint: checkpoint,
        log: LogPosition(walSalt: wal.salt, walEnd: wal.written, dataGeneration: hold.state.dataGeneration)),
      wal: wal, commit: nil)
    oldStore.cache.removeAll()
    counters.compactions.add(1)
    return CompactionReport(
      bytesBefore: before, bytesAfter: checkpoint.fileBytes, seconds: Double(currentMilliseconds() - started) / 1000)
  }

  /// Compacts after a checkpoint when garbage passes the configured share.
  func compactIfWasteful(holding hold: borrowing WriterGate.Hold) {
    let checkpoint = hold.state.checkpoint
    guard let ratio = options.autoCompactGarbageRatio,
      checkpoint.fileBytes >= UInt64(options.autoCompactMinimumBytes)
    else { return }
    let garbage = checkpoint.fileBytes.minusClamped(checkpoint.liveBytes)
    guard Double(garbage) > ratio * Double(checkpoint.fileBytes) else { return }
    // A failure before the swap leaves the store as it was; after it, the
    // store is poisoned and the next write says so.
    _ = try? compact(holding: hold)
  }
}
